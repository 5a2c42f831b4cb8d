"""What the idle rule does to a job, and what its owner may do about it: warnings, the automatic cancel, keeping
it running. Every one is a job event with its evidence (the samples of the window) under its own cause, an audit
row, and a notice through portal/notifications (the owner's bell and e-mail, as they chose).

The cancel is the portal's ordinary cancel (portal/jobs/actions/cancel.py) with the cause `cancelled_idle`: the
scheduler stops the job, accounting settles it like any cancelled job, and its logs, outputs and samples stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from portal.audit.actions import record
from portal.jobs import events, transitions
from portal.jobs.actions.cancel import cancel_for_idle
from portal.jobs.models import Job, JobState
from portal.notifications.actions import Notice, tell
from portal.notifications.models import Kind
from portal.projects import access
from portal.samples import rule as rules
from portal.samples.models import IdleRule, JobSamples
from portal.samples.policy import as_rule, describe, facts_of, problems, rule_for_project


@dataclass
class Outcome:
    warned: int = 0
    cancelled: int = 0


def _epoch(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def judge_and_act(job: Job, samples: JobSamples, rule: rules.Rule, now: datetime,
                  last_activity: int | None = None) -> Outcome:
    """Judge the job's series by `rule` and do what is due (inside the caller's transaction, `samples` locked).
    `last_activity`: a session's server's last activity on the hub this cycle (None: not known, never idle)."""
    outcome = Outcome()
    verdict = rules.judge(samples.series or {}, rule, facts_of(job, last_activity), int(now.timestamp()))
    samples.state, samples.state_why = verdict.state, verdict.why[:300]
    interval = int((samples.series or {}).get("interval") or settings.KAKEHASHI_SAMPLE_SECONDS or 30)
    if verdict.state == rules.UNKNOWN and samples.last_sample_at is None and job.started_at is not None \
            and (now - job.started_at).total_seconds() > 4 * interval:
        # Never idle without samples, but never silent about it either: a sampler removed from an edited script,
        # or killed, shows.
        minutes = (now - job.started_at).total_seconds() / 60
        samples.state_why = (f"no samples in the {minutes:.0f} minutes since it started: the sampler is missing, "
                             "was switched off, or its node does not answer")
    if verdict.state != rules.IDLE:
        if verdict.state == rules.BUSY:
            samples.idle_since, samples.warned = None, []  # a new idle stretch starts its warnings afresh
        return outcome
    since = datetime.fromtimestamp(verdict.idle_since, UTC)
    interval = int((samples.series or {}).get("interval") or 30)
    if samples.idle_since is None or abs((samples.idle_since - since).total_seconds()) > 2 * interval:
        samples.idle_since, samples.warned = since, []
    if job.state != JobState.RUNNING or job.cancel_requested_at is not None:
        return outcome
    steps = rules.next_steps(verdict, rule, int(now.timestamp()), warned=tuple(samples.warned),
                             keep_until=_epoch(samples.keep_until))
    idle_start = max(since, samples.keep_until or since)
    idle_minutes = (now - idle_start).total_seconds() / 60
    if steps.warn_at:
        warn(job, samples, rule, steps.warn_at, idle_minutes, verdict)
        outcome.warned += 1
    if steps.cancel:
        ask = events.by_idle_rule(idle_minutes=idle_minutes, rule=rule.source, evidence=verdict.evidence,
                                  last_activity=_used(verdict), gpus=verdict.idle_gpus)
        transaction.on_commit(lambda: cancel_for_idle(job.pk, ask))
        outcome.cancelled += 1
    return outcome


def _used(verdict: rules.Verdict) -> str:
    """When a session's JupyterLab was last used, as its events and notices say it ("" for a job)."""
    if verdict.last_activity is None:
        return ""
    return f"{datetime.fromtimestamp(verdict.last_activity, UTC):%Y-%m-%d %H:%M:%S} UTC"


