from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class FileState(models.TextChoices):
    READY = "ready", "Ready"
    # A file of several parts, until a worker has hashed the joined object and found the SHA-256 the uploader gave
    # (portal/storage/verify.py): listed, but not downloadable, not a dataset's, not staged to any job.
    VERIFYING = "verifying", "Verifying"


class StoredFile(models.Model):
    """A file in a project's shared storage: its place in the project (`path`) and where the bytes are.

    The bytes live in the site's object store (or, for `make run`, the file system) under `storage_name`,
    normally `projects/<slug>/<path>`; only portal/storage reads, signs or deletes them. A Dataset (a file, a
    folder prefix of these paths, or a registered cluster path) will refer to rows like this one.
    """

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=512)
    # The key in default_storage. Kept apart from `path`: a replaced file is written under a fresh key first
    # and the old bytes deleted after the switch, so a reader never sees a half-written file.
    storage_name = models.CharField(max_length=1024)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    state = models.CharField(max_length=10, choices=FileState.choices, default=FileState.READY)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "path"]
        constraints = [models.UniqueConstraint(fields=["project", "path"], name="one_file_per_project_path")]
        # A renamed file keeps its key: a new upload's key is checked against every file's (uploads._free_key).
        indexes = [models.Index(fields=["storage_name"])]

    def __str__(self) -> str:
        return f"{self.project.slug}:{self.path}"

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class UploadState(models.TextChoices):
    OPEN = "open", "Uploading"
    COMPLETED = "completed", "Completed"
    ABORTED = "aborted", "Aborted"
    # Completed, then the whole object's SHA-256 was not the one given: the object was deleted (`reason` says so).
    REFUSED = "refused", "Refused"


class UploadSession(models.Model):
    """One file on its way into the object store as an S3 multipart upload, straight from the uploader.

    The portal creates it (path, size and quota checked), signs each part, lists the parts the store holds so
    an interrupted upload resumes, and completes or aborts it; the bytes never pass through the portal. Until
    it is completed it is not a StoredFile: an incomplete upload is never listed, staged or downloaded.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)  # not guessable, not counted
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="uploads")
    path = models.CharField(max_length=512)
    key = models.CharField(max_length=1024)  # where the completed file will be; see StoredFile.storage_name
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64, blank=True)  # the whole file's, as the uploader computed it (by completion)
    part_size = models.PositiveBigIntegerField()
    upload_id = models.CharField(max_length=1024, blank=True)  # S3's
    overwrite = models.BooleanField(default=False)
    state = models.CharField(max_length=10, choices=UploadState.choices, default=UploadState.OPEN)
    reason = models.CharField(max_length=500, blank=True)  # why it was aborted or refused
    # A completed upload that replaced a file, until its bytes are verified: the file's previous object (kept, and
    # put back if the new bytes are refused) with its size and SHA-256.
    replaced_key = models.CharField(max_length=1024, blank=True)
    replaced_size = models.PositiveBigIntegerField(null=True, blank=True)
    replaced_sha256 = models.CharField(max_length=64, blank=True)
    stored_file = models.ForeignKey(StoredFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    last_activity_at = models.DateTimeField(auto_now=True)  # a part signed or listed; the abandon sweep reads it
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "last_activity_at"]), models.Index(fields=["project", "state"])]

    def __str__(self) -> str:
        return f"{self.project.slug}:{self.path} ({self.state})"

    @property
    def part_count(self) -> int:
        return max(1, -(-self.size // self.part_size))

    def expected_part_size(self, number: int) -> int:
        if number < self.part_count:
            return self.part_size
        return self.size - self.part_size * (self.part_count - 1)


class UploadPart(models.Model):
    """The SHA-256 the portal signed for one part (base64, as S3 writes it); completion hands them to the store,
    which checks each against what it received."""

    session = models.ForeignKey(UploadSession, on_delete=models.CASCADE, related_name="parts")
    number = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=44)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "number"], name="one_checksum_per_part")]


class DatasetKind(models.TextChoices):
    FILE = "file", "Object store file"
    FOLDER = "folder", "Object store folder"
    CLUSTER_PATH = "cluster_path", "Registered cluster path"


class DatasetState(models.TextChoices):
    CHECKING = "checking", "Being checked"  # a registered path, until a worker has looked at it on the cluster
    READY = "ready", "Ready"
    REFUSED = "refused", "Refused"  # the check failed; `reason` says why


class Dataset(models.Model):
    """Data a job can be given by name: it sees it at $KAKEHASHI_DATA/<name> (docs/decisions/0017).

    A file or a folder (every file under a path prefix) of the project's object store, copied to a cluster's
    per-project cache when a job there needs it; or a path on one cluster (a TSUBAME group disk) used in place,
    registered by a project admin and checked, as that admin's account, to lie inside the project's root there
    (`Allocation.data_root`) and to be readable.
    """

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=12, choices=DatasetKind.choices)
    # A file: the file itself (a dataset keeps it: it is not deleted while the dataset exists).
    stored_file = models.ForeignKey(StoredFile, null=True, blank=True, on_delete=models.PROTECT, related_name="datasets")
    # A folder: the project-relative path whose files it holds (no trailing "/").
    prefix = models.CharField(max_length=512, blank=True)
    # A registered cluster path: where, on which cluster.
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    cluster_path = models.CharField(max_length=1024, blank=True)
    size = models.PositiveBigIntegerField(null=True, blank=True)  # where known (object store data)
    sha256 = models.CharField(max_length=64, blank=True)  # a file's
    state = models.CharField(max_length=10, choices=DatasetState.choices, default=DatasetState.READY)
    reason = models.CharField(max_length=1000, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="one_dataset_per_project_name")]

    def __str__(self) -> str:
        return f"{self.project.slug}:{self.name}"

    @property
    def current_size(self) -> int | None:
        """A file's size as it is now (a file replaced by a new upload keeps its row and its datasets)."""
        return self.stored_file.size if self.stored_file is not None else self.size

    @property
    def current_sha256(self) -> str:
        return self.stored_file.sha256 if self.stored_file is not None else self.sha256

    @property
    def source(self) -> str:
        """Where the data is, in words a person reads."""
        if self.kind == DatasetKind.FILE:
            return self.stored_file.path if self.stored_file else ""
        if self.kind == DatasetKind.FOLDER:
            return f"{self.prefix}/"
        return f"{self.cluster.slug if self.cluster else '?'}:{self.cluster_path}"


