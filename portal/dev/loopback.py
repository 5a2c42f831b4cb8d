"""Register the loopback test cluster (tests/cluster) in the portal, so jobs can go to real schedulers.

Used by `manage.py register_test_clusters` (after `make cluster-up`) and by the tests. Researchers alice and
bob get portal accounts whose keys the portal generates; the harness installs the public keys on the login
node, as a researcher would, and the link is then checked by logging in.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from portal.catalog.defaults import ensure_default_presets
from portal.catalog.models import HardwareType, Software
from portal.clusters.actions import link_account, verify_account
from portal.clusters.models import Allocation, Cluster, ClusterAccount, Kind, SiteProfile
from portal.projects.models import Membership, Project, Role

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STATE = Path("/var/tmp/kakehashi-cluster")


@dataclass(frozen=True)
class ClusterDef:
    slug: str
    name: str
    kind: str
    port: int
    profile: str = SiteProfile.GENERIC
    options: dict | None = None


CLUSTERS = [
    ClusterDef("slurm-test", "Slurm (test cluster)", Kind.SLURM, 2222),
    ClusterDef("pbs-test", "PBS/Torque (test cluster)", Kind.PBS, 2223, options={"dialect": "torque"}),
    # Whole-node jobs run on the harness's two compute nodes (queue node.q), not on the login host's all.q. Its
    # Grid Engine writes accounting out every second (tests/cluster/up.sh: flush_time 00:00:01).
    ClusterDef("sge-tsubame-test", "TSUBAME-style Grid Engine (test cluster)", Kind.SGE, 2224, SiteProfile.TSUBAME,
               options={"node_queues": ["node.q"], "accounting_flush_seconds": 2}),
    ClusterDef("sge-abci-test", "ABCI-style Grid Engine (test cluster)", Kind.SGE, 2224, SiteProfile.ABCI,
               options={"node_queues": ["node.q"], "accounting_flush_seconds": 2}),
    ClusterDef("sge-test", "Grid Engine (test cluster)", Kind.SGE, 2225, options={"accounting_flush_seconds": 2}),
]

# slug, cluster, name, gpu model, GPUs/node, CPUs/node, max nodes, scheduler mapping, rate (points/node-hour).
# Whole-node types allow as many nodes as the test cluster has (Slurm node01-02, Grid Engine sgenode01-02).
HARDWARE = [
    ("slurm-a100x8", "slurm-test", "A100 node", "a100", 8, 16, 2, {"partition": "gpu", "gres": "gpu:a100:8"}, "3.0"),
    ("slurm-a100x1", "slurm-test", "A100 slice", "a100", 1, 2, 1, {"partition": "gpu", "gres": "gpu:a100:1"}, "0.5"),
    ("pbs-cpu", "pbs-test", "CPU node", "", 0, 2, 2, {}, "0.2"),
    ("pbs-a100x8", "pbs-test", "A100 node", "a100", 8, 16, 2, {}, "3.0"),
    ("tsubame-f-node", "sge-tsubame-test", "f_node", "h100", 4, 16, 2, {"resource": "f_node"}, "1.0"),
    ("tsubame-h-node", "sge-tsubame-test", "h_node", "h100", 2, 8, 1, {"resource": "h_node"}, "0.5"),
    ("tsubame-s-gpu", "sge-tsubame-test", "s_gpu", "h100", 1, 2, 1, {"resource": "s_gpu"}, "0.25"),
    ("abci-rt-af", "sge-abci-test", "rt_AF", "a100", 8, 16, 2, {"resource": "rt_AF"}, "3.0"),
    ("sge-gpu", "sge-test", "GPU slots", "a100", 8, 8, 1, {"pe": "smp", "gpu_resource": "gpu"}, "4.0"),
]

RESEARCHERS = {"alice": "kakehashi-alice", "bob": "kakehashi-bob"}
GROUP = "kkdemo"
# The image the harness's apptainer stand-in maps to its sandbox image (tests/cluster/README.md).
CONTAINER_IMAGE = "docker://nvcr.io/nvidia/pytorch:24.05-py3"


def _host_keys(state: Path, port: int, host: str) -> str:
    """The harness's own known_hosts line for this port, named for the host the portal will dial."""
    lines = (state / "known_hosts").read_text().splitlines()
    prefix = f"[127.0.0.1]:{port} "
    return "\n".join(f"[{host}]:{port} " + line[len(prefix):] for line in lines if line.startswith(prefix)) + "\n"


