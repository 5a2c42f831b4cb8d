"""The bridge from portal models to backends: which transport, as whom, with which pinned host key."""

from __future__ import annotations

import os
import sys

from django.conf import settings

from backends import backend_class
from backends.base import Backend
from backends.transport import LocalTransport, SSHTransport, Transport
from portal.clusters.models import Cluster, ClusterAccount, IdentityMode, Kind


class NoClusterAccount(Exception):
    """The user (or project) has no working identity on the cluster yet. The message says what to do."""


def account_for(cluster: Cluster, user, project) -> ClusterAccount | None:
    """The identity a job of `user` in `project` runs as on `cluster` (None for the local cluster)."""
    if cluster.kind == Kind.LOCAL:
        return None
    if cluster.identity_mode == IdentityMode.PROJECT:
        account = ClusterAccount.objects.filter(cluster=cluster, project=project).first()
        if account is None:
            raise NoClusterAccount(
                f"project {project.slug} has no service account on {cluster.name}; a site admin must add one"
            )
        return account
    account = ClusterAccount.objects.filter(cluster=cluster, user=user).first()
    if account is None:
        raise NoClusterAccount(
            f"you have no account linked on {cluster.name}: open Settings → Cluster accounts, create a key "
            "and install it on the login node"
        )
    return account


def transport_for(cluster: Cluster, account: ClusterAccount | None) -> Transport:
    if cluster.kind == Kind.LOCAL:
        # Local jobs see the portal's own environment first (python, papermill for notebook jobs).
        return LocalTransport(cluster.options.get("root") or settings.KAKEHASHI_LOCAL_JOBS_DIR,
                              path_prefix=[os.path.dirname(sys.executable)])
    if account is None:
        raise NoClusterAccount(f"no account to reach {cluster.name} with")
    if not cluster.host_keys.strip():
        raise NoClusterAccount(f"{cluster.name} has no pinned host key; a site admin must verify and pin it")
    return SSHTransport(
        cluster.login_host,
        cluster.login_port,
        account.username,
        account.private_key(),
        cluster.host_keys,
        timeout=settings.KAKEHASHI_SSH_TIMEOUT,
    )


def backend_for(cluster: Cluster, account: ClusterAccount | None = None) -> Backend:
    return backend_class(cluster.kind)(transport_for(cluster, account), backend_settings(cluster))


def renderer_for(cluster: Cluster) -> Backend:
    """A backend that can only render scripts (pure; safe to use inside a web request)."""
    return backend_class(cluster.kind)(None, backend_settings(cluster))  # type: ignore[arg-type]


def backend_settings(cluster: Cluster) -> dict:
    return {**cluster.options, "site_profile": cluster.site_profile}
