"""Notebooks as jobs: what a notebook asks for (its kernel, the values of its `parameters` cell), whether the
chosen software can run it, and the executed notebook as HTML that cannot act in the portal's origin.

Plain functions on the notebook's JSON: the form, the API and the job page share them. Nothing here runs a
notebook; papermill does that on the cluster, inside the chosen software (docs/decisions/0020).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# The kernel a notebook without a kernelspec runs with, and what software (or none) provides unless told.
DEFAULT_KERNEL = "python3"
PARAMETERS_TAG = "parameters"
# Where papermill writes the executed notebook, relative to the job's outputs/ (its artifact path).
EXECUTED_NOTEBOOK = "notebook.ipynb"
# The executed notebook's own page: a sandbox (opaque origin, no script, no forms, no popups), styles inline as
# nbconvert writes them, images only inline; only the portal's own pages may frame it.
SANDBOX_POLICY = ("sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
                  "frame-ancestors 'self'; form-action 'none'; base-uri 'none'")
# An @font-face of the classic template's style sheet: its icon fonts are files at ../components/…, which the
# portal does not serve and the policy above refuses (font-src data:), so each view reported violations.
_FONT_FACE = re.compile(r"@font-face\s*\{[^{}]*\}")


# Files sent beside a notebook (a utils.py it imports, a small CSV it reads): base64 under the notebook's metadata,
# {"kakehashi": {"files": {"utils.py": "<base64>", "data/labels.csv": "..."}}}. They travel with the job, bounded by
# the notebook's size limit, and land next to notebook.ipynb in the job's directory (papermill's working directory);
# the notebook written there, and the executed one, no longer carry them.
FILES_KEY = "kakehashi"
MAX_SIDE_FILES = 100
_SIDE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_RESERVED = {"notebook.ipynb", "parameters.json", "payload.sh", "job.sh", "run.sh", "outputs", "scheduler-id"}


def side_files(notebook: Any) -> dict[str, bytes]:
    """The files sent beside the notebook, decoded, or NotebookError saying which one cannot be."""
    import base64
    import binascii

    meta = notebook.get("metadata") if isinstance(notebook, dict) else None
    carried = meta.get(FILES_KEY) if isinstance(meta, dict) else None
    files = carried.get("files") if isinstance(carried, dict) else None
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise NotebookError("metadata.kakehashi.files must map each file's path beside the notebook to its base64")
    if len(files) > MAX_SIDE_FILES:
        raise NotebookError(f"{len(files)} files were sent beside the notebook: at most {MAX_SIDE_FILES} may be")
    decoded = {}
    for path, content in files.items():
        parts = path.split("/") if isinstance(path, str) else []
        if not parts or len(parts) > 8 or not all(_SIDE_PART.fullmatch(p) and p not in {".", ".."} for p in parts):
            raise NotebookError(f"{str(path)[:80]!r} cannot be sent beside the notebook: use a relative path of "
                                "letters, digits, '.', '_' and '-' (folders with '/')")
        if parts[0] in _RESERVED:
            raise NotebookError(f"{path} cannot be sent beside the notebook: the job's directory has its own {parts[0]}")
        try:
            decoded[path] = base64.b64decode(content if isinstance(content, str) else "", validate=True)
        except (binascii.Error, ValueError):
            raise NotebookError(f"{path}: its content is not base64") from None
    return decoded


def without_side_files(notebook: dict[str, Any]) -> dict[str, Any]:
    """The notebook as papermill is given it: without the files sent beside it."""
    meta = notebook.get("metadata") or {}
    if FILES_KEY not in meta:
        return notebook
    carried = {k: v for k, v in meta[FILES_KEY].items() if k != "files"} if isinstance(meta[FILES_KEY], dict) else {}
    rest = {k: v for k, v in meta.items() if k != FILES_KEY}
    return {**notebook, "metadata": {**rest, **({FILES_KEY: carried} if carried else {})}}


class NotebookError(ValueError):
    """A notebook (or its parameters) that cannot run as asked; the message says what to change."""

    def __init__(self, message: str, *, field: str = "notebook") -> None:
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class Parameter:
    name: str
    default: str  # the source text of its value in the parameters cell
    type_name: str = ""
    help: str = ""


def loads(raw: bytes | str) -> dict[str, Any]:
    """A notebook from the bytes of an .ipynb file: JSON that is a notebook, or a NotebookError saying which."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotebookError(f"this file is not JSON, so not a Jupyter notebook (.ipynb): {exc}") from None
    validate(data)
    return data


