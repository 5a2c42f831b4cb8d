"""The Lab extension's built frontend is committed (installing it needs no node): it must be the build of the
sources next to it, or a change to src/ would never reach a researcher's Lab. `make lab-extension` rebuilds it and
records the SHA-256 of its sources and its files (jupyterhub/kakehashi-lab/build_inputs.py)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

from tests.hub.conftest import HUB_DIR

PACKAGE = HUB_DIR / "kakehashi-lab"
_spec = importlib.util.spec_from_file_location("kakehashi_lab_build_inputs", PACKAGE / "build_inputs.py")
build_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_inputs)


def test_the_committed_lab_extension_is_the_build_of_the_sources_in_the_repository():
    assert build_inputs.stale() == []


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "kakehashi-lab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("node_modules", "lib", "*.tsbuildinfo", "*.egg-info"))
    assert build_inputs.stale(copy) == []
    return copy


def test_a_source_changed_without_a_rebuild_is_named_with_the_command_that_rebuilds(tmp_path):
    copy = _copy(tmp_path)
    form = copy / "src" / "form.ts"
    form.write_text(form.read_text() + "\n// changed\n")
    (copy / "src" / "new.ts").write_text("export const x = 1;\n")
    (copy / "style" / "index.css").unlink()
    assert build_inputs.stale(copy) == [
        "changed since the bundle was built: src/form.ts, src/new.ts, style/index.css; run make lab-extension (at the "
        "repository's root), then commit jupyterhub/kakehashi-lab/kakehashi_lab/labextension/"]


def test_a_bundle_rebuilt_without_recording_its_sources_is_noticed(tmp_path):
    copy = _copy(tmp_path)
    static = copy / build_inputs.BUNDLE / "static"
    entry = next(static.glob("remoteEntry.*.js"))
    entry.rename(static / "remoteEntry.0123456789abcdef.js")
    [problem] = build_inputs.stale(copy)
    assert problem.startswith(f"the bundle's files are not the ones recorded with its build (kakehashi_lab/labextension/"
                              f"static/remoteEntry.0123456789abcdef.js, kakehashi_lab/labextension/static/{entry.name})")
    (copy / build_inputs.BUNDLE / build_inputs.RECORD).unlink()
    assert build_inputs.stale(copy) == [
        "kakehashi_lab/labextension/build-inputs.json is missing: the bundle's sources were not recorded; run make "
        "lab-extension (at the repository's root), then commit jupyterhub/kakehashi-lab/kakehashi_lab/labextension/"]


def test_the_check_runs_as_a_script_and_fails_with_the_reason(tmp_path):
    copy = _copy(tmp_path)
    ok = subprocess.run([sys.executable, copy / "build_inputs.py"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    (copy / "package.json").write_text((copy / "package.json").read_text().replace('"0.1.0"', '"0.1.1"', 1))
    stale = subprocess.run([sys.executable, copy / "build_inputs.py"], capture_output=True, text=True)
    assert stale.returncode == 1 and "changed since the bundle was built: package.json" in stale.stderr
    # --write (what make lab-extension runs after the build) records the sources as they are now.
    written = subprocess.run([sys.executable, copy / "build_inputs.py", "--write"], capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    assert build_inputs.stale(copy) == []
