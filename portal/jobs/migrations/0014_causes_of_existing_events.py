"""Give every event written before causes existed the best cause its words allow, and `other` where none.

This is the only place that reads a reason's words to learn why something happened: the words below are the ones
the portal itself wrote before this migration (portal/jobs/transitions.py, events.py, tracking.py, dispatch.py,
cancel.py and usage/enforcement.py as they were), read once here so that nothing reads them again. An ended job
whose cancel was asked for also gets its cancel's cause (Job.cancel_cause), which its owner's notices read.
"""

from django.db import migrations

BATCH = 2000


def _cause(event, owner: str | None) -> str:
    reason, to, before = event.reason or "", event.to_state, event.from_state
    if before == "" and to == "queued":
        return "submitted"
    if to == "submitting" and before == "queued":
        return "dispatched"
    if before == "submitting" and to in ("pending", "running") and (
            reason.startswith("scheduler id ") or reason.startswith("an element of scheduler array ")):
        return "dispatched"
    if reason.startswith("the scheduler refused the ") or reason.startswith("the job's data could not be staged"):
        return "refused"
    if reason.startswith("staged dataset(s) "):
        return "staged"
    if before == to:  # a note
        if reason.startswith("cancel requested by ") or "strict budget" in reason:
            return "cancel_requested"
        if reason.startswith(("deleted from the scheduler's queue", "still in the scheduler's queue",
                              "deleted its element", "cancelled before submission, but deleting")):
            return "scheduler"
        return "other"
    if to == "lost":
        return "lost"
    if to == "timed_out":
        return "walltime"
    if to == "cancelled":
        if "strict budget" in reason:
            return "cancelled_by_budget"
        if "reconciler" in reason:
            return "reconciler"
        if reason.startswith("cancelled by ") and not reason[len("cancelled by "):].split(" ")[0].isdigit():
            who = reason[len("cancelled by "):].split(" ")[0]
            return "cancelled_by_owner" if owner is not None and who == owner else "cancelled_by_admin"
        return "cancelled_outside"
    if to in ("completed", "failed"):
        return "accounting"
    if to in ("pending", "running"):
        return "scheduler"
    return "other"


def forwards(apps, schema_editor):
    JobEvent = apps.get_model("jobs", "JobEvent")
    Job = apps.get_model("jobs", "Job")
    owners = dict(Job.objects.values_list("pk", "user__username"))
    batch = []
    for event in JobEvent.objects.only("pk", "job_id", "from_state", "to_state", "reason").iterator(chunk_size=BATCH):
        event.cause = _cause(event, owners.get(event.job_id))
        batch.append(event)
        if len(batch) >= BATCH:
            JobEvent.objects.bulk_update(batch, ["cause"])
            batch = []
    if batch:
        JobEvent.objects.bulk_update(batch, ["cause"])
    asked = Job.objects.filter(cancel_requested_at__isnull=False, cancel_cause="").only("pk", "cancel_reason", "user")
    jobs = []
    for job in asked.select_related("user").iterator(chunk_size=BATCH):
        reason = job.cancel_reason or ""
        if "strict budget" in reason:
            job.cancel_cause = "cancelled_by_budget"
        elif reason.startswith(f"cancelled by {job.user.username}") and not reason.startswith(
                f"cancelled by {job.user.username}, "):
            job.cancel_cause = "cancelled_by_owner"
        else:
            job.cancel_cause = "cancelled_by_admin"
        jobs.append(job)
    Job.objects.bulk_update(jobs, ["cancel_cause"], batch_size=BATCH)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0013_typed_causes")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