def warn(job: Job, samples: JobSamples, rule: rules.Rule, due: tuple[int, ...], idle_minutes: float,
         verdict: rules.Verdict) -> None:
    """One warning for every warning time now due (usually one): event, audit row, notice. A session's say it is
    one, and since when its JupyterLab has not been used."""
    samples.warned = sorted({*samples.warned, *due})
    cancel_at = samples.idle_since + timedelta(seconds=rule.cancel_after_seconds)
    if samples.keep_until and samples.keep_until > samples.idle_since:
        cancel_at = samples.keep_until + timedelta(seconds=rule.cancel_after_seconds)
    session = job.kind == Job.Kind.SESSION
    what = "session" if session else "job"
    if rule.action == rules.CANCEL:
        action_words = (f"it will be {'stopped' if session else 'cancelled'} at {cancel_at:%Y-%m-%d %H:%M} UTC unless "
                        f"its owner keeps it (at most {rule.keep_max_hours} hours)")
    else:
        action_words = f"nothing will be cancelled; {'stop' if session else 'cancel'} it if it is forgotten"
    used = _used(verdict)
    transitions.note(job, events.idle_warned(idle_minutes=idle_minutes, warn_at_minutes=max(due) / 60,
                                             rule=rule.source, action_words=action_words, evidence=verdict.evidence,
                                             last_activity=used, gpus=verdict.idle_gpus))
    record("job.idle_warned", project=job.project, target=job, idle_minutes=round(idle_minutes, 1),
           rule=rule.source, **({"last_activity": used} if used else {}))
    summary = samples.summary or {}
    cost = f"; idle so far: {summary.get('gpu_hours_idle', 0):.2f} GPU-hours, " \
           f"{summary.get('idle_cost', 0):.2f} {summary.get('unit', '')}" if summary else ""
    if session:
        gpus = f" and every GPU it holds has stayed below {rule.threshold_percent:g} %" if verdict.idle_gpus else ""
        text = f"Session {job.name} ({job.project.slug}): unused for {idle_minutes:.0f} minutes"
        details = (f"Your session {job.name} (#{job.pk}) has had no activity in JupyterLab since {used}{gpus} "
                   f"for {idle_minutes:.0f} minutes{cost if verdict.idle_gpus else ''}. {action_words[0].upper()}"
                   f"{action_words[1:]}. Use it, or on its page: Stop, or Keep running for up to "
                   f"{rule.keep_max_hours} hours.")
    else:
        text = f"Job {job.name} ({job.project.slug}): every GPU idle for {idle_minutes:.0f} minutes"
        details = (f"Every GPU of your {what} {job.name} (#{job.pk}) has stayed below "
                   f"{rule.threshold_percent:g} % for {idle_minutes:.0f} minutes{cost}. "
                   f"{action_words[0].upper()}{action_words[1:]}. On its page: Cancel now, or "
                   f"Keep running for up to {rule.keep_max_hours} hours.")
    tell([Notice(user_id=job.user_id, kind=Kind.IDLE, link=f"/jobs/{job.pk}/", job_id=job.pk,
                 project_id=job.project_id, text=text, details=details)])


class KeepRefused(Exception):
    pass


def keep(job: Job, user, hours: float) -> JobSamples:
    """The owner keeps an idle job running for `hours` (at most the rule's keep_max_hours): no warning or cancel
    until then. Counted and recorded (event, audit row): the project's admins see every keep."""
    if job.user_id != user.pk:
        raise PermissionDenied("only the job's owner can keep it running")
    rule = rule_for_project(job.project)
    if not 0 < hours <= rule.keep_max_hours:
        raise KeepRefused(f"a keep is from 1 minute to {rule.keep_max_hours} hours ({rule.source})")
    if job.state != JobState.RUNNING or job.cancel_requested_at is not None:
        raise KeepRefused("only a running job can be kept")
    now = timezone.now()
    with transaction.atomic():
        samples, _ = JobSamples.objects.get_or_create(job=job)
        samples = JobSamples.objects.select_for_update().get(pk=samples.pk)
        samples.keep_until = now + timedelta(hours=hours)
        samples.kept_by = user
        samples.keeps += 1
        samples.warned = []  # after the keep, the warnings come again before any cancel
        samples.save()
        evidence = rules.judge(samples.series or {}, rule, facts_of(job), int(now.timestamp())).evidence
        until = f"{samples.keep_until:%Y-%m-%d %H:%M} UTC"
        transitions.note(job, events.idle_kept(user, hours=hours, until=until, keeps=samples.keeps,
                                               evidence=evidence))
        record("job.idle_kept", actor=user, project=job.project, target=job, hours=hours, until=until,
               keeps=samples.keeps)
    return samples


class RuleRefused(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def set_rule(project, actor, **fields) -> IdleRule:
    """A project admin sets the project's idle rule, within the site's bounds (RuleRefused says which it leaves)."""
    access.require(actor, project, "manage")
    with transaction.atomic():
        rule = IdleRule.objects.select_for_update().filter(project=project).first() or IdleRule(project=project)
        for name, value in fields.items():
            setattr(rule, name, value)
        if found := problems(rule):
            raise RuleRefused(found)
        rule.updated_by = actor
        rule.save()
        record("idle_rule.set", actor=actor, project=project, target=rule, rule=describe(as_rule(rule, project.slug)))
    return rule
