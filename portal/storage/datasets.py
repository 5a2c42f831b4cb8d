"""Datasets: named data of a project that jobs are given at $KAKEHASHI_DATA/<name> (docs/decisions/0017).

Creating one is a web request (checked names and paths, role, the project's own files); checking a registered
cluster path on the cluster is a worker's (`verify_dataset`, asked for by task name); what a job's datasets are,
as plain `backends` values with streams of the object store's bytes, is read by the dispatch worker
(`data_inputs`), which hands them to the backend to stage before it submits.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.utils import timezone

from backends.base import BackendError, DataFile, DataInput, DataRefused, Packed, TransportError
from portal.audit.actions import record
from portal.clusters.connect import NoClusterAccount, account_for, backend_for, is_cloud
from portal.clusters.models import Allocation, Cluster
from portal.enqueue import VERIFY_DATASET, enqueue_on_commit
from portal.projects import access
from portal.projects.models import Project
from portal.storage import objectstore, packs
from portal.storage.actions import clean_path
from portal.storage.errors import FileExists, FileMissing, StorageError, UploadConflict
from portal.storage.models import Dataset, DatasetKind, DatasetState, FileState, PinnedFile, StoredFile

log = logging.getLogger(__name__)

# One path segment that a shell, a file system and an S3 key all take as it is, and that reads as a name.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_CLUSTER_PATH = 1024
MAX_FOLDER_FILES = 100_000


def clean_name(raw: object) -> str:
    name = raw if isinstance(raw, str) else ""
    if not NAME_RE.fullmatch(name) or name.endswith("."):
        raise StorageError(
            f"{str(raw)[:60]!r} is not a valid dataset name: use 1-100 letters, digits, '.', '_' or '-', starting with "
            "a letter or digit (the job finds it at $KAKEHASHI_DATA/<name>)", field="name")
    return name


def clean_cluster_path(raw: object, root: str) -> str:
    """An absolute path on the cluster inside `root` (lexically: the worker checks what it resolves to)."""
    path = raw if isinstance(raw, str) else ""
    if not path:
        raise StorageError("give the path on the cluster (e.g. /gs/bs/tga-lab/imagenet)", field="cluster_path")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        raise StorageError("the path may not contain control characters", field="cluster_path")
    if not path.startswith("/"):
        raise StorageError(f"{path!r} is not absolute: give the full path on the cluster", field="cluster_path")
    if len(path) > MAX_CLUSTER_PATH:
        raise StorageError(f"the path is longer than {MAX_CLUSTER_PATH} characters", field="cluster_path")
    path = unicodedata.normalize("NFC", path).rstrip("/") or "/"
    if any(part in {".", ".."} for part in path.split("/")):
        raise StorageError(f"{path!r} has a '.' or '..' part: give the plain path", field="cluster_path")
    root = root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        raise StorageError(f"{path} is outside the project's storage on this cluster ({root})", field="cluster_path")
    return path


def create_dataset(user, project: Project, *, name: object, path: object = None, prefix: object = None,
                   cluster: Cluster | None = None, cluster_path: object = None) -> Dataset:
    """A new dataset from exactly one source: a file (`path`), a folder (`prefix`), or a cluster path.

    Object-store data may be named by anyone who may submit jobs in the project; registering a cluster path is
    for its admins (it lends the project's storage there to every member's jobs) and is checked on the cluster
    by a worker before jobs may use it.
    """
    access.require(user, project, "submit")
    name = clean_name(name)
    sources = [s for s in (path, prefix, cluster_path) if s not in (None, "")]
    if len(sources) != 1:
        raise StorageError("give exactly one of path (a file), prefix (a folder) or cluster_path", field="path")
    dataset = Dataset(project=project, name=name, created_by=user)
    if path not in (None, ""):
        clean = clean_path(str(path))
        stored = StoredFile.objects.filter(project=project, path=clean).first()
        if stored is None:
            raise FileMissing(f"project {project.slug} has no file {clean}", field="path")
        if stored.state == FileState.VERIFYING:
            raise UploadConflict(f"{clean} is being verified (its whole-file SHA-256 is checked after upload): name "
                                 "it as a dataset once the Data page shows it ready", code="verifying", field="path")
        dataset.kind, dataset.stored_file, dataset.size, dataset.sha256 = DatasetKind.FILE, stored, stored.size, stored.sha256
    elif prefix not in (None, ""):
        clean = clean_path(str(prefix).rstrip("/"))
        files = _folder_files(project, clean)
        if not files.exists():
            raise FileMissing(f"project {project.slug} has no file under {clean}/", field="prefix")
        dataset.kind, dataset.prefix = DatasetKind.FOLDER, clean
        dataset.size = sum(files.values_list("size", flat=True))
    else:
        access.require(user, project, "manage")
        if cluster is None:
            raise StorageError("choose the cluster the path is on", field="cluster")
        allocation = Allocation.objects.filter(project=project, cluster=cluster).first()
        if allocation is None or not allocation.data_root:
            raise StorageError(f"project {project.slug} has no storage registered on {cluster.name}: a site admin "
                               "sets its root (the allocation's data root) first", field="cluster")
        dataset.kind, dataset.cluster, dataset.state = DatasetKind.CLUSTER_PATH, cluster, DatasetState.CHECKING
        dataset.cluster_path = clean_cluster_path(cluster_path, allocation.data_root)
    try:
        with transaction.atomic():
            dataset.save()
            record("dataset.create", actor=user, project=project, target=dataset, name=name, kind=dataset.kind,
                   source=dataset.source)
            if dataset.kind == DatasetKind.CLUSTER_PATH:
                enqueue_on_commit(VERIFY_DATASET, dataset.pk, user.pk)
    except IntegrityError:
        raise FileExists(f"project {project.slug} already has a dataset named {name}", field="name") from None
    return dataset


def _folder_files(project: Project, prefix: str):
    """The ready files under `prefix/` (one still being verified is not yet a file a job may read)."""
    return StoredFile.objects.filter(project=project, path__startswith=prefix + "/",
                                     state=FileState.READY).order_by("path")


def verify_dataset(dataset_id: int, user_id: int) -> str:
    """Look at a registered cluster path as the registering admin's account (worker side): ready, or refused
    with the reason. An unreachable cluster leaves it being checked (the task is retried)."""
    dataset = Dataset.objects.select_related("project", "cluster").get(pk=dataset_id)
    if dataset.kind != DatasetKind.CLUSTER_PATH:
        return dataset.state
    user = get_user_model().objects.get(pk=user_id)
    root = Allocation.objects.get(project=dataset.project, cluster=dataset.cluster).data_root
    try:
        backend = backend_for(dataset.cluster, account_for(dataset.cluster, user, dataset.project))
        backend.check_data_path(dataset.cluster_path, root)
    except (DataRefused, NoClusterAccount) as exc:
        state, reason = DatasetState.REFUSED, str(exc)
    except (BackendError, TransportError) as exc:
        log.warning("could not check dataset %s yet: %s", dataset_id, exc)
        Dataset.objects.filter(pk=dataset_id).update(reason=f"the cluster could not be reached yet: {exc}"[:1000])
        raise
    else:
        state, reason = DatasetState.READY, ""
    Dataset.objects.filter(pk=dataset_id).update(state=state, reason=reason[:1000], checked_at=timezone.now())
    return state


def attachable(project: Project, names: object) -> list[Dataset]:
    """The project's ready datasets of these names, or StorageError naming the first that is not one (a dataset
    of another project reads as one that does not exist)."""
    if names in (None, "") or (isinstance(names, list | tuple) and not names):
        return []  # most jobs have none: not even an (empty) query to build
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise StorageError("datasets must be a list of dataset names", field="datasets")
    if len(set(names)) != len(names):
        raise StorageError("a dataset is attached twice", field="datasets")
    found = {d.name: d for d in Dataset.objects.filter(project=project, name__in=list(names)).select_related(
        "stored_file")}
    chosen = []
    for name in names:
        dataset = found.get(name)
        if dataset is None:
            raise StorageError(f"project {project.slug} has no dataset named {name[:100]!r}", field="datasets")
        if dataset.state != DatasetState.READY:
            why = f": {dataset.reason}" if dataset.reason else ""
            raise StorageError(f"dataset {name} is not ready ({dataset.get_state_display().lower()}{why})",
                               field="datasets")
        if dataset.stored_file is not None and dataset.stored_file.state == FileState.VERIFYING:
            raise StorageError(f"dataset {name} is not ready: its file {dataset.stored_file.path} was replaced and the "
                               "new bytes are being verified; try again in a moment", field="datasets")
        chosen.append(dataset)
    return chosen


def check_cluster(datasets: Iterable[Dataset], cluster: Cluster) -> None:
    """A registered path lives on one cluster: a job elsewhere cannot have it."""
    for dataset in datasets:
        if dataset.kind == DatasetKind.CLUSTER_PATH and dataset.cluster_id != cluster.pk:
            raise StorageError(f"dataset {dataset.name} is a path on {dataset.cluster.name}: it cannot be given to a "
                               f"job on {cluster.name}", field="datasets")


def _opener(key: str):
    if objectstore.configured():
        return lambda: objectstore.open_stream(key)
    return lambda: default_storage.open(key, "rb")


# How long a login node's presigned GET of a dataset's object lives (it is signed just before the pull starts).
PULL_URL_SECONDS = 3600


def _data_file(path: str, stored: StoredFile, packed: Packed | None = None) -> DataFile:
    if not objectstore.configured():
        return DataFile(path, stored.sha256, stored.size, _opener(stored.storage_name))
    key = stored.storage_name
    return DataFile(path, stored.sha256, stored.size, _opener(key), url=f"s3://{objectstore.bucket()}/{key}",
                    open_range=lambda start, end: objectstore.open_range(key, start, end),
                    get_url=lambda: objectstore.presigned_get(key, PULL_URL_SECONDS, public=False),
                    presign=lambda: objectstore.presigned_get(key, PULL_URL_SECONDS), packed=packed)


def _check_cloud_reach(dataset: Dataset, cluster: Cluster) -> None:
    """A cloud job's container pulls the dataset itself from the S3 endpoint its cluster names (AWS's own when
    none): the portal's store must be that endpoint, or the job would start, find no such bucket and fail."""

    if not is_cloud(cluster) or not objectstore.configured():
        return
    site = (settings.KAKEHASHI_S3_ENDPOINT_URL or "").rstrip("/")
    cloud = str((cluster.options or {}).get("s3_endpoint_url") or "").rstrip("/")
    if site != cloud:
        raise DataRefused(
            f"dataset {dataset.name} is in the portal's object store ({site or 'AWS S3'}), which the containers of "
            f"{cluster.name} do not read (they read {cloud or 'AWS S3'}): a site admin must give the cluster the "
            "portal's S3 endpoint (option s3_endpoint_url), or keep the portal's bucket on AWS S3")


