"""The API carries templates, working directories and the files a job leaves behind."""

from __future__ import annotations

import pytest
import requests

from portal.api.tokens import issue_token
from portal.jobs.models import Job, JobState
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media_root(settings):
    """Unlike the other API tests: the live worker writes job outputs where the settings say, so keep that."""
    return settings.MEDIA_ROOT


@pytest.fixture
def api(client, local_site):
    _, token = issue_token(local_site.alice, name="t", scopes=["read", "submit"])

    def call(method, path, **kwargs):
        return getattr(client, method)(f"/api/v1/{path}", HTTP_AUTHORIZATION=f"Bearer {token}",
                                       content_type="application/json", **kwargs)

    return call


def test_a_template_job_via_the_api_takes_the_templates_launcher(api, local_site):
    response = api("post", "jobs/", data={"project": "vision", "name": "ddp", "hardware": "local-cpu",
                                           "template": "ddp-mnist", "procs_per_node": 2, "dry_run": True})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["launcher"] == "torchrun" and body["template"] == "ddp-mnist"
    assert "--nproc-per-node=2" in body["script"]
    bad = api("post", "jobs/", data={"project": "vision", "name": "x", "hardware": "local-cpu", "script": "pwd",
                                      "working_directory": "../etc"})
    assert bad.status_code == 400 and bad.json()["field"] == "working_directory"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_outputs_are_listed_and_downloadable_with_a_token_only_by_members(api, client, local_site, live_worker):
    response = api("post", "jobs/", data={"project": "vision", "name": "out", "hardware": "local-cpu",
                                           "script": 'echo hi > "$KAKEHASHI_OUTPUT_DIR/hello.txt"'})
    job_id = response.json()["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).artifacts.exists(), timeout=60, message="outputs")
    body = api("get", f"jobs/{job_id}/").json()
    assert body["state"] == JobState.COMPLETED
    [output] = body["outputs"]
    assert output["path"] == "hello.txt" and output["size"] == 3
    download = api("get", output["url"].split("/api/v1/", 1)[1])
    # From the object store itself, by a presigned GET.
    assert download.status_code == 302 and requests.get(download["Location"], timeout=30).content == b"hi\n"
    from portal.api.tokens import issue_token as issue

    _, other = issue(local_site.mallory, name="m", scopes=["read"])
    refused = client.get(output["url"], HTTP_AUTHORIZATION=f"Bearer {other}")
    assert refused.status_code == 404
