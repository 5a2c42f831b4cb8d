"""What a job was given: the files pinned when its data was staged (PinnedFile), as its page shows them."""

from __future__ import annotations

from portal.storage.models import PinnedFile, StoredFile

SHOWN = 20


def pinned_data(job) -> dict:
    """The first files a job was given, each with what has happened to it since (replaced, moved, deleted)."""
    pins = list(PinnedFile.objects.filter(job=job).order_by("dataset", "path")[:SHOWN + 1])
    if not pins:
        return {"pinned": [], "pinned_more": 0}
    total = PinnedFile.objects.filter(job=job).count() if len(pins) > SHOWN else len(pins)
    pins = pins[:SHOWN]
    now = {name: (path, sha) for name, path, sha in StoredFile.objects.filter(
        project_id=job.project_id, storage_name__in=[p.storage_name for p in pins if p.storage_name]).values_list(
        "storage_name", "path", "sha256")}
    same_path = {path: sha for path, sha in StoredFile.objects.filter(
        project_id=job.project_id, path__in=[p.path for p in pins if p.path]).values_list("path", "sha256")}
    for pin in pins:
        pin.changed = ""
        if pin.cluster_path:
            continue
        if pin.storage_name in now and now[pin.storage_name][1] == pin.sha256:
            path = now[pin.storage_name][0]
            if path != pin.path:
                pin.changed = f"now at {path}"
        elif same_path.get(pin.path, pin.sha256) != pin.sha256:
            pin.changed = "replaced since"
        elif pin.path not in same_path:
            pin.changed = "deleted since"
    return {"pinned": pins, "pinned_more": total - len(pins)}
