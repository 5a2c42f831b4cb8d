from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from portal.budgets.actions import Money
from portal.job_states import ACTIVE_STATES, FINAL_STATES, JobState  # noqa: F401  (re-exported: the jobs app's own vocabulary)
from portal.jobs.causes import Cause
from portal.jobs.outcome import exit_text

# States in which the scheduler knows the job and the tracker must ask about it.
TRACKED_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.LOST})

_ENDINGS = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT}
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    JobState.QUEUED: frozenset({JobState.SUBMITTING, JobState.CANCELLED, JobState.FAILED}),
    # A refused submit fails; a cancel requested meanwhile is applied once the scheduler id is known.
    JobState.SUBMITTING: frozenset({JobState.PENDING, JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.LOST, *_ENDINGS}),
    JobState.RUNNING: frozenset({JobState.LOST, *_ENDINGS}),
    # Accounting may still turn up for a lost job; then it ends normally.
    JobState.LOST: frozenset({JobState.RUNNING, *_ENDINGS}),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.TIMED_OUT: frozenset(),
}


class IllegalTransition(Exception):
    pass


# The columns portal.usage.queries.usage_rows reads of a job (see Job.Meta.indexes).
USAGE_COLUMNS = ["cost_amount", "ended_at", "created_at", "cluster", "hardware", "user", "nodes", "elapsed_seconds",
                 "estimate_unit"]


