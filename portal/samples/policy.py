"""Which idle rule applies to a job: its project's, within the site's bounds, or the site's own
(settings KAKEHASHI_IDLE_*). The bounds are checked when a project admin saves a rule and again when it is read, so
a site that tightens its bounds tightens every project's rule at once."""

from __future__ import annotations

from django.conf import settings

from portal.samples.models import IdleRule
from portal.samples.rule import CANCEL, TELL, JobFacts, Rule


def site_rule() -> Rule:
    return Rule(threshold_percent=settings.KAKEHASHI_IDLE_THRESHOLD_PERCENT,
                window_seconds=settings.KAKEHASHI_IDLE_WINDOW_SECONDS,
                warn_at_seconds=tuple(settings.KAKEHASHI_IDLE_WARN_AT_SECONDS),
                action=settings.KAKEHASHI_IDLE_ACTION if settings.KAKEHASHI_IDLE_CANCEL_ALLOWED else TELL,
                cancel_after_seconds=settings.KAKEHASHI_IDLE_CANCEL_AFTER_SECONDS,
                keep_max_hours=min(24, settings.KAKEHASHI_IDLE_MAX_KEEP_HOURS),
                exempt_sessions_under_hours=settings.KAKEHASHI_IDLE_EXEMPT_SESSIONS_UNDER_HOURS, source="site")


def problems(rule: IdleRule) -> list[str]:
    """Why a project's rule lies outside the site's bounds (sentences for the form), or []."""
    found = []
    if not 0 < rule.threshold_percent <= settings.KAKEHASHI_IDLE_MAX_THRESHOLD_PERCENT:
        found.append(f"the threshold must be above 0 and at most {settings.KAKEHASHI_IDLE_MAX_THRESHOLD_PERCENT:g} %")
    if rule.window_seconds < settings.KAKEHASHI_IDLE_MIN_WINDOW_SECONDS:
        found.append(f"the window must be at least {settings.KAKEHASHI_IDLE_MIN_WINDOW_SECONDS // 60} minutes")
    if not 1 <= rule.keep_max_hours <= settings.KAKEHASHI_IDLE_MAX_KEEP_HOURS:
        found.append(f"a keep must be from 1 to {settings.KAKEHASHI_IDLE_MAX_KEEP_HOURS} hours")
    if rule.action == CANCEL and not settings.KAKEHASHI_IDLE_CANCEL_ALLOWED:
        found.append("this site does not let the rule cancel jobs: choose to tell")
    if rule.action == CANCEL and rule.cancel_after_seconds < rule.window_seconds:
        found.append("a job can only be cancelled after its window")
    if not isinstance(rule.warn_at_seconds, list) or not all(isinstance(w, int) and w > 0
                                                             for w in rule.warn_at_seconds):
        found.append("warnings are minutes of idleness, each above 0")
    if rule.exempt_busy_gpus < 1:
        found.append("a job is busy with at least 1 busy GPU")
    return found


def as_rule(rule: IdleRule | None, slug: str = "") -> Rule:
    """The typed rule of a project's row; the site's if it has none or it left the bounds."""
    if rule is None or problems(rule):
        return site_rule()
    return Rule(threshold_percent=rule.threshold_percent, window_seconds=rule.window_seconds,
                warn_at_seconds=tuple(sorted(rule.warn_at_seconds)), action=rule.action,
                cancel_after_seconds=rule.cancel_after_seconds, keep_max_hours=rule.keep_max_hours,
                exempt_busy_gpus=rule.exempt_busy_gpus, exempt_users=frozenset(rule.exempt_users),
                exempt_hardware=frozenset(rule.exempt_hardware),
                exempt_sessions_under_hours=rule.exempt_sessions_under_hours, source=f"project {slug}")


def rule_for_project(project) -> Rule:
    return as_rule(IdleRule.objects.filter(project=project).first(), project.slug)


def facts_of(job, last_activity: int | None = None) -> JobFacts:
    """The job's facts for the rule; `last_activity`: a session's server's last activity on the hub (epoch
    seconds), as portal/sessions/activity.py read it this cycle (None: not known, never idle)."""
    hardware = job.hardware
    is_session = job.kind == job.Kind.SESSION
    ready = None
    if is_session:
        # The session's row by its relation name (portal/sessions depends on this app, not the other way round).
        ready = getattr(getattr(job, "session", None), "ready_at", None) or job.started_at
    return JobFacts(username=job.user.username, hardware=hardware.slug if hardware else "",
                    gpus_reserved=(hardware.gpus_per_node if hardware else 0) * job.nodes,
                    is_session=is_session, walltime_seconds=job.walltime_seconds,
                    last_activity=last_activity, ready_at=int(ready.timestamp()) if ready else None)


def _duration(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} minutes"


def describe(rule: Rule, *, session: bool = False) -> str:
    """The rule in one sentence, as the job page and the API say which applies (for a session, with its other
    fact: its JupyterLab unused)."""
    action = (f"cancelled after {_duration(rule.cancel_after_seconds)} unless its owner keeps it"
              if rule.action == CANCEL else "its owner is told, nothing is cancelled")
    warns = ", ".join(_duration(w) for w in rule.warn_at_seconds) or "none"
    if session:
        return (f"{rule.source} rule: a session is idle when nobody uses its JupyterLab and every GPU it holds stays "
                f"below {rule.threshold_percent:g} % for {_duration(rule.window_seconds)}; warnings at {warns}; "
                f"{action}")
    return (f"{rule.source} rule: a job is idle when every GPU stays below {rule.threshold_percent:g} % for "
            f"{_duration(rule.window_seconds)}; warnings at {warns}; {action}")
