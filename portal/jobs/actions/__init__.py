"""What happens to a Job from Submit on: one module per capability (Zulip's `zerver/actions/` shape).

- validation: what a request must satisfy (SubmitError says what to change)
- submit: a checked request recorded, its estimate reserved, its dispatch enqueued
- sweeps: a job per grid point, as one scheduler array where the scheduler has them
- dispatch: handing jobs to the scheduler exactly once, and recovering what a crash left behind
- cancel: who may cancel, what a cancel records, and carrying it out

Every state change goes through `portal.jobs.transitions`; work for a worker is enqueued by task name
(`portal.enqueue`), so these modules never import tasks.
"""

from portal.jobs.actions.cancel import (
    BulkCancel,
    CancelError,
    cancel_for_budget,
    cancel_on_scheduler,
    may_cancel,
    request_cancel,
    request_cancel_many,
    request_cancel_sweep,
)
from portal.jobs.actions.dispatch import DispatchOutcome, dispatch_array, dispatch_job, recover_stale_jobs
from portal.jobs.actions.submit import Submission, prepare_job, record_jobs, submit_job
from portal.jobs.actions.sweeps import (
    MAX_SWEEP_JOBS,
    SweepSubmission,
    expand_sweep,
    point_key,
    points_to_rerun,
    rerun_failed,
    submit_sweep,
    sweep_of,
)
from portal.jobs.actions.validation import (
    NOTEBOOK_OUTPUT,
    BudgetRefused,
    JobRequest,
    SubmitError,
    format_walltime,
    notebook_payload,
    parse_walltime,
)

__all__ = [
    "MAX_SWEEP_JOBS", "NOTEBOOK_OUTPUT", "BudgetRefused", "BulkCancel", "CancelError", "DispatchOutcome", "JobRequest",
    "Submission", "SubmitError", "SweepSubmission", "cancel_for_budget", "cancel_on_scheduler", "dispatch_array",
    "dispatch_job", "expand_sweep", "format_walltime", "may_cancel", "notebook_payload", "parse_walltime", "point_key",
    "points_to_rerun", "prepare_job", "record_jobs", "recover_stale_jobs", "request_cancel", "request_cancel_many",
    "request_cancel_sweep", "rerun_failed", "submit_job", "submit_sweep", "sweep_of",
]
