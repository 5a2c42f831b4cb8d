"""The kakehashi-lab handlers on a user's real JupyterLab server (spawned by the hub), called as Lab's frontend
calls them, forward to the real portal with the server's own hub token."""

from __future__ import annotations

import json

import pytest
import requests

from tests.conftest import wait_for
from tests.hub.conftest import notebook

pytestmark = [pytest.mark.hub, pytest.mark.django_db(transaction=True)]


class Lab:
    """alice's JupyterLab server with analysis.ipynb in her home, called with a token of hers (as Lab's frontend
    is authenticated by the server's login)."""

    def __init__(self, hub, site) -> None:
        self.site, self.token = site, hub.token("alice")
        self.server = hub.start_server("alice", self.token)
        self.home = hub.home("alice")
        (self.home / "analysis.ipynb").write_text(json.dumps(notebook()))

    def call(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"token {self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.server}kakehashi/{path}", timeout=60, headers=headers, **kwargs)

    def run(self, submit: dict) -> tuple[int, dict]:
        """Submit as the dialog does, follow the job as the dialog does; (job id, its last status)."""
        answer = self.call("POST", "jobs", json=submit)
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        status = wait_for(lambda: (s := self.call("GET", f"jobs/{job_id}").json())["executed"] and s, timeout=180,
                          message=f"job {job_id} to end with its executed notebook")
        return job_id, status


@pytest.fixture
def lab(hub_portal) -> Lab:
    return Lab(hub_portal.hub, hub_portal)


def test_lab_lists_the_users_projects_and_what_one_of_them_may_use(lab):
    projects = lab.call("GET", "projects")
    assert projects.status_code == 200, projects.text
    assert [p["slug"] for p in projects.json()["projects"]] == ["vision"]
    choices = lab.call("GET", "choices", params={"project": "vision"}).json()
    assert [h["slug"] for h in choices["hardware"]] == ["local-cpu"]
    cpu = next(p for p in choices["presets"] if p["slug"] == "cpu")
    assert cpu["hardware"] == "local-cpu" and cpu["price_per_node_hour"] == {"amount": "10.0000", "unit": "points",
                                                                     "text": "10.00 points"}
    assert next(p for p in choices["presets"] if p["slug"] == "8x-a100")["hardware"] is None


def test_lab_reads_the_parameters_cell_of_the_saved_notebook(lab):
    answer = lab.call("GET", "parameters", params={"path": "analysis.ipynb"}).json()
    assert {k: answer[k] for k in ("path", "name", "parameters")} == {
        "path": "analysis.ipynb", "name": "analysis",
        "parameters": [{"name": "lr", "default": "0.1"}, {"name": "epochs", "default": "1"}]}
    # What may travel with it: the files beside it (not itself), within the limits the dialog shows.
    assert "analysis.ipynb" not in [f["path"] for f in answer["beside"]]
    assert answer["limits"] == {"files": 50, "bytes": 8 * 1024 * 1024}
    missing = lab.call("GET", "parameters", params={"path": "nowhere.ipynb"})
    assert missing.status_code == 404 and missing.json()["field"] == "path"


