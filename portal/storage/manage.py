"""Managing a project's files and datasets: delete, rename or move files and folders, make folders, delete or
rename datasets. The Data page, the API and the CLI call these; each checks the role (those who may upload may
manage: members and above), writes its audit row in the same transaction as the change, and deletes bytes only
after that commits.

What may not change, and why it is refused rather than done:
- a file that a dataset *is* (a file dataset) cannot be deleted: delete or re-point the dataset first;
- a folder that a folder dataset reads cannot be deleted (the dataset would hold nothing);
- files a queued or running job was given (its datasets, or what it pinned at staging) cannot be deleted: the
  job may still read them (a cloud job pulls them when its container starts);
- a dataset a queued or running job uses cannot be deleted or renamed: the job finds it by its name.
A rename or a move changes the path only: the bytes stay under their key, so a job reading them is not affected,
and a file dataset follows its file; a folder dataset follows a moved folder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from portal.audit.actions import record
from portal.enqueue import PACK_FILES, enqueue_on_commit
from portal.job_states import ACTIVE_STATES, JobState
from portal.projects import access
from portal.projects.models import Project
from portal.storage.actions import check_no_file_folder_clash, clean_path
from portal.storage.datasets import clean_name
from portal.storage.errors import FileExists, FileMissing, StorageError, UploadConflict
from portal.storage.models import Dataset, DatasetKind, FileState, Folder, Pack, PinnedFile, StoredFile

log = logging.getLogger(__name__)

MAX_LISTED = 5  # jobs or datasets named in a refusal


class InUse(UploadConflict):
    def __init__(self, message: str, *, field: str | None = "path") -> None:
        super().__init__(message, code="in_use", field=field)


def _under(prefix: str) -> Q:
    return Q(path__startswith=prefix + "/")


def _jobs_text(jobs: list[tuple[int, str]]) -> str:
    shown = ", ".join(f"job {pk} ({JobState(state).label.lower()})" for pk, state in jobs[:MAX_LISTED])
    return shown + (f" and {len(jobs) - MAX_LISTED} more" if len(jobs) > MAX_LISTED else "")


def active_jobs_using(datasets: Iterable[Dataset]) -> list[tuple[int, str]]:
    """(job number, state) of the jobs in flight given any of `datasets`, through storage's side of the relation
    (storage sits under the jobs app and does not import it)."""
    ids = [d.pk for d in datasets]
    if not ids:
        return []
    rows = (Dataset.objects.filter(pk__in=ids, jobs__state__in=ACTIVE_STATES)
            .values_list("jobs__pk", "jobs__state").distinct().order_by("jobs__pk"))
    return list(rows[:MAX_LISTED + 1])


def _datasets_holding(project: Project, files: QuerySet[StoredFile]) -> list[Dataset]:
    """The project's object-store datasets that read any of `files`: a file dataset of one, a folder dataset
    whose folder holds one."""
    paths = list(files.values_list("path", flat=True)[:100_001])
    ids = [pk for pk in files.values_list("pk", flat=True)[:100_001]]
    found = list(Dataset.objects.filter(project=project, kind=DatasetKind.FILE, stored_file__in=ids))
    for dataset in Dataset.objects.filter(project=project, kind=DatasetKind.FOLDER):
        start = dataset.prefix + "/"
        if any(p.startswith(start) for p in paths):
            found.append(dataset)
    return found


def _refuse_if_in_use(project: Project, files: QuerySet[StoredFile], what: str) -> None:
    holding = _datasets_holding(project, files)
    jobs = active_jobs_using(holding)
    names = list(files.values_list("storage_name", flat=True)[:100_001])
    pinned = (PinnedFile.objects.filter(storage_name__in=names, job__state__in=ACTIVE_STATES)
              .values_list("job_id", "job__state").distinct().order_by("job_id"))
    jobs = sorted({*jobs, *pinned[:MAX_LISTED + 1]})
    if jobs:
        raise InUse(f"{what} is in use by {_jobs_text(jobs)}, which may still read it: delete it once "
                    f"{'that job has' if len(jobs) == 1 else 'those jobs have'} ended, or cancel "
                    f"{'it' if len(jobs) == 1 else 'them'}")


def _clean_folder(raw: object) -> str:
    return clean_path(str(raw or "").rstrip("/"))


def delete_file(user, project: Project, path: object) -> StoredFile:
    """Delete one file (its bytes go once the deletion is recorded)."""
    access.require(user, project, "submit")
    clean = clean_path(str(path or ""))
    files = StoredFile.objects.filter(project=project, path=clean)
    stored = files.first()
    if stored is None:
        raise FileMissing(f"project {project.slug} has no file {clean}", field="path")
    datasets = list(Dataset.objects.filter(stored_file=stored).values_list("name", flat=True))
    if datasets:
        raise InUse(f"{clean} is dataset {', '.join(datasets)}: delete the dataset first (or name another file as it)")
    _refuse_if_in_use(project, files, clean)
    with transaction.atomic():
        record("file.delete", actor=user, project=project, target=stored, path=clean, size=stored.size,
               sha256=stored.sha256)
        StoredFile.objects.filter(pk=stored.pk).delete()
        transaction.on_commit(lambda: _delete_bytes([stored.storage_name]))
        _drop_packed_copies(project)
    return stored


def delete_folder(user, project: Project, path: object) -> tuple[int, int]:
    """Delete a folder and every file under it. Returns (files, bytes) deleted."""
    access.require(user, project, "submit")
    clean = _clean_folder(path)
    files = StoredFile.objects.filter(project=project).filter(_under(clean))
    folders = Folder.objects.filter(project=project).filter(Q(path=clean) | _under(clean))
    if not files.exists() and not folders.exists():
        raise FileMissing(f"project {project.slug} has no folder {clean}/", field="path")
    reading = [d.name for d in Dataset.objects.filter(project=project, kind=DatasetKind.FOLDER).filter(
        Q(prefix=clean) | Q(prefix__startswith=clean + "/"))]
    reading += [d.name for d in Dataset.objects.filter(project=project, kind=DatasetKind.FILE,
                                                       stored_file__in=files)]
    if reading:
        raise InUse(f"{clean}/ holds dataset {', '.join(sorted(reading)[:MAX_LISTED])}: delete "
                    f"{'it' if len(reading) == 1 else 'them'} first")
    _refuse_if_in_use(project, files, f"{clean}/")
    if files.filter(state=FileState.VERIFYING).exists():
        raise UploadConflict(f"a file under {clean}/ is being verified: delete the folder once it is ready",
                             code="verifying", field="path")
    with transaction.atomic():
        gone = list(files.select_for_update().values_list("storage_name", "size"))
        StoredFile.objects.filter(project=project).filter(_under(clean)).delete()
        folders.delete()
        total = sum(size for _, size in gone)
        record("folder.delete", actor=user, project=project, path=clean, files=len(gone), size=total)
        transaction.on_commit(lambda: _delete_bytes([name for name, _ in gone]))
        _drop_packed_copies(project)
    return len(gone), total


def make_folder(user, project: Project, path: object) -> Folder:
    access.require(user, project, "submit")
    clean = _clean_folder(path)
    check_no_file_folder_clash(project, clean)
    if StoredFile.objects.filter(project=project, path=clean).exists():
        raise FileExists(f"{clean} is a file", field="path")
    if Folder.objects.filter(project=project, path=clean).exists() or \
            StoredFile.objects.filter(project=project).filter(_under(clean)).exists():
        raise FileExists(f"project {project.slug} already has a folder {clean}/", field="path")
    try:
        with transaction.atomic():
            folder = Folder.objects.create(project=project, path=clean, created_by=user)
            record("folder.create", actor=user, project=project, target=folder, path=clean)
    except IntegrityError:
        raise FileExists(f"project {project.slug} already has a folder {clean}/", field="path") from None
    return folder


def move(user, project: Project, source: object, destination: object) -> tuple[str, int]:
    """Rename or move a file or a folder (with everything under it) to `destination`, which must not exist.
    A destination ending in "/" is an existing folder to move it into, keeping its name. Returns (the new path,
    files moved)."""
    access.require(user, project, "submit")
    src = clean_path(str(source or "").rstrip("/"))
    raw = str(destination or "")
    into = raw.endswith("/")
    dest = clean_path(raw.rstrip("/") + ("/" + src.rsplit("/", 1)[-1] if into else ""))
    if dest == src:
        raise StorageError(f"{src} is already there", field="destination")
    is_file = StoredFile.objects.filter(project=project, path=src).exists()
    in_folder = StoredFile.objects.filter(project=project).filter(_under(src))
    folder_rows = Folder.objects.filter(project=project).filter(Q(path=src) | _under(src))
    if not is_file and not in_folder.exists() and not folder_rows.exists():
        raise FileMissing(f"project {project.slug} has no file or folder {src}", field="source")
    if not is_file and (dest + "/").startswith(src + "/"):
        raise StorageError(f"{src}/ cannot be moved into itself", field="destination")
    if StoredFile.objects.filter(project=project, path=dest).exists() or \
            StoredFile.objects.filter(project=project).filter(_under(dest)).exists() or \
            Folder.objects.filter(project=project, path=dest).exists():
        raise FileExists(f"{dest} already exists in project {project.slug}: choose another name, or delete it first",
                         field="destination")
    check_no_file_folder_clash(project, dest)
    if (is_file and StoredFile.objects.filter(project=project, path=src, state=FileState.VERIFYING).exists()) or \
            in_folder.filter(state=FileState.VERIFYING).exists():
        raise UploadConflict(f"{src} is being verified: move it once it is ready", code="verifying", field="source")
    with transaction.atomic():
        target = None
        if is_file:
            target = StoredFile.objects.select_for_update().get(project=project, path=src)
            target.path = dest
            target.save(update_fields=["path", "updated_at"])
            moved = 1
        else:
            moved = 0
            for stored in StoredFile.objects.select_for_update().filter(project=project).filter(_under(src)):
                stored.path = dest + stored.path[len(src):]
                stored.save(update_fields=["path", "updated_at"])
                moved += 1
            for folder in folder_rows:
                folder.path = dest + folder.path[len(src):]
                folder.save(update_fields=["path"])
            # Folder datasets that read this folder, or a folder inside it, read it where it now is.
            for dataset in Dataset.objects.filter(project=project, kind=DatasetKind.FOLDER).filter(
                    Q(prefix=src) | Q(prefix__startswith=src + "/")):
                dataset.prefix = dest + dataset.prefix[len(src):]
                dataset.save(update_fields=["prefix"])
        record("file.move" if is_file else "folder.move", actor=user, project=project, target=target, source=src,
               destination=dest, files=moved)
    return dest, moved


def delete_dataset(user, project: Project, name: str) -> Dataset:
    """Delete a dataset (its files stay). Refused while a queued or running job uses it, naming those jobs."""
    access.require(user, project, "submit")
    dataset = _dataset(project, name)
    if dataset.kind == DatasetKind.CLUSTER_PATH:
        access.require(user, project, "manage")  # registered by admins, withdrawn by them
    jobs = active_jobs_using([dataset])
    if jobs:
        raise InUse(f"dataset {dataset.name} is used by {_jobs_text(jobs)}: delete it once "
                    f"{'that job has' if len(jobs) == 1 else 'those jobs have'} ended, or cancel "
                    f"{'it' if len(jobs) == 1 else 'them'}", field="name")
    with transaction.atomic():
        record("dataset.delete", actor=user, project=project, target=dataset, name=dataset.name, kind=dataset.kind,
               source=dataset.source)
        dataset.jobs.clear()  # ended jobs keep what they were given in their pinned files
        dataset.delete()
    return dataset


def rename_dataset(user, project: Project, name: str, new_name: object) -> Dataset:
    access.require(user, project, "submit")
    dataset = _dataset(project, name)
    new = clean_name(new_name)
    if new == dataset.name:
        return dataset
    jobs = active_jobs_using([dataset])
    if jobs:
        raise InUse(f"dataset {dataset.name} is used by {_jobs_text(jobs)}, which find it at $KAKEHASHI_DATA/"
                    f"{dataset.name}: rename it once {'that job has' if len(jobs) == 1 else 'those jobs have'} ended",
                    field="name")
    old = dataset.name
    try:
        with transaction.atomic():
            dataset.name = new
            dataset.save(update_fields=["name"])
            record("dataset.rename", actor=user, project=project, target=dataset, name=new, previous=old)
    except IntegrityError:
        dataset.name = old
        raise FileExists(f"project {project.slug} already has a dataset named {new}", field="name") from None
    return dataset


def _dataset(project: Project, name: str) -> Dataset:
    dataset = Dataset.objects.filter(project=project, name=name).select_related("stored_file", "cluster").first()
    if dataset is None:
        raise FileMissing(f"project {project.slug} has no dataset named {str(name)[:100]!r}", field="name")
    return dataset


def folders_of(project_files: Iterable[tuple[str, str]], folder_rows: QuerySet[Folder]) -> list[tuple[str, str]]:
    """(project slug, folder path) of every folder the given (slug, path) files lie in, and the folders made on
    purpose."""
    seen: set[tuple[str, str]] = set()
    for slug, path in project_files:
        parts = path.split("/")[:-1]
        for n in range(1, len(parts) + 1):
            seen.add((slug, "/".join(parts[:n])))
    seen.update(folder_rows.values_list("project__slug", "path"))
    return sorted(seen)


def _drop_packed_copies(project: Project) -> None:
    """Deleted content leaves the project's packs too (the worker drops those holding it, and packs the rest
    again: portal/storage/packs.py)."""
    if Pack.objects.filter(project=project).exists():
        enqueue_on_commit(PACK_FILES, project.pk)


def _delete_bytes(names: list[str]) -> None:
    """After the rows are gone: each object at most once; one left behind is harmless (never listed again)."""
    still_used = set(StoredFile.objects.filter(storage_name__in=names).values_list("storage_name", flat=True))
    for name in names:
        if name in still_used:
            continue
        try:
            default_storage.delete(name)
        except Exception:  # noqa: BLE001 - the rows are gone; an orphaned object costs space, not correctness
            log.warning("could not delete %s from storage", name, exc_info=True)

