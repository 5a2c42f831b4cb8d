"""Dataset caches on clusters that do not grow forever: each project's cache on each cluster is measured, and
pruned back under its limit least recently used first, by a beat task (`prune_caches_task`).

"Recently used" is the portal's own record, not the file system's access time (often not kept on cluster file
systems): the last job given the file there (PinnedFile, written at dispatch); a file no recorded job was given
counts from when it was staged. A file a queued or running job was given is never pruned, whatever its age: the
job links to it. Measuring and pruning run as the project's members' accounts there (the group's shared cache as
one of them, docs/decisions/0027), through the backend (backends/cache.py); a web request never does.
"""

from __future__ import annotations

import logging

from django.db.models import Max
from django.utils import timezone

from backends.base import BackendError, TransportError
from backends.staging import GROUP_FIELD
from portal.audit.actions import record
from portal.clusters.connect import NoClusterAccount, account_for, backend_for, cloud_kinds
from portal.clusters.models import Allocation, Cluster
from portal.job_states import ACTIVE_STATES
from portal.projects.models import Project
from portal.storage.models import ClusterCache, PinnedFile

log = logging.getLogger(__name__)


def _caches_of(cluster: Cluster, project: Project) -> list:
    """(account, group) per cache directory of the project there: the group's one shared cache, or each member's
    own, for the members whose jobs were given data there."""
    group = Allocation.objects.filter(project=project, cluster=cluster).values_list("group", flat=True).first() or ""
    shared = GROUP_FIELD in str((cluster.options or {}).get("data_cache") or "") and group
    # Through the pins (storage's own record of what each job was given), newest job first.
    pins = PinnedFile.objects.filter(job__cluster=cluster, job__project=project).order_by("-job__created_at")
    users = list(dict.fromkeys(pins.values_list("job__user", flat=True)[:10_000]))
    from django.contrib.auth import get_user_model

    people = list(get_user_model().objects.filter(pk__in=list(users)[:200]))
    if shared:
        people = people[:1]
    return [(account_for(cluster, person, project), group) for person in people]


def prune(cluster: Cluster, project: Project) -> ClusterCache:
    """Measure the project's cache(s) on the cluster and prune each back under the limit; the row says what is
    there now, what was pruned, and any error."""
    cache, _ = ClusterCache.objects.get_or_create(project=project, cluster=cluster)
    limit = cache.limit
    pins = PinnedFile.objects.filter(job__cluster=cluster, job__project=project).exclude(sha256="")
    protected = set(pins.filter(job__state__in=ACTIVE_STATES).values_list("sha256", flat=True))
    last_used = {row["sha256"]: row["last"].timestamp()
                 for row in pins.values("sha256").annotate(last=Max("job__created_at"))}
    files = size = pruned_files = pruned_bytes = 0
    errors = []
    try:
        places = _caches_of(cluster, project)
    except NoClusterAccount as exc:
        places, errors = [], [str(exc)]
    for account, group in places:
        try:
            backend = backend_for(cluster, account)
            entries = backend.cache_entries(project.slug, group)
            total = sum(e.size for e in entries)
            doomed = []
            if total > limit:
                # Least recently used first; what a queued or running job was given stays.
                for entry in sorted(entries, key=lambda e: last_used.get(e.sha256, e.modified)):
                    if total <= limit:
                        break
                    if entry.sha256 in protected:
                        continue
                    doomed.append(entry)
                    total -= entry.size
                if doomed:
                    backend.prune_cache(project.slug, [e.sha256 for e in doomed], group)
            files += len(entries) - len(doomed)
            size += total
            pruned_files += len(doomed)
            pruned_bytes += sum(e.size for e in doomed)
        except (BackendError, TransportError, NoClusterAccount) as exc:
            log.warning("data cache of %s on %s: %s", project.slug, cluster.slug, exc)
            errors.append(str(exc))
    cache.files, cache.bytes = files, size
    cache.pruned_files, cache.pruned_bytes = pruned_files, pruned_bytes
    cache.measured_at, cache.error = timezone.now(), "; ".join(errors)[:1000]
    cache.save()
    if pruned_files:
        record("cluster.cache_prune", project=project, target=cache, cluster=cluster.slug, files=pruned_files,
               size=pruned_bytes, limit=limit)
    return cache


def prune_all() -> int:
    """Every project's caches on every enabled cluster that has them (not the cloud: its containers pull data)."""
    done = 0
    pairs = (PinnedFile.objects.exclude(storage_name="").filter(job__cluster__enabled=True)
             .exclude(job__cluster__kind__in=cloud_kinds()).order_by().values_list("job__cluster", "job__project").distinct())
    for cluster_id, project_id in pairs:
        prune(Cluster.objects.get(pk=cluster_id), Project.objects.get(pk=project_id))
        done += 1
    return done
