"""What the idle rule learns of a session's use from the hub (portal/sessions/activity.py) when the hub cannot tell:
nothing, so the session is never idle. (A hub that tells: tests/hub/test_sessions.py, on a real hub.)"""

from __future__ import annotations

from portal.samples.rule import UNKNOWN, JobFacts, Rule, judge
from portal.sessions.activity import parse_time, servers_activity
from tests.seaweedfs import free_port


def test_a_hub_that_cannot_be_reached_tells_no_activity_and_the_session_is_never_idle(settings):
    settings.KAKEHASHI_HUB_URL = "http://127.0.0.1:1"
    settings.KAKEHASHI_HUB_API_URL = f"http://127.0.0.1:{free_port()}/hub/api"  # nothing listens there
    assert servers_activity("alice") == {}
    unknown = JobFacts(username="alice", hardware="cpu", gpus_reserved=0, is_session=True, ready_at=0)
    assert judge({}, Rule(window_seconds=60), unknown, 10 ** 9).state == UNKNOWN


def test_the_hubs_times_are_read_as_utc_and_anything_else_as_not_known():
    assert parse_time("2026-11-27T06:48:20.123456Z") == 1795762100
    assert parse_time("2026-11-27T06:48:20") == 1795762100  # the hub's times are UTC
    assert parse_time(None) is None and parse_time("") is None and parse_time("yesterday") is None
