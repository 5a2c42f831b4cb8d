"""What the API accepts and answers. Input serializers check shapes only; the rules live in the actions.

Why one module: the API's answers nest one another (a submission holds a job, a job its outputs and money, a
dry run its places and budget), so the serializers share their fields (money, amounts, walltimes, absolute links)
and the schema names each once; the sections below follow the API's resources.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.parsers import unstorable_text
from portal.budgets.actions import Money
from portal.budgets.display import amount_text
from portal.jobs.actions.validation import format_walltime
from portal.jobs.causes import Cause
from portal.jobs.models import Job, JobState
from portal.jobs.specs import attached_datasets
from portal.projects.models import Role
from portal.samples.models import JobSamples
from portal.storage.models import DatasetKind, DatasetState, FileState

# ------------------------------------------------------------------------------------------------- common


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="what went wrong and what to do about it")
    code = serializers.CharField(help_text="machine-readable, e.g. invalid, not_found, budget_exceeded, throttled")
    field = serializers.CharField(required=False, help_text="the input at fault, when there is one")


class MoneySerializer(serializers.Serializer):
    amount = serializers.DecimalField(max_digits=20, decimal_places=4, help_text="exact, as the ledger keeps it")
    unit = serializers.CharField()
    text = serializers.CharField(help_text="how the pages show it, e.g. \"0.0042 points\" (the CLI prints this)")


def money(value: Money | None) -> dict[str, Any] | None:
    """The API's one spelling of an amount of money: four decimals as text, with its unit, and as pages show it."""
    if value is None:
        return None
    return {"amount": f"{value.amount:.4f}", "unit": value.unit, "text": f"{amount_text(value.amount)} {value.unit}"}


@extend_schema_field(MoneySerializer(allow_null=True))
class MoneyField(serializers.Field):
    """A `Money` attribute, spelled by `money`. Read-only; `read_only=False` where the schema has always shown the
    amount without readOnly (an answer's nested MoneySerializer before it was this field: places, presets)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, value: Money) -> dict[str, Any] | None:
        return money(value)


class AmountField(serializers.DecimalField):
    """An amount without its unit (which the answer gives once), spelled as `money` spells it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_digits=20, decimal_places=4, **kwargs)


class WalltimeField(serializers.CharField):
    """Seconds shown as HH:MM:SS."""

    def to_representation(self, value: int) -> str:
        return format_walltime(value)


def absolute_url(context: dict, viewname: str, *args: Any) -> str:
    """A link to `viewname`, absolute when the answer is for a request (the CLI follows it as it is)."""
    path = reverse(viewname, args=args)
    request = context.get("request")
    return request.build_absolute_uri(path) if request is not None else path


_bound: dict[type, Any] = {}  # serializer class → its fields bound once (a BindingDict), or None: not shareable
_bound_lock = threading.Lock()


def bound_once(cls: type[serializers.Serializer]):
    """The fields of `cls`, copied and bound once per process; None where they cannot be shared between requests.

    DRF deep-copies and binds every declared field for each serializer it builds: a tenth of a submit request's CPU
    (~40 fields in the answer, ~15 in the body; issue 28, goal 4a). A plain field keeps no state of a request: it
    validates or renders the value it is given, and DRF's own fields read nothing of their parent but the root's
    `partial`, which these serializers never set. A nested serializer or a related field does read its parent (its
    context, the instance): a class with one gets None and DRF's own per-instance fields.
    """
    if cls not in _bound:
        with _bound_lock:
            if cls not in _bound:
                fields = serializers.Serializer.fields.func(cls())  # DRF's own binding, to a serializer of the class
                shareable = not any(isinstance(field, serializers.BaseSerializer | serializers.RelatedField
                                               | serializers.ManyRelatedField) for field in fields.values())
                _bound[cls] = fields if shareable else None
    return _bound[cls]


