"""The layering holds: no import circle between modules or apps, backends stay plain Python, actions never
import tasks, every task an action enqueues by name exists, and every module over 400 lines says why it is one.
Read from the source with `ast` (imports inside functions count too), so it is fast and needs no database."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from portal.enqueue import TASKS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("portal", "backends", "workers")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


MODULES = _modules()


def _imported(name: str, path: Path) -> set[str]:
    """The project modules `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # `from a.b import c`: c is a module or a name in a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imported(name, path) for name, path in MODULES.items()}


def _app(module: str) -> str:
    """portal.jobs.actions.submit -> portal.jobs; a top-level module of a package is its own node."""
    parts = module.split(".")
    if parts[0] == "portal" and len(parts) > 1 and (ROOT / "portal" / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module if parts[0] == "portal" else parts[0]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(set(graph) | {n for targets in graph.values() for n in targets}):
        if node not in index:
            visit(node)
    return circles


def test_no_module_imports_itself_back_through_other_modules():
    assert _circles(GRAPH) == []


def test_no_app_depends_on_itself_through_other_apps():
    apps: dict[str, set[str]] = defaultdict(set)
    for module, targets in GRAPH.items():
        for target in targets:
            if _app(module) != _app(target):
                apps[_app(module)].add(_app(target))
    circles = _circles(apps)
    witnesses = [
        f"{module} -> {target}"
        for circle in circles
        for module, targets in GRAPH.items()
        for target in targets
        if _app(module) in circle and _app(target) in circle and _app(module) != _app(target)
    ]
    assert circles == [], "\n".join(witnesses)


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_backends_are_plain_python_without_django_or_the_portal():
    for name, path in MODULES.items():
        if name.split(".")[0] != "backends":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(m.split(".")[0] in {"django", "portal", "workers"} for m in modules), name


WORKER_SIDE_OF_ACTIONS = {"portal.jobs.transitions", "portal.jobs.tracking", "portal.jobs.outputs"}


def test_actions_never_import_tasks_or_the_celery_app():
    for name, targets in GRAPH.items():
        if ".actions" in name or name in WORKER_SIDE_OF_ACTIONS:
            assert not [t for t in targets if t.endswith(".tasks") or t.split(".")[0] == "workers"], name


@pytest.mark.parametrize("task", TASKS)
def test_every_task_enqueued_by_name_is_a_registered_task(task):
    from workers.celery import app

    app.loader.import_default_modules()  # what a worker does at start
    assert task in app.tasks


def test_the_portal_reaches_clusters_only_through_the_backend_interface():
    """No transport, no shell command in portal/: what reaches a cluster is in backends/ (docs/decisions/0008)."""
    for name, path in MODULES.items():
        if name.split(".")[0] != "portal":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "backends.transport", name
            if isinstance(node, ast.Attribute):
                assert node.attr not in {"transport", "run_shell"}, f"{name}:{node.lineno}"


LONG_MODULE = 400  # lines
REASON = "Why one module:"


def test_every_module_over_400_lines_says_at_its_top_why_it_is_one_module():
    """A long module is either split or says why not: a line of its docstring begins "Why one module:"."""
    unexplained = []
    for path in MODULES.values():
        text = path.read_text()
        if len(text.splitlines()) <= LONG_MODULE:
            continue
        docstring = ast.get_docstring(ast.parse(text, str(path))) or ""
        if not any(line.startswith(REASON) for line in docstring.splitlines()):
            unexplained.append(f"{path.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    assert unexplained == [], "split these or say why not at the top:\n" + "\n".join(unexplained)
