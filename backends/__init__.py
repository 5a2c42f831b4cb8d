"""Job backends: one adapter per scheduler behind `backends.base.Backend`. No Django imports here."""

from __future__ import annotations

from importlib import import_module

from backends.base import Backend

# kind -> "module:Class". Imported lazily so a deployment without one scheduler's extras still starts.
REGISTRY: dict[str, str] = {
    "local": "backends.local:LocalBackend",
    "slurm": "backends.slurm:SlurmBackend",
    "pbs": "backends.pbs:PBSBackend",
    "sge": "backends.sge:SGEBackend",
}


def backend_class(kind: str) -> type[Backend]:
    try:
        module_name, _, class_name = REGISTRY[kind].partition(":")
    except KeyError:
        raise ValueError(f"unknown backend kind {kind!r}; known: {', '.join(sorted(REGISTRY))}") from None
    return getattr(import_module(module_name), class_name)