class BodySerializer(serializers.Serializer):
    """A request body's serializer that validates with its class's fields bound once (`bound_once`)."""

    @property
    def fields(self):
        shared = bound_once(type(self))
        if shared is not None:
            return shared
        if "_own_fields" not in self.__dict__:
            self.__dict__["_own_fields"] = serializers.Serializer.fields.func(self)
        return self.__dict__["_own_fields"]


class AnswerSerializer(serializers.Serializer):
    """An answer rendered with its class's fields bound once (`bound_once`), not once per answer.

    Method fields are called on the answer's own serializer, so they see its context (the request, for absolute
    links). Reading only: `fields` stays DRF's, so the schema and any validation see fresh fields.
    """

    def to_representation(self, instance) -> dict[str, Any]:
        shared = bound_once(type(self))
        if shared is None:
            return super().to_representation(instance)
        answer: dict[str, Any] = {}
        for field in shared.values():  # as Serializer.to_representation does, with the shared fields
            if field.write_only:
                continue
            if isinstance(field, serializers.SerializerMethodField):
                answer[field.field_name] = getattr(self, field.method_name)(instance)
                continue
            try:
                value = field.get_attribute(instance)
            except serializers.SkipField:
                continue
            answer[field.field_name] = None if value is None else field.to_representation(value)
        return answer


# ----------------------------------------------------------------------------------------------- catalog


class TokenInfoSerializer(serializers.Serializer):
    name = serializers.CharField()
    prefix = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    expires_at = serializers.DateTimeField(allow_null=True)


class MeSerializer(serializers.Serializer):
    """Who the caller is: {"user": the user, "token": the ApiToken of this request or None}."""

    username = serializers.CharField(source="user.get_username")
    email = serializers.CharField(source="user.email", allow_blank=True)
    is_staff = serializers.BooleanField(source="user.is_staff")
    token = TokenInfoSerializer(allow_null=True, help_text="the token used for this request (null for a session)")


class ProjectSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    role = serializers.SerializerMethodField(help_text="your role in the project")
    max_walltime_hours = serializers.IntegerField(allow_null=True)

    @extend_schema_field(serializers.ChoiceField(choices=Role.choices))
    def get_role(self, project) -> str | None:
        # Site staff see every project, as its owners (like access.role_of).
        return getattr(project, "my_role", None) or (Role.OWNER if self.context["request"].user.is_staff else None)


class ClusterHealthSerializer(serializers.Serializer):
    """What the health beat last recorded of a cluster (portal/clusters/health.py); null figures: not said."""

    reachable = serializers.BooleanField()
    checked_at = serializers.DateTimeField()
    answered_at = serializers.DateTimeField(allow_null=True, help_text="the last time it answered")
    last_error = serializers.CharField(allow_blank=True)
    pending = serializers.IntegerField(allow_null=True, help_text="jobs waiting to start")
    running = serializers.IntegerField(allow_null=True)
    free_nodes = serializers.IntegerField(allow_null=True)
    total_nodes = serializers.IntegerField(allow_null=True)
    expected_start = serializers.DateTimeField(allow_null=True, help_text="when the waiting jobs should start (Slurm)")


class ClusterSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    name = serializers.CharField()
    kind = serializers.CharField()
    site_profile = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    enabled = serializers.BooleanField()
    health = serializers.SerializerMethodField(help_text="null: not checked yet")

    @extend_schema_field(ClusterHealthSerializer(allow_null=True))
    def get_health(self, cluster) -> dict[str, Any] | None:
        health = getattr(cluster, "health", None)  # a reverse one-to-one without a row raises AttributeError
        return ClusterHealthSerializer(health).data if health is not None else None


class HardwareSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    name = serializers.CharField()
    cluster = serializers.SlugField(source="cluster.slug")
    gpu_model = serializers.CharField(allow_blank=True)
    gpus_per_node = serializers.IntegerField()
    cpus_per_node = serializers.IntegerField()
    memory_gb = serializers.IntegerField(allow_null=True)
    max_nodes = serializers.IntegerField()
    max_walltime_hours = serializers.IntegerField()
    rate = serializers.DecimalField(max_digits=12, decimal_places=4, help_text="per node-hour, in rate_unit")
    rate_unit = serializers.CharField()
    measured = serializers.DictField(help_text="latest GPU health-check results (TFLOP/s, bandwidth, …)")
    price_per_node_hour = serializers.SerializerMethodField(
        help_text="with ?project=: a node-hour in the unit of the project's budget (null when no conversion is set)"
    )

    @extend_schema_field(MoneySerializer(allow_null=True))
    def get_price_per_node_hour(self, hardware) -> dict[str, Any] | None:
        prices = self.context.get("prices")
        if prices is None:
            return None
        return money(prices.get(hardware.pk))


class SoftwareSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    name = serializers.CharField()
    kind = serializers.CharField()
    image = serializers.CharField(allow_blank=True)
    modules = serializers.ListField(child=serializers.CharField())
    provides = serializers.ListField(child=serializers.CharField())
    kernels = serializers.ListField(child=serializers.CharField(), help_text="Jupyter kernels it provides for notebooks")
    description = serializers.CharField(allow_blank=True)
    clusters = serializers.SerializerMethodField()

    def get_clusters(self, software) -> list[str]:
        return sorted(c.slug for c in software.clusters.all())


# -------------------------------------------------------------------------------------------------- jobs


class FlexibleJSONField(serializers.JSONField):
    """A JSON value, or a string holding JSON (an .ipynb file's text pasted as a string)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise serializers.ValidationError(f"this is not valid JSON: {exc}") from None
            # The text held JSON of its own: check it as the body's parser checked the body.
            found = unstorable_text(data)
            if found:
                raise serializers.ValidationError(f"{found[0]}: {found[1]}" if found[0] else found[1])
        return super().to_internal_value(data)


class JobSubmitSerializer(BodySerializer):
    project = serializers.CharField(help_text="project slug")
    name = serializers.CharField(help_text="letters, digits, '-', '_' and '.', e.g. train-resnet")
    hardware = serializers.CharField(required=False, allow_null=True, help_text="hardware slug (GET /api/v1/hardware/)")
    software = serializers.CharField(required=False, allow_null=True, allow_blank=True, help_text="software slug, optional")
    nodes = serializers.IntegerField(required=False, default=1)
    walltime = serializers.CharField(required=False, default="01:00:00",
                                     help_text='"HH:MM:SS", "D-HH:MM:SS", "90m", "2h", "1d" or seconds')
    script = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, default="",
                                   help_text="the commands to run (not used with notebook)")
    launcher = serializers.ChoiceField(choices=Job.Launcher.choices, required=False, allow_null=True, default=None,
                                       help_text="how the script starts: once, torchrun per node, or mpirun; "
                                                 "default: the template's, else script")
    procs_per_node = serializers.IntegerField(required=False, default=0, min_value=0, max_value=1024,
                                              help_text="processes per node for torchrun/mpirun; 0 = one per GPU")
    template = serializers.CharField(required=False, allow_blank=True, default="",
                                     help_text="a job template shipped with Kakehashi: ddp-mnist, gpu-health")
    working_directory = serializers.CharField(required=False, allow_blank=True, default="",
                                              help_text="where the script runs on the cluster (default: the job directory)")
    env = serializers.DictField(child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False,
                                default=dict, help_text="environment variables for the job")
    notebook = FlexibleJSONField(required=False, allow_null=True, default=None,
                                 help_text="a Jupyter notebook (the .ipynb JSON) to run with papermill instead of a script")
    parameters = serializers.DictField(required=False, default=dict, help_text="papermill parameters of the notebook")
    datasets = serializers.ListField(child=serializers.CharField(), required=False, default=list, max_length=50,
                                     help_text="names of the project's datasets; the job reads each at "
                                               "$KAKEHASHI_DATA/<name>")
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="render the script and estimate the cost; record and reserve nothing")


class BatchJobSubmitSerializer(JobSubmitSerializer):
    """One job of a bulk submit: a submit's body without dry_run (a batch is recorded, or refused whole)."""

    dry_run = None


