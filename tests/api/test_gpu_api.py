"""A job's GPU use through the API: the summary on the job, its samples, and Keep running, each for whom it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.sampling import parse_samples
from portal.catalog.models import HardwareType
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.causes import Cause
from portal.jobs.models import Job, JobState
from portal.projects.models import Membership, Role
from portal.samples import series
from portal.samples.fetch import summary_of
from portal.samples.models import JobSamples

pytestmark = pytest.mark.django_db

RECORDED = Path(__file__).parents[1] / "backends" / "fixtures" / "nvidia_smi" / "sampler-tsubame-sgenode01.log"


@pytest.fixture
def sampled_job(local_site):
    """A running 2-GPU job whose samples are a node file recorded on the test cluster (tests/backends/fixtures)."""
    hardware = HardwareType.objects.create(cluster=local_site.cluster, slug="local-h100x2", name="Two H100",
                                           gpu_model="h100", gpus_per_node=2, cpus_per_node=2, max_nodes=1,
                                           rate="10", rate_unit="points")
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="sampled", script="sleep 1",
                                                  hardware=hardware, walltime="00:10:00")).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_id="x", started_at=job.created_at)
    job.refresh_from_db()
    data = series.add({}, parse_samples(RECORDED.read_text()))
    JobSamples.objects.create(job=job, series=data, summary=summary_of(job, data, 5.0, job.created_at), state="busy",
                              state_why="2 of 2 GPUs busy")
    return job


def test_the_job_says_what_its_gpus_do_and_which_rule_applies(alice_api, sampled_job):
    answer = alice_api.get(f"/api/v1/jobs/{sampled_job.pk}/").json()
    gpu = answer["gpu"]
    assert gpu["state"] == "busy" and gpu["idle"] is False
    assert gpu["rule"].startswith("site rule: a job is idle when every GPU stays below 5 %")
    assert [g["device"] for g in gpu["summary"]["gpus"]] == ["sgenode01/0", "sgenode01/1"]
    assert gpu["summary"]["unit"] == "points"


def test_the_samples_endpoint_gives_every_gpu_and_node_over_time(alice_api, sampled_job):
    answer = alice_api.get(f"/api/v1/jobs/{sampled_job.pk}/samples/").json()
    assert answer["interval"] == 2
    points = answer["gpus"]["sgenode01/0"]["points"]
    assert len(points) >= 4 and points[0][2] == 0 and answer["gpus"]["sgenode01/0"]["memory_total_mib"] == 81920
    assert answer["cpu"]["sgenode01"] and answer["nodes"]["sgenode01"]["nvidia_smi"] is True


def test_another_projects_member_sees_nothing_and_keeps_nothing(mallory_api, sampled_job):
    assert mallory_api.get(f"/api/v1/jobs/{sampled_job.pk}/samples/").status_code == 404
    assert mallory_api.post(f"/api/v1/jobs/{sampled_job.pk}/keep/", {"hours": 1}).status_code == 404


def test_only_the_owner_keeps_and_only_within_the_rule(alice_api, api_as, local_site, make_user, sampled_job):
    admin = make_user("carol")
    Membership.objects.create(user=admin, project=local_site.project, role=Role.ADMIN)
    refused = api_as(admin, "read", "submit").post(f"/api/v1/jobs/{sampled_job.pk}/keep/", {"hours": 1})
    assert refused.status_code == 403
    too_long = alice_api.post(f"/api/v1/jobs/{sampled_job.pk}/keep/", {"hours": 1000})
    assert too_long.status_code == 409 and too_long.json()["field"] == "hours"
    assert alice_api.post(f"/api/v1/jobs/{sampled_job.pk}/keep/", {"hours": "2"}).status_code == 400
    kept = alice_api.post(f"/api/v1/jobs/{sampled_job.pk}/keep/", {"hours": 2})
    assert kept.status_code == 200 and kept.json()["keeps"] == 1 and kept.json()["kept_by"] == "alice"
    assert sampled_job.events.filter(cause=Cause.IDLE_KEPT).count() == 1
    from portal.audit.models import AuditEntry

    assert AuditEntry.objects.filter(action="job.idle_kept", target_id=str(sampled_job.pk)).count() == 1
