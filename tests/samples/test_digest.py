"""The weekly digest: each researcher hears what their GPUs used and left idle this week, each project admin the
same for the project with who wasted most; once a week, as each person chose."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core import mail
from django.utils import timezone

from backends.sampling import parse_samples
from portal.catalog.models import HardwareType
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.notifications.models import Kind, Notification, Preference
from portal.projects.models import Membership, Role
from portal.samples import series
from portal.samples.digest import send_weekly_digests
from portal.samples.fetch import summary_of
from portal.samples.models import JobSamples

pytestmark = pytest.mark.django_db(transaction=True)

RECORDED = Path(__file__).parents[1] / "backends" / "fixtures" / "nvidia_smi" / "sampler-tsubame-sgenode01.log"


def test_researchers_and_project_admins_get_the_weeks_gpu_use_once(local_site, make_user, eager):
    hardware = HardwareType.objects.create(cluster=local_site.cluster, slug="local-h100x2", name="Two H100",
                                           gpu_model="h100", gpus_per_node=2, cpus_per_node=2, max_nodes=1,
                                           rate="10", rate_unit="points")
    admin = make_user("carol")
    Membership.objects.create(user=admin, project=local_site.project, role=Role.ADMIN)
    Preference.objects.create(user=admin, email_digest=False)
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="stalled", script="sleep 1",
                                                  hardware=hardware, walltime="01:00:00")).job
    ended = timezone.now() - timedelta(days=1)
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, scheduler_id="x", ended_at=ended,
                                         started_at=ended - timedelta(hours=1), elapsed_seconds=3600)
    job.refresh_from_db()
    data = series.add({}, parse_samples(RECORDED.read_text()))  # its two GPUs at 0 %
    JobSamples.objects.create(job=job, series=data, summary=summary_of(job, data, 5.0, timezone.now()))

    told = send_weekly_digests()
    assert told == sorted([local_site.alice.pk, admin.pk])
    mine = Notification.objects.get(user=local_site.alice, kind=Kind.DIGEST)
    assert mine.text.startswith("Your week of GPUs: 0.0 GPU-hours used (0% of the 2.0 reserved)")
    (email,) = [m for m in mail.outbox if "alice@example.org" in m.to]
    assert f"Most idle: #{job.pk} stalled:" in email.body and "Project vision:" in email.body
    assert Notification.objects.filter(user=admin, kind=Kind.DIGEST).exists()
    assert not [m for m in mail.outbox if admin.email in m.to]  # carol chose no digest by e-mail
    assert send_weekly_digests() == []  # once a week
    assert send_weekly_digests(now=timezone.now() + timedelta(days=7)) == []  # nothing sampled that week