def data_inputs(datasets: Iterable[Dataset], cluster: Cluster, pins: list[PinnedFile] | None = None) -> list[DataInput]:
    """What the backend stages for a job (worker side): each dataset's files as they are now, or its path. With
    `pins`, also what each file was (object, size, SHA-256), for `pin` to record with the jobs."""
    inputs = []
    for dataset in datasets:
        if dataset.kind != DatasetKind.CLUSTER_PATH:
            _check_cloud_reach(dataset, cluster)
        if dataset.kind == DatasetKind.FILE:
            if dataset.stored_file.state == FileState.VERIFYING:
                raise DataRefused(f"dataset {dataset.name}: its file {dataset.stored_file.path} was replaced and the "
                                  "new bytes are still being verified; submit the job again once it is ready")
            inputs.append(DataInput(dataset.name, files=[_data_file("", dataset.stored_file)]))
            _pin(pins, dataset.name, dataset.stored_file)
        elif dataset.kind == DatasetKind.FOLDER:
            folder = _folder_files(dataset.project, dataset.prefix)
            files = list(folder[:MAX_FOLDER_FILES])
            if not files:
                raise DataRefused(f"dataset {dataset.name}: the folder {dataset.prefix}/ holds no file any more")
            cut = len(dataset.prefix) + 1
            in_packs = packs.places(dataset.project, folder)
            inputs.append(DataInput(dataset.name, files=[_data_file(f.path[cut:], f, in_packs.get(f.sha256))
                                                         for f in files]))
            for f in files:
                _pin(pins, dataset.name, f)
        else:
            if dataset.cluster_id != cluster.pk:
                raise DataRefused(f"dataset {dataset.name} is a path on another cluster")
            root = Allocation.objects.filter(project=dataset.project, cluster=cluster).values_list(
                "data_root", flat=True).first()
            if not root:
                raise DataRefused(f"dataset {dataset.name}: project {dataset.project.slug} has no storage root on "
                                  f"{cluster.name} any more")
            inputs.append(DataInput(dataset.name, cluster_path=dataset.cluster_path, root=root))
            if pins is not None:
                pins.append(PinnedFile(dataset=dataset.name, path="", cluster_path=dataset.cluster_path))
    return inputs


def _pin(pins: list[PinnedFile] | None, name: str, stored: StoredFile) -> None:
    if pins is not None:
        pins.append(PinnedFile(dataset=name, path=stored.path, storage_name=stored.storage_name, size=stored.size,
                               sha256=stored.sha256))


# Rows one staging may write: a sweep of many points given a large folder would otherwise write points × files.
# Past it each job keeps the first files in path order.
MAX_PIN_ROWS = 200_000


def pin(job_ids: Iterable[int], pins: list[PinnedFile]) -> None:
    """Record with each job what it was given (a retried staging replaces what an earlier attempt recorded)."""
    job_ids = list(job_ids)
    if not job_ids:
        return
    kept = pins[:max(1, MAX_PIN_ROWS // len(job_ids))]
    with transaction.atomic():
        PinnedFile.objects.filter(job_id__in=job_ids).delete()
        PinnedFile.objects.bulk_create([PinnedFile(job_id=job_id, dataset=p.dataset, path=p.path,
                                                   storage_name=p.storage_name, cluster_path=p.cluster_path,
                                                   size=p.size, sha256=p.sha256)
                                        for job_id in job_ids for p in kept], batch_size=2000)