def validate(notebook: Any) -> None:
    """nbformat's own validation: anything else is refused with nbformat's first complaint."""
    import nbformat

    if not isinstance(notebook, dict):
        raise NotebookError("the notebook must be a Jupyter notebook (a JSON object), not " + type(notebook).__name__)
    try:
        nbformat.validate(nbformat.from_dict(notebook))
    except Exception as exc:  # noqa: BLE001 - nbformat raises several kinds; all mean "not a notebook"
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise NotebookError(f"this is not a valid Jupyter notebook: {first}") from None


def too_large(max_bytes: int) -> str:
    size = f"{max_bytes / 2**20:g} MiB" if max_bytes >= 2**20 else f"{max_bytes / 1024:g} KiB"
    return f"the notebook is larger than {size}; clear its outputs first"


def kernel_of(notebook: dict[str, Any]) -> str:
    spec = (notebook.get("metadata") or {}).get("kernelspec") or {}
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else DEFAULT_KERNEL


def _language(notebook: dict[str, Any]) -> str:
    metadata = notebook.get("metadata") or {}
    info = metadata.get("language_info") or {}
    spec = metadata.get("kernelspec") or {}
    return str(info.get("name") or spec.get("language") or "python")


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def parameters_cell(notebook: dict[str, Any]) -> dict[str, Any] | None:
    for cell in notebook.get("cells") or []:
        if PARAMETERS_TAG in ((cell.get("metadata") or {}).get("tags") or []):
            return cell
    return None


def parameters_of(notebook: dict[str, Any]) -> list[Parameter] | None:
    """The names and default values in the cell tagged `parameters` (None: there is no such cell).

    papermill's own translator reads the cell, so the names are the ones papermill will override."""
    from papermill.translators import papermill_translators

    cell = parameters_cell(notebook)
    if cell is None:
        return None
    try:
        translator = papermill_translators.find_translator(kernel_of(notebook), _language(notebook))
        found = translator.inspect(_Cell(_source(cell)))
    except Exception:  # noqa: BLE001 - a language papermill cannot inspect: its names are not known
        return []
    return [Parameter(p.name, p.default, "" if p.inferred_type_name == "None" else p.inferred_type_name, p.help)
            for p in found]


# A top-level assignment in the parameters cell of a language papermill cannot inspect (R, Julia, Scala, MATLAB,
# bash, PowerShell…): `lr = 0.1`, `lr <- 0.1`, `val lr = 0.1`, `$lr = 0.1`, `lr=0.1`. Only the names are read.
_ASSIGNMENT = re.compile(r"^(?:(?:val|var|let|const|local|global|export)\s+)?\$?([A-Za-z_]\w*)\s*(?::[^=]*)?(?:<-|:?=(?!=))")


def parameter_names(notebook: dict[str, Any]) -> set[str] | None:
    """The names a notebook's parameters cell sets (None: there is no such cell), read by papermill's translator
    where it can inspect the cell's language (Python), else by the assignments at the start of its lines."""
    cell = parameters_cell(notebook)
    if cell is None:
        return None
    from papermill.translators import papermill_translators

    try:
        translator = papermill_translators.find_translator(kernel_of(notebook), _language(notebook))
        return {p.name for p in translator.inspect(_Cell(_source(cell)))}
    except Exception:  # noqa: BLE001 - a language papermill cannot inspect: read its assignments
        return {m.group(1) for line in _source(cell).splitlines() if (m := _ASSIGNMENT.match(line))}