class BatchSubmitSerializer(serializers.Serializer):
    jobs = BatchJobSubmitSerializer(many=True, allow_empty=False, max_length=500,
                                    help_text="the jobs, each as POST jobs/ takes one; at most 500")


class BatchJobSerializer(serializers.Serializer):
    """A job a bulk submit recorded: what a script needs to follow it (GET jobs/{id}/ has the rest)."""

    id = serializers.IntegerField()
    uuid = serializers.UUIDField()
    name = serializers.CharField()
    project = serializers.SlugField(source="project.slug")
    cluster = serializers.SlugField(source="cluster.slug")
    hardware = serializers.SlugField(source="hardware.slug", allow_null=True)
    state = serializers.ChoiceField(choices=JobState.choices)
    estimate = MoneyField(allow_null=True)
    url = serializers.SerializerMethodField(help_text="the job in the API")

    def get_url(self, job: Job) -> str:
        return absolute_url(self.context, "api-job-detail", job.pk)


class BatchSubmissionSerializer(serializers.Serializer):
    created = serializers.BooleanField(help_text="false when an Idempotency-Key replayed an earlier batch")
    jobs = BatchJobSerializer(many=True, help_text="in the order they were sent")
    warnings = serializers.ListField(child=serializers.CharField())


class ArtifactSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="relative to the job's outputs/ directory")
    size = serializers.IntegerField()
    url = serializers.SerializerMethodField(help_text="where to download it; null when it stayed on the cluster")

    def get_url(self, artifact) -> str | None:
        return absolute_url(self.context, "api-job-output", artifact.job_id, artifact.pk) if artifact.stored_name else None


# A job's state as the API reports it: JobState's, and "draft" for a dry run (settings' JobStateEnum names it).
JOB_STATES = [("draft", "Draft (dry run)"), *JobState.choices]


