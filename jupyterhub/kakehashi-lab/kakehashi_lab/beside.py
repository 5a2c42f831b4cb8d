"""The files beside a notebook that a job can take with it (a utils.py it imports, a small CSV it reads): listed for
the dialog, read through the contents manager when the researcher submits, and sent inside the notebook's metadata
(metadata.kakehashi.files, base64), which the portal writes next to the notebook in the job's directory.

Bounded, and the dialog says so: at most MAX_FILES files and MAX_BYTES bytes, from the notebook's own folder and
the folders under it (not hidden ones, not checkpoints, not other notebooks' executed copies)."""

from __future__ import annotations

import base64
import os
from posixpath import dirname, join, normpath

from jupyter_core.utils import ensure_async

MAX_FILES = int(os.environ.get("KAKEHASHI_LAB_MAX_FILES", "50"))
MAX_BYTES = int(os.environ.get("KAKEHASHI_LAB_MAX_BYTES", str(8 * 1024 * 1024)))
MAX_LISTED = 200  # entries shown in the dialog; a folder with more is not one to send whole
MAX_DEPTH = 4


class BesideError(ValueError):
    pass


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__" or ".kakehashi-" in name


async def listing(contents_manager, notebook_path: str) -> tuple[list[dict], bool]:
    """(the files beside the notebook, each {path, size} relative to its folder; whether the list was cut)."""
    folder = dirname(notebook_path)
    found: list[dict] = []
    pending = [(folder, 0)]
    while pending:
        current, depth = pending.pop(0)
        model = await ensure_async(contents_manager.get(current, content=True, type="directory"))
        for item in sorted(model.get("content") or [], key=lambda i: (i["type"] == "directory", i["name"])):
            if _skipped(item["name"]) or item["path"] == notebook_path:
                continue
            if item["type"] == "directory":
                if depth + 1 < MAX_DEPTH:
                    pending.append((item["path"], depth + 1))
                continue
            relative = item["path"][len(folder) + 1:] if folder else item["path"]
            found.append({"path": relative, "size": int(item.get("size") or 0)})
            if len(found) >= MAX_LISTED:
                return found, True
    return found, False


async def read(contents_manager, notebook_path: str, paths: object) -> dict[str, str]:
    """The chosen files (paths relative to the notebook's folder) as base64, within the bounds; BesideError says
    which bound or which path is wrong."""
    if not paths:
        return {}
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise BesideError("files must be a list of paths beside the notebook")
    if len(paths) > MAX_FILES:
        raise BesideError(f"{len(paths)} files were chosen: at most {MAX_FILES} may travel with a notebook; choose fewer, "
                          "or name a dataset for larger data")
    folder = dirname(notebook_path)
    files, total = {}, 0
    for relative in paths:
        clean = normpath(relative)
        if clean.startswith(("/", "..")) or clean in {".", ""} or "\\" in clean:
            raise BesideError(f"{relative!r} is not a file beside the notebook")
        model = await ensure_async(contents_manager.get(join(folder, clean) if folder else clean, content=True,
                                                        type="file", format="base64"))
        raw = base64.b64decode(model["content"] or "")  # the contents manager's base64 has line breaks
        total += len(raw)
        if total > MAX_BYTES:
            raise BesideError(f"the chosen files hold more than {_size(MAX_BYTES)}: at most that may travel with a "
                              "notebook; choose fewer, or upload larger data and name it as a dataset")
        files[clean] = base64.b64encode(raw).decode()
    return files


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
