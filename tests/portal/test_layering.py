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


def _cluster_kind_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing a cluster's kind with something, or filtering clusters by a kind: `cluster.kind == ...`,
    `x.kind != "aws-batch"`, `filter(kind="slurm")`, `cluster__kind=...`. A registry lookup
    (`backend_class(cluster.kind)`) and a filter on kinds a capability gave (`kind__in=cloud_kinds()`) are not."""
    from backends import REGISTRY

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            cluster_kind = any(isinstance(s, ast.Attribute) and s.attr == "kind" and "cluster" in ast.unparse(s.value)
                               for s in sides)
            registry_kind = any(isinstance(s, ast.Constant) and s.value in REGISTRY for s in sides)
            named_kind = any(isinstance(s, ast.Attribute) and isinstance(s.value, ast.Name) and s.value.id == "Kind"
                             and s.attr.lower().replace("_", "-") in REGISTRY for s in sides)  # clusters.models.Kind.SLURM (a job's kind is Job.Kind)
            if cluster_kind or registry_kind or named_kind:
                lines.append(node.lineno)
        if isinstance(node, ast.keyword) and node.arg and node.arg.split("__")[-1] == "kind" and (
                "cluster" in node.arg or (isinstance(node.value, ast.Constant) and node.value.value in REGISTRY)):
            lines.append(node.lineno)
        if isinstance(node, ast.Name) and node.id == "CLOUD_KIND":
            lines.append(node.lineno)
    return lines


# What may still speak of kinds by name: the development scaffolding that creates clusters of each kind.
DEV = "portal.dev"


def test_the_portal_asks_a_backend_for_capabilities_never_a_clusters_kind():
    """A new backend is its module plus one registry line (docs/decisions/0052): the portal asks `reach`,
    `is_cloud`, the backend's own methods, never which kind a cluster is."""
    found = [f"{name}:{line}" for name, path in MODULES.items()
             if name.split(".")[0] in {"portal", "workers"} and not (name + ".").startswith(DEV + ".")
             for line in _cluster_kind_comparisons(ast.parse(path.read_text()))]
    assert found == []


def test_the_kind_finder_finds_what_it_forbids():
    tree = ast.parse("cluster.kind == 'x'\nCluster.objects.filter(kind='aws-batch')\nq(job__cluster__kind=k)\n"
                     "hw.cluster.kind != CLOUD_KIND\njob.kind == Job.Kind.NOTEBOOK\nbackend_class(cluster.kind)\n"
                     "Cluster.objects.filter(kind__in=cloud_kinds())\n")
    assert sorted(set(_cluster_kind_comparisons(tree))) == [1, 2, 3, 4]


def test_no_product_app_imports_the_development_scaffolding():
    """portal/dev (make run's launcher, demo data, the test cluster's registration) may import any app; no app
    imports it, so a deployment could leave it out (docs/deployment.md)."""
    found = [f"{name} -> {target}" for name, targets in GRAPH.items() if not (name + ".").startswith(DEV + ".")
             for target in targets if (target + ".").startswith(DEV + ".")]
    assert found == []


def test_only_backends_reached_through_a_shell_inherit_the_shell_skeleton():
    """AWS Batch (and a Kubernetes backend to come) implements the interface; it does not switch off half of the
    shell skeleton. Shell schedulers inherit it."""
    from backends import REGISTRY, backend_class
    from backends.base import Reach
    from backends.shell import ShellBackend

    for kind in REGISTRY:
        cls = backend_class(kind)
        assert issubclass(cls, ShellBackend) == (cls.reach in {Reach.LOGIN_NODE, Reach.LOCAL}), kind


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
