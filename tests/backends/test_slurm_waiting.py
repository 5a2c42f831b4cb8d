"""A waiting Slurm job's reason and expected start, as `squeue -o '%i|%T|%r|%S'` prints them with
SLURM_TIME_FORMAT=%s. The test cluster's idle nodes never make Slurm predict a start (a job waits there only when it
is held or asks for more than a partition allows, and then %S is N/A, as the first two lines were printed by the test
cluster's Slurm 22.05); the third line is the shape of a backfill prediction (Slurm's `squeue --start`)."""

from datetime import UTC, datetime

from backends.base import JobStatus, State
from backends.slurm import parse_squeue
from portal.jobs.tracking import waiting_words

SQUEUE = """222|PENDING|JobHeldUser|N/A
223|PENDING|PartitionTimeLimit|N/A
224|PENDING|Resources|1796000400
225|RUNNING|None|1795990000
"""


def test_a_waiting_job_says_why_and_when_slurm_expects_it_to_start():
    statuses = parse_squeue(SQUEUE, {"222", "223", "224", "225"})
    assert statuses["223"] == JobStatus("223", State.PENDING, "PartitionTimeLimit")
    assert statuses["224"].expected_start == datetime.fromtimestamp(1796000400, UTC)
    assert statuses["225"].expected_start is None  # a running job's %S is when it started, not a prediction
    assert waiting_words(statuses["224"]) == "Resources; expected to start 2026-11-30 01:00 UTC"
    assert waiting_words(statuses["222"]) == "JobHeldUser"