def test_a_dry_run_from_lab_shows_the_estimate_and_the_budget_left_and_records_nothing(lab):
    from portal.jobs.models import Job

    answer = lab.call("POST", "jobs", json={"path": "analysis.ipynb", "project": "vision", "hardware": "local-cpu",
                                            "walltime": "30m", "parameters": {"lr": "0.5"}, "dry_run": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dry_run"] is True and body["id"] is None
    assert body["estimate"] == {"amount": "5.0000", "unit": "points", "text": "5.00 points"}  # half a node-hour at 10 points
    assert body["budget"] == {"available": "100.0000", "after": "95.0000", "unit": "points", "fits": True,
                              "text": {"available": "100.00", "after": "95.00"}}
    assert body["parameters"] == {"lr": 0.5}
    assert Job.objects.count() == 0


def test_parameters_are_checked_in_lab_before_anything_is_sent(lab):
    from portal.jobs.models import Job

    base = {"path": "analysis.ipynb", "project": "vision", "hardware": "local-cpu", "walltime": "10m"}
    unknown = lab.call("POST", "jobs", json={**base, "parameters": {"alpha": "1"}})
    assert unknown.status_code == 400 and unknown.json()["field"] == "parameters.alpha"
    assert "does not set 'alpha'" in unknown.json()["detail"]
    not_a_value = lab.call("POST", "jobs", json={**base, "parameters": {"lr": "0.1 +"}})
    assert not_a_value.status_code == 400 and "is not a Python value" in not_a_value.json()["detail"]
    # The portal's own refusals come back with its words and field.
    walltime = lab.call("POST", "jobs", json={**base, "walltime": "soon"})
    assert walltime.status_code == 400 and walltime.json()["field"] == "walltime"
    assert Job.objects.count() == 0


def test_the_handlers_keep_labs_login_and_xsrf_protection(lab):
    body = {"path": "analysis.ipynb", "project": "vision", "hardware": "local-cpu", "dry_run": True}
    anonymous = requests.post(f"{lab.server}kakehashi/jobs", json=body, timeout=30, allow_redirects=False)
    assert anonymous.status_code == 403
    # Signed in to Lab through the hub (a cookie), but without Lab's XSRF token: refused too.
    browser = lab.site.hub.session("alice")
    assert browser.get(f"{lab.server}lab", timeout=60).status_code == 200
    assert browser.get(f"{lab.server}kakehashi/projects", timeout=60).status_code == 200
    no_xsrf = browser.post(f"{lab.server}kakehashi/jobs", json=body, timeout=30)
    assert no_xsrf.status_code == 403
    with_xsrf = browser.post(f"{lab.server}kakehashi/jobs", json=body, timeout=30,
                             headers={"X-XSRFToken": browser.cookies.get("_xsrf", path="/user/alice/")})
    assert with_xsrf.status_code == 200, with_xsrf.text


@pytest.mark.worker
def test_a_notebook_submitted_from_lab_runs_and_comes_back_next_to_the_original(lab, live_worker):
    from portal.jobs.models import Job, JobState

    submit = {"path": "analysis.ipynb", "project": "vision", "hardware": "local-cpu", "walltime": "00:10:00",
              "parameters": {"lr": "0.25", "epochs": "4"}}
    first = lab.call("POST", "jobs", json=submit, headers={"Idempotency-Key": "dialog-1"})
    assert first.status_code == 201, first.text
    job_id = first.json()["id"]
    assert first.json()["link"] == f"/services/kakehashi/jobs/{job_id}/"
    # The same dialog submitting again (a double click, a retry) is the same job.
    again = lab.call("POST", "jobs", json=submit, headers={"Idempotency-Key": "dialog-1"})
    assert again.json()["id"] == job_id and Job.objects.count() == 1
    job = Job.objects.get(pk=job_id)
    assert (job.user, job.project.slug, job.name, job.parameters) == (lab.site.alice, "vision", "analysis",
                                                                      {"lr": 0.25, "epochs": 4})

    status = wait_for(lambda: (s := lab.call("GET", f"jobs/{job_id}").json())["executed"] and s, timeout=120,
                      message="the job to end with its executed notebook")
    assert status["state"] == JobState.COMPLETED and status["ended"], status
    assert status["link"] == f"/services/kakehashi/jobs/{job_id}/"
    not_yet = lab.call("POST", "jobs/999999/executed", json={"path": "analysis.ipynb"})
    assert not_yet.status_code == 404  # another job, or one that does not exist: the portal's 404

    saved = lab.call("POST", f"jobs/{job_id}/executed", json={"path": "analysis.ipynb"})
    assert saved.status_code == 201, saved.text
    assert saved.json()["path"] == f"analysis.kakehashi-{job_id}.ipynb"
    executed = json.loads((lab.home / f"analysis.kakehashi-{job_id}.ipynb").read_text())
    assert executed["metadata"]["papermill"]["parameters"] == {"lr": 0.25, "epochs": 4}
    assert "result=1.0" in json.dumps(executed["cells"])
    assert json.loads((lab.home / "analysis.ipynb").read_text()) == notebook()  # the original is untouched


@pytest.mark.worker
def test_a_failing_notebook_comes_back_to_lab_with_its_error(lab, live_worker):
    from portal.jobs.models import JobState

    (lab.home / "broken.ipynb").write_text(json.dumps(notebook(source="raise ValueError(f'bad lr {lr}')")))
    job_id, status = lab.run({"path": "broken.ipynb", "project": "vision", "hardware": "local-cpu",
                              "walltime": "00:10:00", "parameters": {"lr": "7"}})
    assert status["state"] == JobState.FAILED and status["ended"], status
    saved = lab.call("POST", f"jobs/{job_id}/executed", json={"path": "broken.ipynb"}).json()["path"]
    assert saved == f"broken.kakehashi-{job_id}.ipynb"
    errors = [o for cell in json.loads((lab.home / saved).read_text())["cells"] for o in cell.get("outputs", [])
              if o["output_type"] == "error"]
    assert errors and errors[0]["ename"] == "ValueError" and errors[0]["evalue"] == "bad lr 7"


@pytest.mark.cluster
@pytest.mark.worker
def test_a_notebook_submitted_from_lab_runs_on_the_slurm_test_cluster(hub, hub_settings, hpc_site, live_worker):
    from portal.jobs.models import Job, JobState

    lab = Lab(hub, hpc_site)
    choices = lab.call("GET", "choices", params={"project": "vision"}).json()
    one_gpu = next(p for p in choices["presets"] if p["slug"] == "1-gpu")
    assert one_gpu["hardware"] is not None and "pytorch-2-13" in [s["slug"] for s in choices["software"]]
    job_id, status = lab.run({"path": "analysis.ipynb", "project": "vision", "hardware": "slurm-a100x1",
                              "software": "pytorch-2-13", "walltime": "00:10:00",
                              "parameters": {"lr": "2", "epochs": "3"}})
    job = Job.objects.get(pk=job_id)
    assert job.cluster.slug == "slurm-test" and job.scheduler_id and job.user == hpc_site.alice
    assert status["state"] == JobState.COMPLETED, status
    saved = lab.call("POST", f"jobs/{job_id}/executed", json={"path": "analysis.ipynb"}).json()["path"]
    executed = json.loads((lab.home / saved).read_text())
    assert "result=6" in json.dumps(executed["cells"])


def test_lab_starts_without_news_or_update_popups(lab):
    answer = requests.get(f"{lab.server}lab/api/settings/@jupyterlab/apputils-extension:notification",
                          headers={"Authorization": f"token {lab.token}"}, timeout=30).json()
    defaults = {name: spec["default"] for name, spec in answer["schema"]["properties"].items()}
    assert defaults["checkForUpdates"] is False and defaults["fetchNews"] == "false"
