"""What the pages, the API and the CLI show of a job's samples: one plain dict, the same everywhere."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone

from portal.samples import series
from portal.samples.models import IdleRule, JobSamples
from portal.samples.policy import as_rule, describe, rule_for_project


def job_gpu(job, *, with_series: bool = True) -> dict:
    """The summary, the idle state, the rule that applies and (for the chart) the series of a job."""
    samples = JobSamples.objects.filter(job=job).first()
    rule = rule_for_project(job.project)
    data = (samples.series if samples else None) or {}
    found = {
        "state": samples.state if samples else "unknown",
        "why": samples.state_why if samples else "no samples yet",
        "idle": bool(samples and samples.state == JobSamples.State.IDLE),
        "idle_since": samples.idle_since if samples else None,
        "summary": (samples.summary if samples else None) or {},
        "rule": describe(rule, session=job.kind == job.Kind.SESSION),
        "keep_max_hours": rule.keep_max_hours,
        "keep_until": samples.keep_until if samples else None,
        "kept_by": samples.kept_by.username if samples and samples.kept_by else "",
        "keeps": samples.keeps if samples else 0,
        "last_sample_at": samples.last_sample_at if samples else None,
        "nodes": data.get("nodes") or {},
        "idle_periods": series.idle_periods(data, rule.threshold_percent),
    }
    if with_series:
        found["chart"] = chart_data(data, found["idle_periods"])
    return found


def chart_data(data: dict, periods: list[tuple[int, int]]) -> dict:
    """Per GPU, utilisation and memory over time (epoch seconds), and the idle stretches to shade."""
    return {"gpus": [{"device": device, "util": [[p[series.T], p[series.UTIL]] for p in d.get("p") or []],
                      "memory": [[p[series.T], p[series.MEM]] for p in d.get("p") or []], "total": d.get("total")}
                     for device, d in sorted((data.get("gpus") or {}).items())],
            "idle": [list(p) for p in periods]}


def as_api(job) -> dict:
    """The job's GPU use for `GET /api/v1/jobs/{id}/` (no series: that is `samples/`)."""
    gpu = job_gpu(job, with_series=False)

    def when(value):
        return value.isoformat() if isinstance(value, datetime) else value

    return {"state": gpu["state"], "why": gpu["why"], "idle": gpu["idle"], "idle_since": when(gpu["idle_since"]),
            "summary": gpu["summary"], "rule": gpu["rule"], "keep_until": when(gpu["keep_until"]),
            "kept_by": gpu["kept_by"], "keeps": gpu["keeps"], "last_sample_at": when(gpu["last_sample_at"]),
            "idle_periods": [[datetime.fromtimestamp(a, UTC).isoformat(), datetime.fromtimestamp(b, UTC).isoformat()]
                             for a, b in gpu["idle_periods"]]}


RULE_FIELDS = ("pk", "threshold_percent", "window_seconds", "warn_at_seconds", "action", "cancel_after_seconds",
               "keep_max_hours", "exempt_busy_gpus", "exempt_users", "exempt_hardware", "exempt_sessions_under_hours")


def still_computing(job_ids) -> dict[int, dict]:
    """Whether each job's GPUs still compute, as one line a person reads at a glance ("computing: GPUs 87 % used",
    "idle since 14:05 (every GPU below 5 %)", "not known: no samples yet"), from the samples the tracking cycle
    last judged: one statement for any number of jobs (the project's rule comes in the same row), no series read.

    Job id → {"state", "text", "idle_since", "read_at"}; a job never sampled is "unknown", "no samples yet"."""
    ids = sorted({int(i) for i in job_ids if i is not None})
    found = {i: {"state": "unknown", "text": "not known: no samples yet", "idle_since": None, "read_at": None}
             for i in ids}
    if not ids:
        return found
    rule = "job__project__idle_rule__"
    rows = (JobSamples.objects.filter(job_id__in=ids)
            .values("job_id", "state", "state_why", "idle_since", "summary", "fetched_at", "job__project__slug",
                    *(rule + name for name in RULE_FIELDS)))
    for row in rows:
        own = IdleRule(**{name: row[rule + name] for name in RULE_FIELDS}) if row[rule + "pk"] else None
        threshold = as_rule(own, row["job__project__slug"]).threshold_percent
        found[row["job_id"]] = {"state": row["state"], "idle_since": row["idle_since"], "read_at": row["fetched_at"],
                                "text": computing_text(row["state"], row["state_why"], row["idle_since"],
                                                       row["summary"] or {}, threshold)}
    return found


def computing_text(state: str, why: str, idle_since, summary: dict, threshold: float) -> str:
    """One job's answer to "still computing?", from its stored verdict and summary."""
    means = [g["mean"] for g in summary.get("gpus") or [] if g.get("mean") is not None]
    used = f"GPUs {sum(means) / len(means):.0f} % used" if means else ""
    if state == JobSamples.State.BUSY:
        return f"computing: {used} ({why})" if used else f"computing: {why}"
    if state == JobSamples.State.IDLE:
        since = _clock(idle_since) if idle_since else "the start of its window"
        return f"idle since {since} (every GPU below {threshold:g} %)"
    if state == JobSamples.State.PARTLY_IDLE:
        return f"partly idle: {why}" + (f", {used}" if used else "")
    if state == JobSamples.State.EXEMPT:
        return f"exempt: {why}"
    return f"not known: {why or 'no samples yet'}"


def _clock(moment: datetime) -> str:
    """14:05 today, 2025-01-20 14:05 another day (the site's time zone)."""
    local, today = timezone.localtime(moment), timezone.localdate()
    return local.strftime("%H:%M") if local.date() == today else local.strftime("%Y-%m-%d %H:%M")