@transaction.atomic
def register_clusters(state: Path = DEFAULT_STATE, project: Project | None = None, host: str = "127.0.0.1") -> dict[str, Cluster]:
    """Clusters, hardware, software and the project's allocations (group kkdemo everywhere)."""
    clusters = {}
    for d in CLUSTERS:
        cluster, _ = Cluster.objects.update_or_create(
            slug=d.slug,
            defaults={
                "name": d.name, "kind": d.kind, "site_profile": d.profile, "login_host": host,
                "login_port": d.port, "host_keys": _host_keys(state, d.port, host), "options": d.options or {},
                "work_root": "kakehashi-jobs", "enabled": True,
            },
        )
        clusters[d.slug] = cluster
    for slug, cluster, name, model, gpus, cpus, max_nodes, mapping, rate in HARDWARE:
        HardwareType.objects.update_or_create(
            slug=slug,
            defaults={
                "cluster": clusters[cluster], "name": name, "gpu_model": model, "gpus_per_node": gpus,
                "cpus_per_node": cpus, "max_nodes": max_nodes, "max_walltime_hours": 24, "scheduler_mapping": mapping,
                "rate": Decimal(rate), "rate_unit": "points",
            },
        )
    cuda, _ = Software.objects.update_or_create(
        slug="cuda-12-4", defaults={"name": "CUDA 12.4 + Python 3.11 (modules)", "kind": Software.Kind.MODULES,
                                    "modules": ["cuda/12.4", "python/3.11"], "provides": ["python"]},
    )
    cuda.clusters.add(*clusters.values())
    torch, _ = Software.objects.update_or_create(
        slug="pytorch-2-13", defaults={"name": "PyTorch 2.13 + papermill (modules)", "kind": Software.Kind.MODULES,
                                       "modules": ["pytorch/2.13"], "provides": ["torch", "papermill"]},
    )
    torch.clusters.add(*clusters.values())
    ngc, _ = Software.objects.update_or_create(
        slug="ngc-pytorch-24-05", defaults={
            "name": "NGC PyTorch 24.05 (container)", "kind": Software.Kind.CONTAINER, "image": CONTAINER_IMAGE,
            "provides": ["torch", "papermill"],
            "description": "On the test cluster: a stand-in image (Debian 12, PyTorch CPU, papermill) run by the "
                           "harness's apptainer stand-in.",
        },
    )
    ngc.clusters.add(*clusters.values())
    lab, _ = Software.objects.update_or_create(
        slug="jupyterlab-4-6", defaults={"name": "JupyterLab 4.6 (modules)", "kind": Software.Kind.MODULES,
                                         "modules": ["jupyterlab/4.6"], "provides": ["jupyterlab", "python"],
                                         "description": "For interactive sessions: JupyterLab and jupyterhub-singleuser."},
    )
    lab.clusters.add(*clusters.values())
    ensure_default_presets()
    if project is not None:
        for cluster in clusters.values():
            Allocation.objects.update_or_create(project=project, cluster=cluster, defaults={"group": GROUP})
    return clusters


def install_public_key(username: str, public_key: str) -> None:
    """What the researcher does by hand on the login node; here the harness does it."""
    subprocess.run([str(ROOT / "tests/cluster/authorize.sh"), username, public_key], check=True, capture_output=True)


def link_researchers(clusters: dict[str, Cluster], project: Project, *, verify: bool = True) -> dict[str, object]:
    """Portal users alice and bob in `project`, each with a portal-generated key installed on the test cluster."""
    User = get_user_model()
    users = {}
    for username, password in RESEARCHERS.items():
        user, created = User.objects.get_or_create(username=username, defaults={"email": f"{username}@example.org"})
        if created:
            user.set_password(password)
            user.save()
        Membership.objects.get_or_create(user=user, project=project, defaults={"role": Role.MEMBER})
        for cluster in clusters.values():
            account = ClusterAccount.objects.filter(cluster=cluster, user=user).first()
            if account is None:
                account = link_account(cluster, username=username, user=user)
            install_public_key(username, account.public_key)
            if verify and not verify_account(account.pk):
                account.refresh_from_db()
                raise RuntimeError(f"{username}@{cluster.slug}: {account.last_error}")
        users[username] = user
    return users
