"""The one line /site/ shows for a cloud job's GPUs ("still computing?"), in every state the rule can leave a job
in; the page itself is tested end to end in tests/cloud/test_still_computing.py."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from portal.samples.queries import computing_text

SUMMARY = {"gpus": [{"device": "node0/0", "mean": 91.0, "max": 99}, {"device": "node0/1", "mean": 83.0, "max": 97},
                    {"device": "node0/2", "mean": None, "max": None}]}


def test_still_computing_says_how_much_busy_gpus_are_used_and_since_when_idle_ones_are_idle():
    assert computing_text("busy", "2 of 3 GPUs busy", None, SUMMARY, 5) == "computing: GPUs 87 % used (2 of 3 GPUs busy)"
    assert computing_text("busy", "1 of 1 GPUs busy", None, {}, 5) == "computing: 1 of 1 GPUs busy"
    since = timezone.localtime().replace(hour=14, minute=5)
    assert computing_text("idle", "all 8 GPUs below 10 %", since, {}, 10) == "idle since 14:05 (every GPU below 10 %)"
    yesterday = since - timedelta(days=1)
    assert computing_text("idle", "", yesterday, {}, 5) == f"idle since {yesterday:%Y-%m-%d} 14:05 (every GPU below 5 %)"


def test_still_computing_says_partly_idle_exempt_and_not_known_with_the_rules_reason():
    assert computing_text("partly_idle", "only 1 of 8 GPUs busy", None, SUMMARY, 5) == \
        "partly idle: only 1 of 8 GPUs busy, GPUs 87 % used"
    assert computing_text("exempt", "hardware aws-p4d is exempt", None, {}, 5) == "exempt: hardware aws-p4d is exempt"
    assert computing_text("unknown", "no fresh samples of node0/3", None, {}, 5) == \
        "not known: no fresh samples of node0/3"
    assert computing_text("unknown", "", None, {}, 5) == "not known: no samples yet"