class JobSerializer(AnswerSerializer):
    """A job as the API shows it. `script` is the exact job script handed (or to be handed) to the scheduler."""

    id = serializers.IntegerField(allow_null=True, help_text="null for a dry run")
    uuid = serializers.UUIDField()
    name = serializers.CharField()
    project = serializers.SlugField(source="project.slug")
    user = serializers.CharField(source="user.get_username")
    cluster = serializers.SlugField(source="cluster.slug")
    hardware = serializers.SlugField(source="hardware.slug", allow_null=True)
    software = serializers.SlugField(source="software.slug", allow_null=True)
    kind = serializers.ChoiceField(choices=Job.Kind.choices)
    nodes = serializers.IntegerField()
    walltime = WalltimeField(source="walltime_seconds", help_text="HH:MM:SS")
    walltime_seconds = serializers.IntegerField()
    launcher = serializers.ChoiceField(choices=Job.Launcher.choices)
    parameters = serializers.DictField(help_text="a notebook's papermill parameters")
    state = serializers.SerializerMethodField()
    state_reason = serializers.CharField(allow_blank=True)
    scheduler_id = serializers.CharField(allow_blank=True)
    exit_code = serializers.IntegerField(allow_null=True, help_text="the script's own, as accounting recorded it")
    exit_signal = serializers.IntegerField(allow_null=True, help_text="the signal accounting says killed the job")
    exit_text = serializers.CharField(help_text='as the pages say it: "exit code 3", "killed by signal 15 (SIGTERM)"')
    created_at = serializers.DateTimeField(allow_null=True)
    submitted_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    elapsed_seconds = serializers.IntegerField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(allow_null=True)
    cancel_reason = serializers.CharField(allow_blank=True, help_text="who or what asked for the cancel, and why")
    cancel_cause = serializers.CharField(
        allow_blank=True, help_text="which cancel it was: cancelled_by_owner, cancelled_by_admin, cancelled_by_budget, "
                                    "reconciler (\"\" if none was asked); the whole history: jobs/{id}/events/")
    estimate = MoneyField(allow_null=True)
    cost = MoneyField(allow_null=True)
    script = serializers.CharField(source="rendered_script", help_text="the exact job script handed to the scheduler")
    submit_command = serializers.CharField(allow_blank=True, help_text="how it is submitted, in its job directory")
    payload = serializers.CharField(source="script", allow_blank=True, help_text="what the submitter wrote (the script's body)")
    template = serializers.CharField(allow_blank=True)
    working_directory = serializers.CharField(allow_blank=True)
    group = serializers.IntegerField(source="group_id", allow_null=True, help_text="the sweep this job belongs to")
    array_index = serializers.IntegerField(
        allow_null=True, help_text="its element number when the sweep was submitted as one scheduler array"
    )
    datasets = serializers.SerializerMethodField(help_text="the datasets it was given, each at $KAKEHASHI_DATA/<name>")
    outputs = serializers.SerializerMethodField(help_text="files the job left in outputs/: path, size, url")
    outputs_not_collected = serializers.ListField(
        child=serializers.CharField(), read_only=True,
        help_text="what of outputs/ did not come back, and why (\"3 files not collected: names with control "
                  "characters\", \"only the first 10000 files were collected\"); empty when all of it did")
    url = serializers.SerializerMethodField(help_text="the job's page in the portal")
    gpu_state = serializers.SerializerMethodField(
        help_text="what the idle-GPU rule finds: busy, idle, partly_idle, unknown (no samples yet, or none it can "
                  "trust) or exempt; null before its first samples are fetched (docs/guide/idle-gpus.md)")
    gpu_hours_used = serializers.SerializerMethodField(help_text="GPU-hours used, utilisation-weighted, so far")
    gpu_hours_idle = serializers.SerializerMethodField(help_text="GPU-hours sampled below the rule's threshold")
    gpu_efficiency = serializers.SerializerMethodField(help_text="GPU-hours used / GPU-hours reserved (0 to 1)")

    def _gpu(self, job: Job) -> tuple[str | None, dict]:
        # From the list's annotation (one statement for the page), else the job's samples row.
        if hasattr(job, "gpu_state"):
            return job.gpu_state, job.gpu_summary or {}
        if job.pk is None or job.started_at is None:
            return None, {}  # a job that never started has no samples: a submit's answer asks nothing more
        samples = JobSamples.objects.filter(job_id=job.pk).only("state", "summary").first()
        return (samples.state, samples.summary or {}) if samples else (None, {})

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_gpu_state(self, job: Job) -> str | None:
        return self._gpu(job)[0]

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_gpu_hours_used(self, job: Job) -> float | None:
        return self._gpu(job)[1].get("gpu_hours_used")

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_gpu_hours_idle(self, job: Job) -> float | None:
        return self._gpu(job)[1].get("gpu_hours_idle")

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_gpu_efficiency(self, job: Job) -> float | None:
        return self._gpu(job)[1].get("efficiency")

    @extend_schema_field(serializers.ChoiceField(choices=JOB_STATES))
    def get_state(self, job: Job) -> str:
        return job.state if job.pk is not None else "draft"

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_datasets(self, job: Job) -> list[str]:
        # From the list's prefetch (one query for the page), or the datasets a submit being prepared attached.
        if getattr(job, "attached_datasets", None) is not None or job.pk is None:
            return [d.name for d in attached_datasets(job)]
        return sorted(d.name for d in job.datasets.all())

    @extend_schema_field(ArtifactSerializer(many=True))
    def get_outputs(self, job: Job) -> list[dict[str, Any]]:
        if job.pk is None:
            return []
        return ArtifactSerializer(job.artifacts.all(), many=True, context=self.context).data

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_url(self, job: Job) -> str | None:
        return absolute_url(self.context, "job-detail", job.pk) if job.pk is not None else None


class BudgetAfterSerializer(serializers.Serializer):
    """A dry run's view of the budget (catalog.queries.BudgetAfter)."""

    available = AmountField(source="summary.available", help_text="available now")
    after = AmountField(help_text="available once this job is reserved")
    unit = serializers.CharField(source="summary.unit")
    fits = serializers.BooleanField(help_text="false: a strict budget would refuse the job (402)")
    text = serializers.SerializerMethodField(help_text="available and after as the pages show them (without the unit)")

    def get_text(self, value) -> dict[str, str]:
        return {"available": amount_text(value.summary.available), "after": amount_text(value.after)}


