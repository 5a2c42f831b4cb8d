"""Job backends: one adapter per scheduler behind `backends.base.Backend`. No Django imports here."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from backends.base import Backend


@dataclass(frozen=True)
class Registered:
    path: str  # "module:Class", imported when first used
    label: str  # what a site admin chooses a cluster's kind by


# kind -> backend. Imported lazily so a deployment without one backend's extras (boto3, say) still starts.
# A cluster can only be of a kind listed here: a new backend is its module plus one line here.
REGISTRY: dict[str, Registered] = {
    "local": Registered("backends.local:LocalBackend", "Local (this host, no scheduler)"),
    "slurm": Registered("backends.slurm:SlurmBackend", "Slurm"),
    "pbs": Registered("backends.pbs:PBSBackend", "PBS (PBS Pro/OpenPBS or Torque)"),
    "sge": Registered("backends.sge:SGEBackend", "Grid Engine"),
    "aws-batch": Registered("backends.aws_batch:AWSBatchBackend", "AWS Batch"),
}


def backend_class(kind: str) -> type[Backend]:
    try:
        module_name, _, class_name = REGISTRY[kind].path.partition(":")
    except KeyError:
        raise ValueError(f"unknown backend kind {kind!r}; known: {', '.join(sorted(REGISTRY))}") from None
    return getattr(import_module(module_name), class_name)


def kind_choices() -> list[tuple[str, str]]:
    """(kind, label) of every registered backend: the kinds a cluster may be."""
    return [(kind, entry.label) for kind, entry in REGISTRY.items()]
