"""The bridge from portal models to backends: which backend, reached how, as whom.

How a cluster is reached and as whom is what its backend class declares (`Backend.reach`): this module asks it
and hands the backend plain `Access` values, so no other part of the portal knows about login nodes, keys or the
local host, and a new kind of backend needs no change here (docs/decisions/0008).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.conf import settings
from django.db.models import Q

from backends import REGISTRY, backend_class
from backends.base import Access, Backend, Reach
from portal.clusters.models import CloudCredential, Cluster, ClusterAccount, IdentityMode
from portal.compiled import CompiledRead


class NoClusterAccount(Exception):
    """The user (or project) has no working identity on the cluster yet. The message says what to do."""


def reach_of(cluster: Cluster) -> Reach:
    return backend_class(cluster.kind).reach


# Every submit to a cluster reached as the researcher reads this: compiled once per process (docs/decisions/0054).
_ACCOUNT_OF_USER = CompiledRead(lambda cluster, user: ClusterAccount.objects.filter(cluster_id=cluster, user_id=user),
                                cluster=int, user=int)


def account_for(cluster: Cluster, user, project) -> ClusterAccount | None:
    """The identity a job of `user` in `project` runs as on `cluster`: a ClusterAccount where the backend logs
    in as someone, None where it runs as the portal itself or with the cluster's own credentials."""
    return _choose_account(
        cluster, user, project,
        of_project=lambda: ClusterAccount.objects.filter(cluster=cluster, project=project).first(),
        of_user=lambda: _ACCOUNT_OF_USER.first(cluster=cluster.pk, user=user.pk))


def accounts_for(clusters: Iterable[Cluster], user, project) -> dict[int, ClusterAccount | None | NoClusterAccount]:
    """account_for on many clusters in one query (the comparison before Run asks it of every cluster a project may
    use): per cluster id, the account, None, or the NoClusterAccount that says what is missing."""
    clusters = {cluster.pk: cluster for cluster in clusters}
    wanted = [pk for pk, cluster in clusters.items() if reach_of(cluster).uses_cluster_account]
    whose = Q(user_id=user.pk) if project is None else Q(user_id=user.pk) | Q(project_id=project.pk)
    rows = list(ClusterAccount.objects.filter(whose, cluster_id__in=wanted)) if wanted else []
    # At most one of each per cluster (the model's unique constraints), so a dict loses nothing.
    of_user = {row.cluster_id: row for row in rows if row.user_id == user.pk}
    of_project = {row.cluster_id: row for row in rows if project is not None and row.project_id == project.pk}
    found: dict[int, ClusterAccount | None | NoClusterAccount] = {}
    for pk, cluster in clusters.items():
        try:
            found[pk] = _choose_account(cluster, user, project, of_project=lambda pk=pk: of_project.get(pk),
                                        of_user=lambda pk=pk: of_user.get(pk))
        except NoClusterAccount as exc:
            found[pk] = exc
    return found


def _choose_account(cluster: Cluster, user, project, *, of_project: Callable[[], ClusterAccount | None],
                    of_user: Callable[[], ClusterAccount | None]) -> ClusterAccount | None:
    """The rule account_for and accounts_for share; `of_project`/`of_user` find the project's service account and
    the user's own on `cluster`, by a query or in rows already read."""
    if not reach_of(cluster).uses_cluster_account:
        return None
    if project is not None and project.operations and getattr(user, "is_staff", False):
        # The site's own checks run as its service account: a site admin has no research account there.
        account = of_project()
        if account is None:
            raise NoClusterAccount(
                f"the site's operations project {project.slug} has no service account on {cluster.name}: set it up "
                "on the site page (Health checks), and install the key it shows"
            )
        return account
    if cluster.identity_mode == IdentityMode.PROJECT:
        account = of_project()
        if account is None:
            raise NoClusterAccount(
                f"project {project.slug} has no service account on {cluster.name}; a site admin must add one"
            )
        return account
    account = of_user()
    if account is None:
        raise NoClusterAccount(
            f"you have no account linked on {cluster.name}: open Settings → Cluster accounts, create a key "
            "and install it on the login node"
        )
    return account


