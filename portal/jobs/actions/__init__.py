"""What happens to a Job from Submit on: one module per capability (Zulip's `zerver/actions/` shape).

- validation: what a request must satisfy (SubmitError says what to change)
- submit: a checked request recorded, its estimate reserved, its dispatch enqueued
- sweeps: a job per grid point, as one scheduler array where the scheduler has them
- dispatch: handing jobs to the scheduler exactly once, and recovering what a crash left behind
- cancel: who may cancel, what a cancel records, and carrying it out

Callers import the module of the capability they use (`from portal.jobs.actions.cancel import request_cancel`):
there is no re-export here, so what a caller depends on is in its imports. Every state change goes through
`portal.jobs.transitions`; work for a worker is enqueued by task name (`portal.enqueue`), so these modules never
import tasks.
"""
