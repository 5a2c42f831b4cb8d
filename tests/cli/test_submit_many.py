"""`kakehashi submit` with several scripts or `--many FILE`: one request, all jobs or none (docs/decisions/0053)."""

from __future__ import annotations

import json

import pytest

from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def test_several_scripts_are_submitted_together_and_a_retry_with_the_key_submits_nothing_more(logged_in, tmp_path):
    scripts = []
    for name in ("prep", "train", "evaluate"):
        path = tmp_path / f"{name}.sh"
        path.write_text(f"echo {name}\n")
        scripts.append(str(path))
    args = ("submit", *scripts, "--project", "vision", "--hardware", "local-cpu", "--walltime", "10m",
            "--env", "SEED=1", "--idempotency-key", "pipeline-1")
    result = logged_in(*args)
    assert result.code == 0, result.err
    assert "Submitted 3 jobs." in result.out
    jobs = list(Job.objects.order_by("pk"))
    assert [job.name for job in jobs] == ["prep", "train", "evaluate"]
    assert [job.script for job in jobs] == ["echo prep\n", "echo train\n", "echo evaluate\n"]
    assert all(job.env == {"SEED": "1"} for job in jobs) and LedgerEntry.objects.count() == 3
    for job in jobs:
        assert any(line.split()[:3] == [str(job.pk), "queued", job.name] for line in result.out.splitlines()), result.out
    again = logged_in(*args)
    assert again.code == 0 and "Already submitted" in again.out and Job.objects.count() == 3


def test_many_reads_a_json_list_of_jobs_with_the_options_as_defaults(logged_in, tmp_path):
    listed = tmp_path / "jobs.json"
    listed.write_text(json.dumps([{"name": f"seed-{i}", "script": f"echo {i}\n", "env": {"SEED": str(i)}}
                                  for i in range(4)] + [{"name": "long", "script": "sleep 1\n", "walltime": "30m"}]))
    result = logged_in("--json", "submit", "--many", str(listed), "--project", "vision", "--hardware", "local-cpu",
                       "--walltime", "10m")
    assert result.code == 0, result.err
    answer = result.json()
    assert answer["created"] is True and [j["name"] for j in answer["jobs"]] == [
        "seed-0", "seed-1", "seed-2", "seed-3", "long"]
    assert dict(Job.objects.values_list("name", "walltime_seconds"))["long"] == 1800
    assert dict(Job.objects.values_list("name", "walltime_seconds"))["seed-0"] == 600


def test_a_batch_the_budget_cannot_cover_is_refused_whole_with_the_portals_words(logged_in, tmp_path):
    listed = tmp_path / "jobs.json"
    listed.write_text(json.dumps([{"name": f"big-{i}", "script": "true\n"} for i in range(6)]))
    result = logged_in("submit", "--many", str(listed), "--project", "vision", "--hardware", "local-cpu",
                       "--walltime", "2h")  # 6 × 20 points of a 100-point budget
    assert result.code == 3 and "402 budget_exceeded" in result.err and "These 6 jobs need" in result.err
    assert Job.objects.count() == 0 and LedgerEntry.objects.count() == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "not a list"}')
    assert logged_in("submit", "--many", str(bad), "--project", "vision").code == 2
