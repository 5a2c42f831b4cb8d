"""Reading a notebook's parameters cell and turning what the user typed into papermill parameters (pure functions)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

PARAMETERS_TAG = "parameters"  # papermill's tag for the cell whose assignments may be overridden
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


class ParameterError(ValueError):
    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class Parameter:
    name: str
    default: str  # as written in the cell, e.g. 0.1 or 'adam'
    is_text: bool  # the default is a string: a value typed without quotes is taken as text


def parameters_cell(notebook: dict) -> dict | None:
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code" and PARAMETERS_TAG in (cell.get("metadata", {}).get("tags") or []):
            return cell
    return None


def parameters_of(notebook: dict) -> list[Parameter]:
    """The names assigned at the top level of the cell tagged `parameters`, with their values as written."""
    cell = parameters_cell(notebook)
    if cell is None:
        return []
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: dict[str, Parameter] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        text = ast.get_source_segment(source, value) or ""
        is_text = isinstance(value, ast.Constant) and isinstance(value.value, str)
        found[target.id] = Parameter(target.id, text, is_text)
    return list(found.values())


def parse_parameters(typed: Any, notebook: dict) -> dict[str, Any]:
    """{name: text typed in the dialog} → {name: value} for papermill, for the parameters that differ from the cell.

    A value is a Python literal (0.1, 'adam', True, [1, 2]); for a parameter whose default is a string, text typed
    without quotes is taken as that text. Names the cell does not assign are refused.
    """
    if not isinstance(typed, dict):
        raise ParameterError("parameters must be an object of name → value", "parameters")
    known = {p.name: p for p in parameters_of(notebook)}
    values: dict[str, Any] = {}
    for name, text in typed.items():
        parameter = known.get(name)
        if parameter is None:
            raise ParameterError(f"the notebook's parameters cell does not set {name!r}", name)
        text = str(text).strip()
        if text == parameter.default:
            continue
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            if not parameter.is_text:
                raise ParameterError(
                    f"{name}: {text!r} is not a Python value (write e.g. 0.01, 'text', True or [1, 2])", name) from None
            value = text
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ParameterError(f"{name}: {text!r} cannot be passed to papermill (use numbers, text, "
                                 "True/False, None, lists or dicts)", name) from None
        values[name] = value
    return values


def job_name_for(path: str) -> str:
    """A job name the portal accepts (a letter first, then letters, digits, '.', '_', '-'; 63 at most)."""
    stem = _NAME_CHARS.sub("-", PurePosixPath(path).stem).strip("-.")
    if not stem[:1].isalpha():
        stem = f"notebook-{stem}".rstrip("-")
    return stem[:63].rstrip("-.")


def executed_path(path: str, job_id: int) -> str:
    """Where the executed notebook is saved: next to the original, e.g. analysis.kakehashi-42.ipynb."""
    original = PurePosixPath(path)
    return str(original.with_name(f"{original.stem}.kakehashi-{job_id}.ipynb"))