def parameters_source(notebook: dict[str, Any]) -> str:
    cell = parameters_cell(notebook)
    return _source(cell) if cell is not None else ""


@dataclass(frozen=True)
class ParameterInput:
    """A parameter as the job form offers it: its value is what was typed, else what the job it was cloned from
    ran with, else the notebook's own."""

    name: str
    value: str
    default: str
    help: str


def parameter_inputs(notebook: dict[str, Any], typed: dict[str, str], ran_with: dict[str, Any]) -> list[ParameterInput]:
    return [ParameterInput(p.name, typed.get(p.name, repr(ran_with[p.name]) if p.name in ran_with else p.default),
                           p.default, p.help)
            for p in parameters_of(notebook) or []]


class _Cell(dict):
    # papermill's translators read `cell.source`.
    def __init__(self, source: str) -> None:
        super().__init__(source=source)
        self.source = source


def check(notebook: Any, parameters: Any, kernels: list[str], *, software: str, max_bytes: int) -> str:
    """Everything a notebook job must satisfy before it is queued; returns the kernel papermill runs it with."""
    validate(notebook)
    if len(json.dumps(notebook).encode()) > max_bytes:
        raise NotebookError(too_large(max_bytes))
    if not isinstance(parameters, dict) or not all(isinstance(k, str) and k.isidentifier() for k in parameters):
        raise NotebookError("parameters must be an object whose keys are Python identifiers", field="parameters")
    kernel = kernel_of(notebook)
    if kernel not in kernels:
        raise NotebookError(
            f"the notebook's kernel {kernel!r} is not provided by {software} (it provides: {', '.join(kernels) or 'none'}); "
            "choose other software or change the notebook's kernel", field="software")
    if parameters:
        names = parameter_names(notebook)
        if names is None:
            raise NotebookError(
                "parameters were given but the notebook has no cell tagged 'parameters': tag the cell that sets "
                "them (Lab: Property Inspector → Cell Tags → parameters)", field="parameters")
        if unknown := sorted(set(parameters) - names):
            sets = (f"sets {', '.join(sorted(names))}" if names else
                    "sets no names (write one assignment a line in it, e.g. lr = 0.1)")
            raise NotebookError(
                f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: the notebook's parameters "
                f"cell {sets}", field="parameters")
    return kernel


def to_html(executed: bytes) -> str:
    """The executed notebook as a standalone HTML page (nbconvert). It is served only from `notebook_page`'s
    sandboxed response, never inside the portal's pages: a notebook's output may hold any HTML or script."""
    import nbformat
    from nbconvert import HTMLExporter

    try:
        nb = nbformat.reads(executed.decode("utf-8", "replace"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - the job wrote something papermill did not: say so, do not fail the page
        return not_shown(f"outputs/notebook.ipynb is not a notebook nbconvert can read ({type(exc).__name__}): download it from the job page.")
    exporter = HTMLExporter(template_name="classic")
    # No scripts at all (MathJax, widgets, require.js come from CDNs): the sandbox would refuse them anyway.
    exporter.exclude_input_prompt = False
    body, _ = exporter.from_notebook_node(nb)
    return _FONT_FACE.sub(_inline_font_only, body)


def _inline_font_only(face: re.Match) -> str:
    """An @font-face kept only when its fonts are inline (data:); no output uses the template's icon fonts."""
    sources = re.findall(r"url\(\s*['\"]?([^'\")]*)", face.group(0))
    return face.group(0) if all(source.startswith("data:") for source in sources) else ""


def not_shown(message: str) -> str:
    from django.utils.html import escape

    return f"<!DOCTYPE html><html lang=\"en\"><meta charset=\"utf-8\"><title>Executed notebook</title><p>{escape(message)}</p></html>\n"
