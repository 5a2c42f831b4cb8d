"""PBS: how a job reaches PBS Professional / OpenPBS (backends/pbspro.py, the default) or Torque
(backends/torque.py), whichever a cluster's settings {"dialect": ...} name. What both share — the submit path,
the job-directory index, the one query for queue and exit files — is in backends/pbs_base.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from backends.pbs_base import PBSBase
from backends.pbspro import PBSProBackend
from backends.torque import TorqueBackend
from backends.transport import Transport

DIALECTS: dict[str, type[PBSBase]] = {"pbspro": PBSProBackend, "torque": TorqueBackend}


class PBSBackend(PBSBase):
    """The backend of kind "pbs": constructing it gives the backend of the dialect the settings name."""

    def __new__(cls, transport: Transport | None, settings: Mapping[str, object] | None = None) -> PBSBase:
        flavour = str((settings or {}).get("dialect") or "pbspro")
        if flavour not in DIALECTS:
            raise ValueError(f"unknown PBS dialect {flavour!r}; known: {', '.join(DIALECTS)}")
        return DIALECTS[flavour](transport, settings)
