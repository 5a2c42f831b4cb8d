"""The sweep page on the test cluster: each point's parameters, state, time, cost and reported metrics, the
sweep's total, and "Re-run failed points"."""

from __future__ import annotations

import re
import uuid

import pytest

from portal.budgets.templatetags.money import money
from portal.catalog.models import HardwareType
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import JobRequest
from portal.jobs.metrics import parse_metrics
from portal.jobs.models import Job, JobGroup
from tests.conftest import wait_for

pytestmark = [pytest.mark.cluster]

# Point LR=0.2 fails on its first attempt only (a marker file in the account's home says it was tried).
SCRIPT = ('if [ "$LR" = "0.2" ] && [ ! -e "$HOME/kh-rerun-$SWEEP_MARK" ]; then touch "$HOME/kh-rerun-$SWEEP_MARK"; exit 3; fi\n'
          'sleep 2\n'  # a point that ran a few seconds costs something (Slurm records whole seconds)
          'python3 -c \'import json, os; json.dump({"loss": round(1 - float(os.environ["LR"]), 6), "epochs": 3, '
          '"note": "text is left out"}, open(os.environ["KAKEHASHI_OUTPUT_DIR"] + "/metrics.json", "w"))\'\n')


def test_metrics_json_keeps_only_named_finite_numbers():
    assert parse_metrics(b'{"loss": 0.5, "ok": true, "x y": 1, "acc": "9", "n": 3, "inf": 1e999}') == {"loss": 0.5, "n": 3}
    assert parse_metrics(b"[1, 2]") == {} and parse_metrics(b"not json") == {} and parse_metrics(b"\xff") == {}


def _all_final(group: JobGroup) -> list[Job] | None:
    jobs = list(group.jobs.order_by("pk"))
    return jobs if all(job.is_final and job.artifacts.exists() == (job.state == "completed") for job in jobs) else None


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_sweep_page_shows_each_points_metrics_and_cost_and_re_runs_the_failed_point(client, hpc_site, live_worker):
    req = JobRequest(project=hpc_site.project, name="lr", script=SCRIPT, walltime="00:10:00",
                             hardware=HardwareType.objects.get(slug="slurm-a100x1"),
                             env={"SWEEP_MARK": uuid.uuid4().hex[:12]})
    group = submit_sweep(hpc_site.alice, req, {"LR": [0.1, 0.2]}).group
    jobs = wait_for(lambda: _all_final(group), timeout=150, message="both points ended, outputs collected")
    assert [j.state for j in jobs] == ["completed", "failed"]
    client.force_login(hpc_site.alice)
    html = client.get(f"/jobs/groups/{group.pk}/").content.decode()
    assert "LR = 0.1, 0.2" in html and "<code class=\"me-2\">LR=0.1</code>" in html and "{&#x27;LR&#x27;" not in html
    headers = re.findall(r'data-metric="([^"]+)"', html)
    assert headers == ["epochs", "loss"]  # "note" was text: left out
    first_row = html.split(f'<tr data-job="{jobs[0].pk}">')[1].split("</tr>")[0]
    assert re.findall(r"data-metric-value>([^<]*)<", first_row) == ["3", "0.9"]
    total = sum(j.cost_amount for j in jobs)
    assert total > 0 and f"Sweep cost: <strong>{money(total)} points</strong>" in html
    assert "Re-run failed points (1)" in html

    answer = client.post(f"/jobs/groups/{group.pk}/rerun/", follow=True)
    assert "Re-running 1 point(s) of sweep lr: lr-1-r1." in answer.content.decode()
    rerun = Job.objects.get(group=group, name="lr-1-r1")
    assert rerun.parameters == {"LR": 0.2} and rerun.array_index is None
    rerun = wait_for(lambda: Job.objects.filter(pk=rerun.pk, state="completed", metrics__loss=0.8).first(), timeout=120,
                     message="the re-run point completed with its metrics")
    html = client.get(f"/jobs/groups/{group.pk}/").content.decode()
    assert "Re-run failed points" not in html  # its latest attempt succeeded
    assert client.post(f"/jobs/groups/{group.pk}/rerun/", follow=True).content.decode().count(
        "no point of this sweep failed or ran out of time") == 1


@pytest.mark.django_db
def test_someone_outside_the_project_cannot_see_or_re_run_a_sweep(client, local_site):
    req = JobRequest(project=local_site.project, name="s", script="true", hardware=local_site.hardware,
                             walltime="00:01:00")
    group = submit_sweep(local_site.alice, req, {"X": [1, 2]}).group
    Job.objects.filter(group=group).update(state="failed")
    client.force_login(local_site.mallory)
    assert client.get(f"/jobs/groups/{group.pk}/").status_code == 404
    assert client.post(f"/jobs/groups/{group.pk}/rerun/").status_code == 404
    assert Job.objects.filter(group=group).count() == 2