class SweepSubmitSerializer(JobSubmitSerializer):
    sweep = serializers.DictField(
        child=serializers.ListField(child=serializers.JSONField()),
        help_text='parameter name → list of values; every combination is a job, e.g. {"LR": [0.1, 0.01]}',
    )
    array = serializers.BooleanField(
        required=False, allow_null=True, default=None,
        help_text="submit as one scheduler array (true), job by job (false), or wherever the scheduler has arrays (null)",
    )


class PlaceSerializer(serializers.Serializer):  # a catalog.places.Place
    cluster = serializers.SlugField(source="cluster.slug")
    cluster_name = serializers.CharField(source="cluster.name")
    kind = serializers.CharField(source="cluster.kind", help_text="slurm, pbs, sge, aws-batch, local")
    hardware = serializers.SlugField(source="hardware.slug", help_text="pass it as a job's `hardware`")
    hardware_name = serializers.CharField(source="hardware.name")
    gpu_model = serializers.CharField(source="hardware.gpu_model", allow_blank=True)
    gpus_per_node = serializers.IntegerField(source="hardware.gpus_per_node")
    nodes = serializers.IntegerField(help_text="whole nodes of this hardware the shape needs; pass it as `nodes`")
    gpus = serializers.IntegerField(help_text="GPUs in all (more than asked when nodes are larger)")
    same_model = serializers.BooleanField(help_text="false: another GPU model than the one asked for")
    cost = MoneyField(read_only=False, allow_null=True, help_text="the whole job in the unit of the project's budget")
    reporting_cost = MoneyField(read_only=False, source="reporting", allow_null=True,
                                help_text="the same in the site's reporting unit")
    reachable = serializers.BooleanField(allow_null=True, help_text="at the last health check; null: never checked")
    waiting = serializers.IntegerField(allow_null=True, help_text="jobs waiting where this one would wait")
    free_nodes = serializers.IntegerField(source="health.free_nodes", allow_null=True)  # no health check: null
    total_nodes = serializers.IntegerField(source="health.total_nodes", allow_null=True)
    expected_start = serializers.DateTimeField(allow_null=True,
                                               help_text="when the jobs waiting now should start (Slurm's squeue --start)")
    checked_at = serializers.DateTimeField(source="health.checked_at", allow_null=True,
                                           help_text="when the cluster was last asked")
    busy = serializers.CharField(help_text="how busy it is, in words")
    missing = serializers.CharField(help_text="what the caller lacks to run here (a linked cluster account); empty "
                                              "when they can")


class SweepSerializer(serializers.Serializer):
    """A sweep (portal.api.queries.SweepPage): its jobs, one per point, each with its own parameters, state and cost,
    a page at a time (`limit`, `offset` as the lists; `jobs_next` links the next page, null on the last)."""

    id = serializers.IntegerField(source="group.pk", allow_null=True, help_text="null for a dry run")
    name = serializers.CharField(source="group.name")
    project = serializers.SlugField(source="group.project.slug")
    sweep = serializers.DictField(source="group.sweep")
    array = serializers.BooleanField(help_text="submitted as one scheduler array")
    scheduler_id = serializers.CharField(source="group.scheduler_id", allow_blank=True,
                                         help_text="the array's own id, once submitted")
    script = serializers.CharField(help_text="the array's job script (array mode), else the first job's")
    estimate = MoneyField(allow_null=True, help_text="for all of its jobs")
    created = serializers.BooleanField(help_text="false when an Idempotency-Key replayed an earlier sweep, or for a dry run")
    jobs = JobSerializer(many=True, help_text="a page of its jobs in array order: `limit` (default 100) from `offset`")
    jobs_count = serializers.IntegerField(help_text="how many jobs the sweep has, on every page")
    jobs_next = serializers.URLField(allow_null=True, help_text="GET it for the next page of jobs; null on the last")
    jobs_previous = serializers.URLField(allow_null=True, help_text="the page before; null on the first")
    places = serializers.SerializerMethodField(
        help_text="dry run only: every place one point's shape may run for the project, cheapest first (as GET "
                  "places/; every point has that shape, so each cost is a point's)")

    @extend_schema_field(PlaceSerializer(many=True, allow_null=True))
    def get_places(self, sweep) -> list[dict[str, Any]] | None:
        return self.context.get("places")


