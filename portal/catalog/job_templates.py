"""Job templates that ship with Kakehashi: real code under job_templates/<slug>/, started by a short payload.

A template's files travel with the job (staged into its directory like the payload), so what runs is exactly
what the repository holds and the user sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "job_templates"
# How a `make run` demo gets what the templates need (docs/decisions/0035).
HOST_TORCH_HINT = "`make torch` installs PyTorch (CPU) beside `make run`"


@dataclass(frozen=True)
class JobTemplate:
    slug: str
    name: str
    description: str
    launcher: str
    script: str
    files: tuple[str, ...]
    records_health: bool = False  # its outputs/health.json is stored with the hardware type
    shared: tuple[str, ...] = ()  # files from job_templates/common/, staged beside the template's own
    # What the chosen Software must provide (Software.provides): the code imports it, the launcher runs it.
    requires: tuple[str, ...] = ()

    def file_contents(self) -> dict[str, bytes]:
        files = {name: (ROOT / "common" / name).read_bytes() for name in self.shared}
        files.update({name: (ROOT / self.slug / name).read_bytes() for name in self.files})
        return files


TEMPLATES: dict[str, JobTemplate] = {
    t.slug: t
    for t in (
        JobTemplate(
            slug="ddp-mnist",
            name="PyTorch DDP: train a small CNN (MNIST-like data, no download)",
            description="One process per GPU on every node via torchrun; loss per epoch in stdout, metrics.json in outputs.",
            launcher="torchrun",
            script='python train.py --epochs "${EPOCHS:-3}"\n',
            files=("train.py",),
            shared=("kakehashi_dist.py",),
            requires=("torch",),
        ),
        JobTemplate(
            slug="gpu-health",
            name="GPU node health check (TFLOP/s, all-reduce bandwidth, nvidia-smi)",
            description="Measures the hardware; the result is shown in the hardware picker.",
            launcher="torchrun",
            script="python check.py\n",
            files=("check.py",),
            shared=("kakehashi_dist.py",),
            requires=("torch",),
            records_health=True,
        ),
    )
}


def get(slug: str) -> JobTemplate | None:
    return TEMPLATES.get(slug) if slug else None