class Job(models.Model):
    class Launcher(models.TextChoices):
        SCRIPT = "script", "Run the script once"
        TORCHRUN = "torchrun", "torchrun: one process per GPU on every node"
        MPIRUN = "mpirun", "mpirun -npernode (MPI codes)"

    class Kind(models.TextChoices):
        SCRIPT = "script", "Script"
        NOTEBOOK = "notebook", "Notebook"
        # An interactive JupyterLab on the allocation's first node, opened through the hub (portal/sessions/).
        SESSION = "session", "Session"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="jobs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.PROTECT, related_name="jobs")
    hardware = models.ForeignKey(
        "catalog.HardwareType", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    software = models.ForeignKey(
        "catalog.Software", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    group = models.ForeignKey("jobs.JobGroup", null=True, blank=True, on_delete=models.CASCADE, related_name="jobs")
    # Set for an element of a sweep submitted as one scheduler array: its index there (1..N).
    array_index = models.PositiveIntegerField(null=True, blank=True)

    # What was asked
    name = models.CharField(max_length=63)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.SCRIPT)
    nodes = models.PositiveIntegerField(default=1)
    walltime_seconds = models.PositiveIntegerField()
    launcher = models.CharField(max_length=10, choices=Launcher.choices, default=Launcher.SCRIPT)
    script = models.TextField(help_text="the payload the user wrote")
    notebook = models.JSONField(null=True, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    env = models.JSONField(default=dict, blank=True)
    template = models.CharField(max_length=50, blank=True, help_text="job template whose files travel with the job")
    working_directory = models.CharField(max_length=255, blank=True, help_text="where the script runs; blank = the job directory")
    procs_per_node = models.PositiveIntegerField(default=0, help_text="0 = one per GPU")
    # Each at $KAKEHASHI_DATA/<name>; staged onto the cluster by the dispatch worker before the submit.
    datasets = models.ManyToManyField("storage.Dataset", blank=True, related_name="jobs")
    # The exact job script handed to the scheduler: `rendered_script`. An element of a sweep's array keeps none of
    # its own (its group keeps the array's one script): 1,000 copies of a script that grows a line per element
    # were most of a 1,000-point sweep's bytes (docs/decisions/0024).
    own_script = models.TextField(blank=True, db_column="rendered_script",
                                  help_text="the exact job script handed to the scheduler (blank: its array's)")
    submit_command = models.CharField(max_length=500, blank=True, help_text="the command that submits it, in the job directory")
    idempotency_key = models.CharField(max_length=128, null=True, blank=True)

    # Where and how it runs
    scheduler_name = models.CharField(max_length=63, blank=True)
    scheduler_id = models.CharField(max_length=64, blank=True, db_index=True)
    remote_dir = models.CharField(max_length=255, blank=True)
    account_username = models.CharField(max_length=32, blank=True)
    # The identity it was rendered for at submit, so the dispatch reads it with the job's row instead of looking it
    # up again (None where the backend logs in as no one, or the account was removed since: then it is looked up).
    cluster_account = models.ForeignKey("clusters.ClusterAccount", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")

    # What happened
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    state_reason = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # The signal accounting says killed the job (a cancel, a walltime kill): shown beside or instead of the exit
    # code, which a killed job does not have (portal.jobs.outcome).
    exit_signal = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    elapsed_seconds = models.PositiveIntegerField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Who or what asked for the cancel and why ("cancelled by alice", the strict budget's figures): the job's
    # final reason, whatever words the scheduler's accounting uses for the kill.
    cancel_reason = models.TextField(blank=True)
    # Which of them (portal/jobs/causes.py: the owner, a project admin, the budget, the reconciler): the cause its
    # ending carries once the scheduler has stopped it, which is what its owner is told.
    cancel_cause = models.CharField(max_length=24, choices=Cause.choices, blank=True)
    # A submit attempt holds the job until this time; another attempt may only take over after it.
    dispatch_lease_until = models.DateTimeField(null=True, blank=True)
    dispatch_attempts = models.PositiveIntegerField(default=0)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)

    # Money, in the unit of the project's budget
    estimate_amount = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)
    estimate_unit = models.CharField(max_length=16, blank=True)
    cost_amount = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)

    # What the job reported in outputs/metrics.json (a flat object of numbers), read when its outputs are collected.
    metrics = models.JSONField(default=dict, blank=True)
    # What of outputs/ was not collected, and why, in sentences ("3 files not collected: names with control
    # characters"); empty when everything came back (portal/jobs/outputs.py).
    outputs_not_collected = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-id"]
        # A project's jobs newest first (its page, the job list filtered to it): read in index order, never sorted.
        # It carries what the usage pages group and sum, so a project's year of usage is read from the index alone.
        indexes = [models.Index(fields=["project", "-id"], name="job_project_newest", include=USAGE_COLUMNS)]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="one_job_per_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"Job {self.pk} {self.name} ({self.state})"

    @property
    def rendered_script(self) -> str:
        """The exact job script handed to the scheduler (an array element's is its array's)."""
        if self.own_script or self.array_index is None:
            return self.own_script
        group = self.group  # the group assigned in memory, or read once (the lists select it with the job)
        return group.rendered_script if group is not None else ""

    @rendered_script.setter
    def rendered_script(self, script: str) -> None:
        self.own_script = script

    @property
    def exit_text(self) -> str:
        return exit_text(self.exit_code, self.exit_signal)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def estimate(self) -> Money | None:
        """What was reserved for it, in the unit of the project's budget."""
        return None if self.estimate_amount is None else Money(self.estimate_amount, self.estimate_unit)

    @property
    def cost(self) -> Money | None:
        """What it was charged when it ended, in the same unit as its estimate."""
        return None if self.cost_amount is None else Money(self.cost_amount, self.estimate_unit)

    @property
    def can_cancel(self) -> bool:
        return self.state in ACTIVE_STATES and self.cancel_requested_at is None

    def check_transition(self, new_state: str) -> None:
        if new_state not in ALLOWED_TRANSITIONS[self.state]:
            raise IllegalTransition(f"job {self.pk}: {self.state} → {new_state} is not an allowed transition")


class JobEvent(models.Model):
    """Something that happened to a job (a state change, or a note that changes none): when, why (`cause`, what
    readers switch on), in words for people (`reason`), with its evidence (`data`) and who did it (`actor`).
    Written only by portal/jobs/transitions.py, from the events of portal/jobs/events.py."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    from_state = models.CharField(max_length=12, blank=True)
    to_state = models.CharField(max_length=12)
    at = models.DateTimeField(auto_now_add=True)
    cause = models.CharField(max_length=24, choices=Cause.choices, default=Cause.OTHER)
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state or '∅'} → {self.to_state}"

    @property
    def who(self) -> str:
        """Who or what did it, as the job's history says: the person, or what acted for the cause."""
        if self.actor_id is not None:
            return str(self.actor)
        cause = (self.data or {}).get("by", "") if self.cause == Cause.CANCEL_REQUESTED else self.cause
        return EVENT_SOURCES.get(cause, "Kakehashi")


# Who or what writes an event of each cause when no person did (JobEvent.who).
EVENT_SOURCES = {
    Cause.SCHEDULER: "the scheduler", Cause.ACCOUNTING: "the scheduler's accounting", Cause.WALLTIME: "the scheduler",
    Cause.CANCELLED_OUTSIDE: "someone on the cluster", Cause.CANCELLED_BY_BUDGET: "the project's strict budget",
    Cause.RECONCILER: "the cloud reconciler", Cause.IDLE_WARNED: "the idle-GPU rule",
    Cause.CANCELLED_IDLE: "the idle-GPU rule",
}


class JobGroup(models.Model):
    """Jobs expanded from one description (a parameter sweep), tracked together.

    Submitted job by job, or, where the scheduler has arrays, as one array whose elements are the group's jobs
    (each keeps its own state, logs, cost and cancel; see docs/decisions/0005).
    """

    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="job_groups")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    name = models.CharField(max_length=63)
    sweep = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    array = models.BooleanField(default=False, help_text="submitted as one scheduler array")
    scheduler_name = models.CharField(max_length=63, blank=True)
    remote_dir = models.CharField(max_length=255, blank=True, help_text="the array's directory; element i runs in i/")
    scheduler_id = models.CharField(max_length=64, blank=True, help_text="the array's own id")
    rendered_script = models.TextField(blank=True, help_text="the array's job script, which its elements share")
    # The API's Idempotency-Key, or the form's draft id: the same sweep asked for twice is recorded once.
    idempotency_key = models.CharField(max_length=128, null=True, blank=True)
    # When its owner was told that every point had ended (once, however the last points end: portal/jobs/notices.py).
    ended_told_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="one_sweep_per_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"Sweep {self.pk} {self.name}"


class JobOutput(models.Model):
    """A copy of a job's stdout/stderr fetched from the cluster by a worker (web requests never reach it)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="outputs")
    stream = models.CharField(max_length=6, choices=[("stdout", "stdout"), ("stderr", "stderr")])
    data = models.BinaryField(default=b"")
    truncated = models.BooleanField(default=False)
    complete = models.BooleanField(default=False)  # the job ended and everything there is was fetched
    fetched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "stream"], name="one_output_per_stream")]


class JobArtifact(models.Model):
    """A file the job left in its outputs/ directory; small ones are copied into the portal's storage."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="artifacts")
    path = models.CharField(max_length=500)  # relative to the job's outputs/ directory
    size = models.BigIntegerField()
    stored_name = models.CharField(max_length=700, blank=True)  # in default_storage; blank = left on the cluster
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["path"]
        constraints = [models.UniqueConstraint(fields=["job", "path"], name="one_artifact_per_path")]
