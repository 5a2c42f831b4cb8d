"""A project's dataset cache on a real cluster (the Slurm test cluster) does not grow forever: the beat's pruning
removes the least recently used files back under the limit, never one a queued or running job was given, and the
project's owner sees the cache's size and what was pruned on the project's Clusters page (Chromium)."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from portal.clusters.connect import account_for, backend_for
from portal.jobs.models import Job, JobState
from portal.storage import datasets
from portal.storage.models import ClusterCache
from tests.browser.conftest import log_in
from tests.conftest import ended_job, wait_for
from tests.storage.test_datasets_reach_jobs import _submit, data_site, upload  # noqa: F401 - data_site is a fixture

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
MiB = 1024 * 1024


def test_the_cache_is_pruned_least_recently_used_first_never_what_a_running_job_was_given(
        page, live_server, data_site, live_worker):  # noqa: F811 - the fixture imported above
    site = data_site
    blobs = {name: os.urandom(MiB) for name in ("old-a", "old-b", "busy")}
    stored = {name: upload(site.alice, site.project, f"cache/{name}.bin", blob) for name, blob in blobs.items()}
    for name in blobs:
        datasets.create_dataset(site.alice, site.project, name=name, path=f"cache/{name}.bin")

    done = _submit(site, "slurm-a100x1", "true", ["old-a", "old-b"], name="used-earlier")
    assert wait_for(lambda: ended_job(done.pk), timeout=120, message="the first job").state == JobState.COMPLETED
    running = _submit(site, "slurm-a100x1", "sleep 300", ["busy"], name="still-running")
    wait_for(lambda: Job.objects.get(pk=running.pk).state in (JobState.PENDING, JobState.RUNNING), timeout=120,
             message="the second job to be on the cluster")
    slurm = running.cluster
    backend = backend_for(slurm, account_for(slurm, site.alice, site.project))
    assert {e.sha256 for e in backend.cache_entries("vision")} == {s.sha256 for s in stored.values()}

    # A limit of half a file: the two files of the ended job go, least recently used first; the running job's
    # file stays although the cache is still over the limit.
    ClusterCache.objects.update_or_create(project=site.project, cluster=slurm, defaults={"limit_bytes": MiB // 2})
    from portal.storage.tasks import prune_caches_task

    assert prune_caches_task() == 1  # what the beat runs: every project's caches on every cluster
    cache = ClusterCache.objects.get(project=site.project, cluster=slurm)
    assert {e.sha256 for e in backend.cache_entries("vision")} == {stored["busy"].sha256}
    assert (cache.files, cache.bytes, cache.pruned_files, cache.pruned_bytes, cache.error) == (1, MiB, 2, 2 * MiB, "")

    log_in(page, live_server.url, "alice", next_path="/projects/vision/clusters/")
    card = page.locator(f"section[data-cluster={slurm.slug}] [data-cache]")
    expect(card).to_contain_text("Dataset cache here: 1 file(s), 1.0 MiB of 512.0 KiB")
    expect(card).to_contain_text("The last pruning removed 2 least recently used file(s), 2.0 MiB")

    backend.cancel(Job.objects.get(pk=running.pk).scheduler_id)