def monitor_account(cluster: Cluster, owners: Iterable[tuple[object, object]]) -> ClusterAccount | None:
    """Whose identity asks the scheduler about everyone's jobs, given the (user, project) owners of those jobs.

    Queues are readable by every user on the centres we target (docs/decisions/0003): a configured monitor
    account, else the first owner's own.
    """
    if not reach_of(cluster).uses_cluster_account:
        return None
    monitor = cluster.options.get("monitor_username")
    if monitor:
        account = ClusterAccount.objects.filter(cluster=cluster, username=monitor).first()
        if account:
            return account
    for user, project in owners:
        try:
            return account_for(cluster, user, project)
        except NoClusterAccount:
            continue
    return None


def access_for(cluster: Cluster, account: ClusterAccount | None) -> Access:
    """Everything the portal knows about reaching `cluster` as `account`, in plain values."""
    if reach_of(cluster).uses_cluster_account:
        if account is None:
            raise NoClusterAccount(f"no account to reach {cluster.name} with")
        if not cluster.host_keys.strip():
            raise NoClusterAccount(f"{cluster.name} has no pinned host key; a site admin must verify and pin it")
    credential = CloudCredential.objects.filter(cluster=cluster).first() if reach_of(cluster) is Reach.CLOUD_API else None
    return Access(
        key_id=credential.access_key_id if credential else "",
        secret=credential.secret() if credential else "",
        host=cluster.login_host,
        port=cluster.login_port,
        username=account.username if account else "",
        private_key=account.private_key() if account else "",
        known_hosts=cluster.host_keys,
        local_root=cluster.options.get("root") or settings.KAKEHASHI_LOCAL_JOBS_DIR,
        timeout=settings.KAKEHASHI_SSH_TIMEOUT,
    )


def backend_for(cluster: Cluster, account: ClusterAccount | None = None) -> Backend:
    return backend_class(cluster.kind).connect(access_for(cluster, account), backend_settings(cluster))


def cloud_client(cluster: Cluster, service: str, region: str | None = None):
    """A boto3 client of a cloud cluster's account (its stored key or the worker's role), for what is not a job:
    setting the site up, prices. Worker and management-command side only."""
    from backends.aws_batch import aws_client

    return aws_client(access_for(cluster, None), backend_settings(cluster), service, region)


def renderer_for(cluster: Cluster) -> Backend:
    """A backend that can only render scripts (pure; safe to use inside a web request)."""
    return backend_class(cluster.kind)(None, backend_settings(cluster))


def job_dir(cluster: Cluster, name: str) -> str:
    """Where the job named `name` keeps its files on `cluster`."""
    return backend_class(cluster.kind).job_dir(cluster.work_root, name)


def kinds_reached(reach: Reach) -> list[str]:
    """The cluster kinds whose backends are reached this way (e.g. those a researcher links an account on)."""
    return [kind for kind in REGISTRY if backend_class(kind).reach is reach]


def is_cloud(cluster: Cluster) -> bool:
    """Whether the cluster's machines are rented from a provider through its API (its backend's `reach`): the site
    sets its queues up (portal/cloud/setup.py), its hardware is priced from the provider's list, a reconciler
    compares what runs there with the portal's jobs, and datasets reach it through the object store."""
    return reach_of(cluster) is Reach.CLOUD_API


def cloud_kinds() -> list[str]:
    """The cluster kinds `is_cloud` holds for, for queries (`cluster__kind__in=cloud_kinds()`)."""
    return kinds_reached(Reach.CLOUD_API)


def backend_settings(cluster: Cluster) -> dict:
    return {**cluster.options, "site_profile": cluster.site_profile, "cluster": cluster.slug}