class Folder(models.Model):
    """A folder someone made on purpose (`mkdir`): listed, and kept, while it holds no file. A folder that holds
    files needs no row (a file's parents are its folders), so uploads never write one."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="folders")
    path = models.CharField(max_length=512)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project__slug", "path"]
        constraints = [models.UniqueConstraint(fields=["project", "path"], name="one_folder_per_project_path")]

    def __str__(self) -> str:
        return f"{self.project.slug}:{self.path}/"


class PinnedFile(models.Model):
    """One file a job was given when its data was staged: the object, its size and SHA-256 as they were, kept with
    the job. Its page says what data it ran on even after the project's files were replaced, renamed or deleted;
    and while the job is queued or running, the object is not deleted nor its cluster copy pruned."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="pinned_files")
    dataset = models.CharField(max_length=100)  # the dataset's name then
    path = models.CharField(max_length=512)  # the file's path in the project then ("" for a registered cluster path)
    storage_name = models.CharField(max_length=1024, blank=True)
    cluster_path = models.CharField(max_length=1024, blank=True)  # a registered path used in place
    size = models.PositiveBigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["job", "dataset", "path"]
        indexes = [models.Index(fields=["storage_name"]), models.Index(fields=["sha256"])]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.dataset}/{self.path}"


class ClusterCache(models.Model):
    """A project's copies of dataset files in its cache on one cluster (docs/decisions/0017, 0027), as the last
    staging or pruning found it: what project admins see, and what the pruning task keeps under its limit."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="cluster_caches")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    files = models.PositiveIntegerField(default=0)
    bytes = models.PositiveBigIntegerField(default=0)
    limit_bytes = models.PositiveBigIntegerField(null=True, blank=True, help_text="empty: the site's default")
    pruned_files = models.PositiveIntegerField(default=0)  # by the last pruning
    pruned_bytes = models.PositiveBigIntegerField(default=0)
    measured_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=1000, blank=True)

    class Meta:
        ordering = ["project__slug", "cluster__slug"]
        constraints = [models.UniqueConstraint(fields=["project", "cluster"], name="one_cache_per_project_cluster")]

    def __str__(self) -> str:
        return f"{self.project.slug}@{self.cluster.slug}"

    @property
    def limit(self) -> int:
        """The bytes pruning keeps it under: its own limit, else the site's default."""
        return self.limit_bytes or int(settings.KAKEHASHI_CLUSTER_CACHE_BYTES)


class PackState(models.TextChoices):
    WRITING = "writing", "Being written"  # claimed and being written; staging does not read it yet
    READY = "ready", "Ready"


class Pack(models.Model):
    """Many small files of a project kept together as one tar object in the store, beside their own objects
    (docs/decisions/0062): a job's first staging of a folder of 10,000 small files reads a few packs, not 10,000
    objects. Each member is named by its SHA-256, so a pack stays right for its members whatever is renamed; a pack
    holding content no file of the project holds any more is deleted (portal/storage/packs.py)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="packs")
    storage_name = models.CharField(max_length=1024, unique=True)  # packs/<project>/<uuid>.tar
    size = models.PositiveBigIntegerField()
    files = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=PackState.choices, default=PackState.WRITING)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project__slug", "created_at"]
        indexes = [models.Index(fields=["state", "created_at"])]

    def __str__(self) -> str:
        return f"{self.project.slug}:{self.storage_name} ({self.state})"


class PackMember(models.Model):
    """One file's content in a pack: its tar member (header, bytes, padding) starts at `offset`."""

    pack = models.ForeignKey(Pack, on_delete=models.CASCADE, related_name="members")
    sha256 = models.CharField(max_length=64)
    offset = models.PositiveBigIntegerField()
    size = models.PositiveBigIntegerField()
    # False: the object's bytes were not its SHA-256 when the pack was written (staging never reads this member; the
    # file's own object goes, and is refused on the cluster with the reason).
    intact = models.BooleanField(default=True)

    class Meta:
        ordering = ["pack", "offset"]
        indexes = [models.Index(fields=["sha256"])]

    def __str__(self) -> str:
        return f"{self.pack_id}@{self.offset}: {self.sha256[:12]}"
