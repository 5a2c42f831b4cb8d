"""The catalog entries a fresh installation starts with (admins change them in the admin)."""

from __future__ import annotations

from portal.catalog.models import Preset

DEFAULT_PRESETS = [
    # slug, label, gpu model ("" = any), GPUs per node, nodes
    ("cpu", "CPU only", "", 0, 1),
    ("1-gpu", "1 GPU", "", 1, 1),
    ("8x-a100", "Run on 8×A100", "a100", 8, 1),
    ("2x8-gpu", "2 nodes × 8 GPUs", "", 8, 2),
]


def ensure_default_presets() -> None:
    for order, (slug, label, model, gpus, nodes) in enumerate(DEFAULT_PRESETS):
        Preset.objects.get_or_create(
            slug=slug, defaults={"label": label, "gpu_model": model, "gpus_per_node": gpus, "nodes": nodes, "order": order}
        )
