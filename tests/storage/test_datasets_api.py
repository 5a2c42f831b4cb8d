"""Datasets through the API and the job form: named from the project's files, attached to jobs by name, shown in the
script; another project's answer 404 or "no dataset named"."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.jobs.models import Job
from portal.storage.models import Dataset, StoredFile
from tests.api.conftest import job_body

pytestmark = pytest.mark.django_db

DATASETS = "/api/v1/projects/vision/datasets/"


@pytest.fixture
def files(local_site):
    """Rows of files already in the project (what a completed upload leaves)."""
    for path in ("corpus/a.txt", "corpus/b/c.txt", "model.bin"):
        StoredFile.objects.create(project=local_site.project, path=path, storage_name=f"projects/vision/{path}",
                                  size=10, sha256="ab" * 32, uploaded_by=local_site.alice)
    StoredFile.objects.create(project=local_site.other, path="theirs.bin", storage_name="projects/nlp/theirs.bin",
                              size=1, sha256="cd" * 32)


def test_a_member_names_a_file_and_a_folder_and_a_job_attaches_them_by_name(alice_api, files):
    made = alice_api.post(DATASETS, {"name": "weights", "path": "model.bin"})
    assert made.status_code == 201, made.content
    assert made.json()["kind"] == "file" and made.json()["sha256"] == "ab" * 32 and made.json()["state"] == "ready"
    folder = alice_api.post(DATASETS, {"name": "corpus", "prefix": "corpus/"})
    assert folder.status_code == 201 and folder.json()["size"] == 20 and folder.json()["source"] == "corpus/"
    assert [d["name"] for d in alice_api.get(DATASETS).json()["results"]] == ["corpus", "weights"]
    assert alice_api.get(DATASETS + "weights/").json()["source"] == "model.bin"

    dry = alice_api.post("/api/v1/jobs/", job_body(datasets=["weights", "corpus"], dry_run=True))
    assert dry.status_code == 200, dry.content
    assert 'export KAKEHASHI_DATA="$PWD/data"' in dry.json()["script"] and dry.json()["datasets"] == ["corpus", "weights"]
    job = alice_api.post("/api/v1/jobs/", job_body(datasets=["weights"]))
    assert job.status_code == 201 and job.json()["datasets"] == ["weights"]
    assert list(Job.objects.get().datasets.values_list("name", flat=True)) == ["weights"]


def test_bad_names_duplicates_and_other_projects_data_are_refused_clearly(alice_api, mallory_api, files):
    for body, field in [({"name": "../x", "path": "model.bin"}, "name"), ({"name": "x", "path": "../model.bin"}, "path"),
                        ({"name": "x", "path": "theirs.bin"}, "path"), ({"name": "x"}, "path"),
                        ({"name": "x", "path": "model.bin", "prefix": "corpus"}, "path")]:
        refused = alice_api.post(DATASETS, body)
        assert refused.status_code in (400, 404) and refused.json()["field"] == field, (body, refused.content)
    assert alice_api.post(DATASETS, {"name": "w", "path": "model.bin"}).status_code == 201
    again = alice_api.post(DATASETS, {"name": "w", "path": "model.bin"})
    assert again.status_code == 409 and again.json()["code"] == "exists"
    # Another project's datasets are not there for mallory, and hers are not there for alice.
    assert mallory_api.get(DATASETS).status_code == 404
    assert mallory_api.post(DATASETS, {"name": "steal", "path": "model.bin"}).status_code == 404
    refused = alice_api.post("/api/v1/jobs/", job_body(datasets=["nope"]))
    assert refused.status_code == 400 and refused.json()["field"] == "datasets"
    assert not Job.objects.exists()


def test_a_member_may_not_register_a_cluster_path(alice_api, api_as, local_site, files, make_user):
    from portal.projects.models import Membership, Role

    bob = make_user("bob")
    Membership.objects.create(user=bob, project=local_site.project, role=Role.MEMBER)
    refused = api_as(bob, "read", "submit").post(DATASETS, {"name": "g", "cluster": "local", "cluster_path": "/data/g"})
    assert refused.status_code == 403
    no_root = alice_api.post(DATASETS, {"name": "g", "cluster": "local", "cluster_path": "/data/g"})
    assert no_root.status_code == 400 and "no storage registered" in no_root.json()["detail"]
    assert not Dataset.objects.exists()


def test_the_job_form_offers_the_projects_datasets_and_shows_them_in_the_script(client, local_site, files):
    ours = Dataset.objects.create(project=local_site.project, name="weights", kind="file",
                                  stored_file=StoredFile.objects.get(path="model.bin"))
    theirs = Dataset.objects.create(project=local_site.other, name="theirs", kind="file",
                                    stored_file=StoredFile.objects.get(path="theirs.bin"))
    client.force_login(local_site.alice)
    page = client.get(reverse("job-new")).content.decode()
    assert "vision: weights (model.bin)" in page and "theirs" not in page
    form = {"project": local_site.project.pk, "name": "with-data", "hardware": local_site.hardware.pk, "nodes": 1,
            "walltime": "00:10:00", "launcher": "script", "script": 'ls "$KAKEHASHI_DATA/weights"\n',
            "datasets": [ours.pk], "draft": "3f1a3b4c-0000-4000-8000-0000000000d5"}
    preview = client.post(reverse("job-preview"), form).context["script"]
    assert "# datasets, each at $KAKEHASHI_DATA/<name>: weights" in preview
    bad = client.post(reverse("job-new"), {**form, "datasets": [theirs.pk]})
    assert bad.status_code == 200 and not Job.objects.exists()
    assert client.post(reverse("job-new"), form).status_code == 302
    job = Job.objects.get()
    assert job.rendered_script == preview and [d.name for d in job.datasets.all()] == ["weights"]
    assert "$KAKEHASHI_DATA/weights" in client.get(reverse("job-detail", args=[job.pk])).content.decode()


def test_the_data_page_lists_the_datasets_of_ones_own_projects_only(client, local_site, files):
    Dataset.objects.create(project=local_site.project, name="weights", kind="file", size=10,
                           stored_file=StoredFile.objects.get(path="model.bin"))
    Dataset.objects.create(project=local_site.other, name="secret-corpus", kind="file",
                           stored_file=StoredFile.objects.get(path="theirs.bin"))
    client.force_login(local_site.alice)
    page = client.get(reverse("data")).content.decode()
    assert "<code>weights</code>" in page and "model.bin" in page and "secret-corpus" not in page
