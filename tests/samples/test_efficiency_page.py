"""The usage pages' GPU efficiency: used over reserved GPU-hours and idle cost per project, user and hardware type,
with CSV; each person sees only their projects."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.utils import timezone

from backends.sampling import parse_samples
from portal.catalog.models import HardwareType
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.samples import series
from portal.samples.fetch import summary_of
from portal.samples.models import JobSamples

pytestmark = pytest.mark.django_db

RECORDED = Path(__file__).parents[1] / "backends" / "fixtures" / "nvidia_smi" / "sampler-tsubame-sgenode01.log"


def test_efficiency_per_project_user_and_hardware_with_csv_for_members_only(client, local_site):
    hardware = HardwareType.objects.create(cluster=local_site.cluster, slug="local-h100x2", name="Two H100",
                                           gpu_model="h100", gpus_per_node=2, cpus_per_node=2, max_nodes=1,
                                           rate="10", rate_unit="points")
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="sampled", script="sleep 1",
                                                  hardware=hardware, walltime="01:00:00")).job
    job.elapsed_seconds = 3600
    data = series.add({}, parse_samples(RECORDED.read_text()))
    JobSamples.objects.create(job=job, series=data, summary=summary_of(job, data, 5.0, timezone.now()))

    client.force_login(local_site.alice)
    page = client.get("/projects/vision/usage/gpus/").content.decode()
    assert 'id="by-user"' in page and "alice" in page and "local-h100x2" in page and "2.00" in page
    csv = client.get("/usage/gpus/?format=csv").content.decode().splitlines()
    assert csv[0].startswith("project,user,hardware,jobs,gpu_hours_reserved,gpu_hours_used,gpu_hours_idle,efficiency")
    project, user, hw, jobs, reserved, used, *_ = csv[1].split(",")
    assert (project, user, hw, jobs, reserved, used) == ("vision", "alice", "local-h100x2", "1", "2.0000", "0.0000")
    assert "GPU efficiency" in client.get("/projects/vision/usage/").content.decode()

    client.force_login(local_site.mallory)
    assert len(client.get("/usage/gpus/?format=csv").content.decode().splitlines()) == 1
    assert client.get("/projects/vision/usage/gpus/").status_code == 404