class SubmissionSerializer(JobSerializer):
    """A submitted (or dry-run) job, with what the submission noticed. Serialises `submission.job`; the context
    holds the `submission`, whether it was a `dry_run` and, for one, the `budget_after` it."""

    dry_run = serializers.SerializerMethodField()
    created = serializers.SerializerMethodField(
        help_text="false when an Idempotency-Key replayed an earlier job, or for a dry run")
    warnings = serializers.SerializerMethodField()
    budget = serializers.SerializerMethodField(help_text="the project's budget after this job (dry run only)")
    places = serializers.SerializerMethodField(
        help_text="dry run only: every place this job's shape may run for the project, cheapest first (as GET places/)")

    def get_dry_run(self, job: Job) -> bool:
        return self.context["dry_run"]

    def get_created(self, job: Job) -> bool:
        return self.context["submission"].created and not self.context["dry_run"]

    def get_warnings(self, job: Job) -> list[str]:
        return self.context["submission"].warnings

    @extend_schema_field(ArtifactSerializer(many=True))
    def get_outputs(self, job: Job) -> list[dict[str, Any]]:
        if self.context["submission"].created:
            return []  # recorded by this very request: nothing has run yet (a query saved per submit)
        return super().get_outputs(job)

    @extend_schema_field(BudgetAfterSerializer(allow_null=True))
    def get_budget(self, job: Job) -> dict[str, Any] | None:
        after = self.context.get("budget_after")
        return BudgetAfterSerializer(after).data if after is not None else None

    @extend_schema_field(PlaceSerializer(many=True, allow_null=True))
    def get_places(self, job: Job) -> list[dict[str, Any]] | None:
        return self.context.get("places")


class JobEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    cause = serializers.ChoiceField(choices=Cause.choices, help_text="why it happened: what scripts switch on "
                                                                     "(portal/jobs/causes.py; docs/decisions/0026)")
    cause_text = serializers.CharField(source="get_cause_display", help_text="the cause in words")
    who = serializers.CharField(help_text="who or what did it: a person's name, the scheduler, the project's budget…")
    actor = serializers.SerializerMethodField(help_text="the person who did it (a user name); null when the portal, "
                                                        "the scheduler or a rule did")
    from_state = serializers.CharField(allow_blank=True, help_text='"" for the first event')
    to_state = serializers.CharField(help_text="the same as from_state for something that changed no state")
    text = serializers.CharField(source="reason", allow_blank=True, help_text="what happened, for a person to read")
    data = serializers.JSONField(help_text="the evidence: the scheduler's record, the budget's figures…")

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_actor(self, event) -> str | None:
        return event.actor.username if event.actor_id is not None else None


class LogSerializer(serializers.Serializer):
    stream = serializers.ChoiceField(choices=["stdout", "stderr"])
    offset = serializers.IntegerField(help_text="byte offset this chunk starts at")
    next_offset = serializers.IntegerField(help_text="pass as ?offset= to get what follows")
    data = serializers.CharField(allow_blank=True, trim_whitespace=False, help_text="UTF-8 text (invalid bytes replaced)")
    complete = serializers.BooleanField(help_text="true: the job ended and nothing will follow next_offset")
    truncated = serializers.BooleanField(help_text="the portal keeps only the first 8 MiB; the rest is on the cluster")
    job_state = serializers.CharField()


# ----------------------------------------------------------------------------------------------- budgets


class PercentField(serializers.FloatField):
    def to_representation(self, value: float) -> float:
        return round(float(value), 2)


