"""The idle rule and the bounded series, on series Hypothesis generates: pure functions, no database."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from backends.sampling import GpuSample, Header, Parsed, ProcSample
from portal.samples import series
from portal.samples.rule import (
    BUSY,
    CANCEL,
    EXEMPT,
    IDLE,
    PARTLY_IDLE,
    UNKNOWN,
    JobFacts,
    Rule,
    judge,
    next_steps,
)

NOW = 1_800_000_000
JOB = JobFacts(username="alice", hardware="a100x8", gpus_reserved=2)
RULE = Rule(threshold_percent=5, window_seconds=600, warn_at_seconds=(600, 900), action=CANCEL,
            cancel_after_seconds=1200, keep_max_hours=4)


def build(utils: dict[str, list[float | None]], *, interval: int = 30, end: int = NOW, nvidia_smi: bool = True,
          node: str = "node01") -> dict:
    """A series of GPUs `utils` (device index → utilisation of each sample, oldest first) ending at `end`."""
    data: dict = {}
    parsed = Parsed(headers=[Header(node, interval, 100, 4, nvidia_smi, end)])
    count = max((len(v) for v in utils.values()), default=0)
    for i in range(count):
        t = end - (count - i) * interval
        parsed.procs.append(ProcSample(t, 3, 100 * i, 2048))
        for index, values in utils.items():
            if i < len(values):
                parsed.gpus.append(GpuSample(t, int(index), f"GPU-{index}", values[i], 1000, 81920, 60.0))
    return series.add(data, parsed)


utilisation = st.floats(min_value=0, max_value=100, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(utilisation, min_size=30, max_size=60), min_size=1, max_size=4), st.data())
def test_a_job_is_never_idle_when_any_sample_in_the_window_is_above_the_threshold(gpus, data):
    # Put one busy sample somewhere in the window (the last 20 samples of 30 s are the 600 s window).
    n = min(len(g) for g in gpus)
    gpus = [g[:n] for g in gpus]
    which = data.draw(st.integers(0, len(gpus) - 1))
    at = data.draw(st.integers(1, 19))
    gpus[which][-at] = data.draw(st.floats(min_value=5, max_value=100))
    verdict = judge(build({str(i): g for i, g in enumerate(gpus)}), RULE, JOB, NOW)
    assert verdict.state in (BUSY, PARTLY_IDLE)
    assert not next_steps(verdict, RULE, NOW).cancel


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.floats(min_value=0, max_value=4.99), min_size=30, max_size=60), min_size=1, max_size=4))
def test_a_job_whose_every_gpu_stayed_below_the_threshold_for_the_window_is_idle(gpus):
    n = min(len(g) for g in gpus)
    gpus = [g[:n] for g in gpus]
    verdict = judge(build({str(i): g for i, g in enumerate(gpus)}), RULE, JOB, NOW)
    assert verdict.state == IDLE and verdict.idle_gpus == len(gpus) and verdict.evidence
    assert verdict.idle_since <= NOW - RULE.window_seconds


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=4.99), min_size=0, max_size=60))
def test_without_fresh_samples_covering_the_window_nothing_is_idle(values):
    assert judge({}, RULE, JOB, NOW).state == UNKNOWN
    # Samples that stopped 10 minutes ago (a sampler killed, a node unreachable): stale, never idle.
    assert judge(build({"0": values}, end=NOW - 600), RULE, JOB, NOW).state == UNKNOWN
    # Too few to cover the window.
    assert judge(build({"0": values[:5]}), RULE, JOB, NOW).state == UNKNOWN


def test_an_unknown_utilisation_or_a_node_without_nvidia_smi_is_never_idle():
    assert judge(build({"0": [0.0] * 29 + [None]}), RULE, JOB, NOW).state == UNKNOWN
    blind = build({"0": [0.0] * 40})
    blind["nodes"]["node02"] = {"nvidia_smi": False, "errors": 0, "last_error": ""}
    assert judge(blind, RULE, JOB, NOW).why == "no nvidia-smi on node02"


def test_exempt_users_hardware_and_jobs_using_enough_gpus():
    idle = build({"0": [0.0] * 40, "1": [0.0] * 40})
    assert judge(idle, Rule(exempt_users=frozenset({"alice"}), window_seconds=600), JOB, NOW).state == EXEMPT
    assert judge(idle, Rule(exempt_hardware=frozenset({"a100x8"}), window_seconds=600), JOB, NOW).state == EXEMPT
    one_busy = build({"0": [0.0] * 40, "1": [90.0] * 40})
    assert judge(one_busy, RULE, JOB, NOW).state == BUSY
    assert judge(one_busy, Rule(window_seconds=600, exempt_busy_gpus=2), JOB, NOW).state == PARTLY_IDLE


def test_warnings_come_at_their_times_once_and_the_cancel_only_after_them():
    verdict = judge(build({"0": [0.0] * 60}), RULE, JOB, NOW)  # idle for 30 minutes
    assert verdict.state == IDLE and NOW - verdict.idle_since >= 1200
    assert next_steps(verdict, RULE, NOW).warn_at == (600, 900)
    # Nobody is cancelled without having been told first.
    assert not next_steps(verdict, RULE, NOW).cancel
    assert next_steps(verdict, RULE, NOW, warned=(600, 900)).cancel
    assert not next_steps(verdict, Rule(window_seconds=600, warn_at_seconds=()), NOW).cancel  # tell only


def test_a_keep_holds_everything_until_it_ends_then_the_clock_starts_again():
    verdict = judge(build({"0": [0.0] * 60}), RULE, JOB, NOW)
    assert next_steps(verdict, RULE, NOW, keep_until=NOW + 60) == next_steps(verdict, RULE, NOW - 10 ** 6)
    after = next_steps(verdict, RULE, NOW + 700, keep_until=NOW)
    assert after.warn_at == (600,) and not after.cancel


SESSION = JobFacts(username="alice", hardware="a100x8", gpus_reserved=2, is_session=True, walltime_seconds=8 * 3600)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), utilisation), min_size=0, max_size=60), min_size=0, max_size=3),
       st.integers(0, RULE.window_seconds - 1), st.integers(0, 2))
def test_a_session_used_within_the_window_is_never_idle_whatever_its_gpus_do(gpus, ago, reserved):
    n = min((len(g) for g in gpus), default=0)
    data = build({str(i): g[:n] for i, g in enumerate(gpus)})
    facts = JobFacts(**{**SESSION.__dict__, "gpus_reserved": reserved, "last_activity": NOW - ago})
    verdict = judge(data, RULE, facts, NOW)
    assert verdict.state == BUSY and "used in JupyterLab" in verdict.why
    assert not next_steps(verdict, RULE, NOW).warn_at and not next_steps(verdict, RULE, NOW).cancel


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=4.99), min_size=30, max_size=60), st.integers(0, 2))
def test_a_session_whose_last_activity_the_hub_did_not_tell_is_never_idle(values, reserved):
    facts = JobFacts(**{**SESSION.__dict__, "gpus_reserved": reserved})  # last_activity None: the hub away
    verdict = judge(build({"0": values}), RULE, facts, NOW)
    assert verdict.state == UNKNOWN and verdict.why == "the hub has not said when this session was last used"


def test_an_unused_session_is_idle_once_its_gpus_are_too_since_the_later_of_the_two():
    unused_since = NOW - 1500
    facts = JobFacts(**{**SESSION.__dict__, "last_activity": unused_since})
    # Its GPUs idle for 30 minutes, its Lab unused for 25: idle since the Lab's last use, with both as evidence.
    verdict = judge(build({"0": [0.0] * 60, "1": [1.0] * 60}), RULE, facts, NOW)
    assert verdict.state == IDLE and verdict.idle_since == unused_since and verdict.last_activity == unused_since
    assert verdict.why.startswith("no activity in JupyterLab since ") and verdict.evidence
    assert next_steps(verdict, RULE, NOW).warn_at == (600, 900)
    # A GPU that trains keeps an unused session busy (a training started from Lab, left to run).
    busy = judge(build({"0": [0.0] * 60, "1": [80.0] * 60}), RULE, facts, NOW)
    assert busy.state == BUSY and "no activity in JupyterLab" in busy.why
    # A session on a node without GPUs: its Lab's activity alone (not exempt, as a job without a GPU is).
    cpu_only = judge({}, RULE, JobFacts(**{**facts.__dict__, "gpus_reserved": 0}), NOW)
    assert cpu_only.state == IDLE and cpu_only.idle_since == unused_since and not cpu_only.evidence
    assert judge({}, RULE, JobFacts(**{**JOB.__dict__, "gpus_reserved": 0}), NOW).state == EXEMPT
    # A session that waited in the queue: the hub's activity is its spawn, but nobody could use it before it came up.
    waited = JobFacts(**{**facts.__dict__, "gpus_reserved": 0, "last_activity": NOW - 7200, "ready_at": NOW - 60})
    assert judge({}, RULE, waited, NOW).state == BUSY
    assert judge({}, RULE, waited, NOW + RULE.window_seconds).idle_since == NOW - 60
    # Its samples not covering the window: not known, even unused.
    assert judge(build({"0": [0.0] * 5}), RULE, facts, NOW).state == UNKNOWN


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), utilisation), min_size=1, max_size=3000))
def test_a_long_series_stays_bounded_and_keeps_its_maximum_and_its_time(values):
    data = build({"0": values}, interval=30)
    points = data["gpus"]["node01/0"]["p"]
    assert len(points) <= series.MAX_POINTS
    assert sum(p[series.DT] for p in points) == 30 * len(values)
    known = [v for v in values if v is not None]
    assert max((p[series.UTIL_MAX] for p in points if p[series.UTIL_MAX] is not None), default=None) == \
        (max(known) if known else None)
    assert len(data["cpu"]["node01"]["p"]) <= series.MAX_POINTS


def test_the_summary_prices_idle_gpu_hours_and_says_how_much_was_used():
    data = build({"0": [0.0] * 120, "1": [100.0] * 120})  # one hour, two GPUs, one idle
    summary = series.summarise(data, threshold=5, reserved_gpu_hours=2.0, rate_per_gpu_hour=3.5, unit="JPY")
    assert summary.gpu_hours_idle == 1.0 and summary.gpu_hours_used == 1.0 and summary.efficiency == 0.5
    assert summary.idle_cost == 3.5
    assert [(g.device, g.mean, g.max) for g in summary.gpus] == [("node01/0", 0.0, 0.0), ("node01/1", 100.0, 100.0)]
    assert series.idle_periods(build({"0": [0.0] * 10 + [50.0] + [0.0] * 10}), 5) == [
        (NOW - 21 * 30, NOW - 11 * 30), (NOW - 10 * 30, NOW)]
