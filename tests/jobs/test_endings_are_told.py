"""Every way a job ends on a real scheduler reaches its owner as what it is, on Slurm and on TSUBAME-style Grid
Engine: an owner's cancel (nothing told), a project admin's cancel, a cancel made on the cluster outside Kakehashi
(`scancel`/`qdel` by root), a walltime kill, and the project's strict budget (with its figures).

Every notice comes from the path that produces it in production: the portal's cancel carried out by the cancel task
over SSH as the job's owner, root's own `scancel`/`qdel` on the test cluster, the scheduler's walltime kill, the
budget enforcer; the tracker reads the ending from the scheduler's accounting. Tasks run in this process (Celery
eager) after each commit; the tracker is called as the beat would.
"""

from __future__ import annotations

import subprocess
import time
from decimal import Decimal

import pytest
from django.core import mail

from portal.budgets.models import Budget
from portal.catalog.models import HardwareType
from portal.jobs.actions.cancel import request_cancel
from portal.jobs.actions.submit import submit_job
from portal.jobs.actions.validation import JobRequest
from portal.jobs.models import Job, JobState
from portal.jobs.tracking import track_cluster
from portal.notifications.models import Notification
from portal.projects.models import Membership, Role
from portal.usage.enforcement import enforce
from tests.conftest import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_live_worker")]

# cluster, hardware, how root cancels on it, what the history calls that cancel
PLACES = {
    "slurm": ("slurm-test", "slurm-a100x1", ["scancel"], "(scancel by root)"),
    "tsubame": ("sge-tsubame-test", "tsubame-s-gpu", ["qdel"], "(qdel)"),  # SoGE's qacct keeps no deleted_by
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_each_ending_on_a_real_scheduler_reaches_the_owner_as_what_it_is(hpc_site, eager, place):
    cluster_slug, hardware_slug, root_cancel, by_root = PLACES[place]
    alice, bob = hpc_site.alice, hpc_site.bob
    alice.email = "alice@example.org"
    alice.save()
    Membership.objects.filter(user=bob, project=hpc_site.project).update(role=Role.ADMIN)
    cluster = hpc_site.clusters[cluster_slug]
    hardware = HardwareType.objects.get(slug=hardware_slug)

    def submit(name: str, walltime: str = "00:10:00") -> Job:
        return submit_job(alice, JobRequest(project=hpc_site.project, name=name, script="sleep 300",
                                            hardware=hardware, walltime=walltime)).job

    def track_until(predicate, message: str, timeout: float = 150):
        def ready():
            track_cluster(cluster.pk)
            return predicate()
        return wait_for(ready, timeout=timeout, interval=1, message=message)

    out_of_time = submit("out-of-time", walltime="00:01:00")  # first: its minute runs while the rest is done
    mine, theirs, outside, budget = (submit(name) for name in ("mine", "theirs", "outside", "over-budget"))
    jobs = [out_of_time, mine, theirs, outside, budget]
    track_until(lambda: Job.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.RUNNING).count() == 5,
                "five jobs running")

    request_cancel(Job.objects.get(pk=mine.pk), alice)
    request_cancel(Job.objects.get(pk=theirs.pk), bob)
    subprocess.run([*root_cancel, Job.objects.get(pk=outside.pk).scheduler_id], check=True, capture_output=True)
    ended = [out_of_time, mine, theirs, outside]
    track_until(lambda: Job.objects.filter(pk__in=[j.pk for j in ended], state__in=["cancelled", "timed_out"])
                .count() == 4, "four endings")

    # The budget last: a strict budget used up cancels every active job of the project.
    Budget.objects.filter(project=hpc_site.project).update(amount=Decimal("0.0001"))
    time.sleep(1)
    assert enforce(Budget.objects.get(project=hpc_site.project)).cancelled == [budget.pk]
    track_until(lambda: Job.objects.get(pk=budget.pk).is_final, "the budget's cancel")

    def ending(job: Job):
        found = Job.objects.get(pk=job.pk)
        return found.state, found.events.last().cause

    assert ending(mine) == (JobState.CANCELLED, "cancelled_by_owner")
    assert ending(theirs) == (JobState.CANCELLED, "cancelled_by_admin")
    assert ending(outside) == (JobState.CANCELLED, "cancelled_outside")
    assert ending(out_of_time) == (JobState.TIMED_OUT, "walltime")
    assert ending(budget) == (JobState.CANCELLED, "cancelled_by_budget")

    told = dict(Notification.objects.filter(user=alice, job__isnull=False).values_list("job_id", "text"))
    assert mine.pk not in told  # she cancelled it herself
    assert told[theirs.pk] == "Job theirs (vision) cancelled by bob, an admin of project vision"
    assert told[outside.pk] == f"Job outside (vision) cancelled on the cluster outside Kakehashi {by_root}"
    assert told[out_of_time.pk].startswith("Job out-of-time (vision) ran out of its walltime: walltime exceeded")
    assert told[budget.pk].startswith("Job over-budget (vision) cancelled by your project's strict budget: ")
    kinds = dict(Notification.objects.filter(user=alice, job__isnull=False).values_list("job_id", "kind"))
    assert [kinds[j.pk] for j in (theirs, outside, out_of_time, budget)] == ["cancelled", "cancelled", "timed_out",
                                                                              "budget"]
    # By email too, as her defaults say (cancels by others, failures and budget cancels).
    subjects = {m.subject for m in mail.outbox if m.to == ["alice@example.org"]}
    assert {f"[Kakehashi] {told[j.pk]}"[:200] for j in (theirs, outside, out_of_time, budget)} <= subjects
    # The project's admins hear that the budget cancelled it, with the figures.
    for admin in (alice, bob):
        assert Notification.objects.filter(user=admin, kind="budget_alert",
                                           text__contains="strict budget is used up").exists()