class BudgetSerializer(serializers.Serializer):
    """A project's budget: {"project", "budget" (or None), "summary" (budgets.actions.BudgetSummary, or None)}."""

    project = serializers.SlugField(source="project.slug")
    budget = AmountField(source="summary.amount", allow_null=True,
                         help_text="the amount for the period; null when the project has no budget")
    reserved = AmountField(source="summary.reserved", allow_null=True)
    spent = AmountField(source="summary.spent", allow_null=True)
    available = AmountField(source="summary.available", allow_null=True)
    unit = serializers.CharField(source="summary.unit", allow_null=True)
    period = serializers.CharField(source="budget.period", allow_null=True)
    period_start = serializers.DateField(source="summary.period_start", allow_null=True)
    strict = serializers.BooleanField(source="summary.strict", allow_null=True,
                                      help_text="strict budgets refuse jobs they cannot cover (402)")
    used_percent = PercentField(source="summary.used_percent", allow_null=True)
    text = serializers.SerializerMethodField(help_text="budget, reserved, spent and available as the pages show them (without the unit)")

    def get_text(self, value: dict) -> dict[str, str] | None:
        summary = value.get("summary")
        if summary is None:
            return None
        amounts = {"budget": summary.amount, "reserved": summary.reserved, "spent": summary.spent,
                   "available": summary.available}
        return {key: amount_text(amount) for key, amount in amounts.items()}


# ------------------------------------------------------------------------------------------------- files


class FileSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    project = serializers.SlugField(source="project.slug")
    path = serializers.CharField()
    size = serializers.IntegerField()
    sha256 = serializers.CharField()
    state = serializers.ChoiceField(choices=FileState.choices, help_text="verifying: a file of several parts whose "
                                    "whole-file SHA-256 a worker is checking in the store; not downloadable nor "
                                    "usable by jobs until ready (a mismatch removes it: its upload says why)")
    uploaded_by = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    download_url = serializers.SerializerMethodField()

    def get_uploaded_by(self, stored) -> str | None:
        return stored.uploaded_by.get_username() if stored.uploaded_by else None

    def get_download_url(self, stored) -> str:
        return absolute_url(self.context, "api-file-download", stored.project.slug, stored.pk)


class DatasetSerializer(serializers.Serializer):
    """A dataset: what a job attaches by name and reads at $KAKEHASHI_DATA/<name>."""

    id = serializers.IntegerField()
    project = serializers.SlugField(source="project.slug")
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=DatasetKind.choices)
    source = serializers.CharField(help_text="the file, the folder (ending in /) or cluster:path")
    cluster = serializers.SlugField(source="cluster.slug", allow_null=True)
    size = serializers.IntegerField(source="current_size", allow_null=True, help_text="where known")
    sha256 = serializers.CharField(source="current_sha256", allow_blank=True, help_text="a file's")
    state = serializers.ChoiceField(choices=DatasetState.choices)
    reason = serializers.CharField(allow_blank=True, help_text="why a registered path was refused")
    created_at = serializers.DateTimeField()


class DatasetCreateSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="letters, digits, '.', '_', '-': the job reads $KAKEHASHI_DATA/<name>")
    path = serializers.CharField(required=False, allow_blank=True, default="", help_text="a file of the project")
    prefix = serializers.CharField(required=False, allow_blank=True, default="",
                                   help_text="a folder of the project: every file under it")
    cluster = serializers.CharField(required=False, allow_blank=True, default="",
                                    help_text="with cluster_path: the cluster it is on (project admins only)")
    cluster_path = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False,
                                         help_text="an absolute path inside the project's storage on that cluster, "
                                                   "used in place")


class FileUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="the file's contents")
    path = serializers.CharField(required=False, allow_blank=True, default="",
                                 help_text="where in the project, e.g. data/train.csv (blank: the file's name; "
                                           "ending in /: into that folder)")
    overwrite = serializers.BooleanField(required=False, default=False, help_text="replace a file already at this path")
