"""bash -n at submit (backends.safety.bash_syntax_error): a clean parse is remembered, a refusal never is."""

from __future__ import annotations

import subprocess

from backends import safety


def test_a_script_bash_parsed_is_not_parsed_again_and_a_broken_one_is_refused_every_time(monkeypatch):
    calls = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):
        calls.append(args[0])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting_run)
    good, broken = "echo remembered-once\nfor i in 1 2; do echo $i; done\n", "if true; then echo never-closed\n"
    assert safety.bash_syntax_error(good) is None
    assert safety.bash_syntax_error(good) is None
    assert len(calls) == 1
    first = safety.bash_syntax_error(broken)
    assert first and "syntax error" in first
    assert safety.bash_syntax_error(broken) == first
    assert len(calls) == 3  # bash asked again: a refusal's message is bash's own


def test_only_the_last_parsed_scripts_are_remembered(monkeypatch):
    monkeypatch.setattr(safety, "_PARSED_KEPT", 2)
    monkeypatch.setattr(safety, "_PARSED", type(safety._PARSED)())
    for n in range(3):
        assert safety.bash_syntax_error(f"echo {n}\n") is None
    assert len(safety._PARSED) == 2
