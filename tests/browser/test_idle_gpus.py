"""Idle GPUs in a real browser: the owner of a job whose GPUs do nothing sees the idle badge, the chart and the rule
on its page, presses Keep running, and the rule's cancel does not happen; a project admin sees the keep.

The job runs for real on the local backend (the `make run` backend) with the real sampler; its GPUs are the
nvidia-smi stand-in answering from a recorded idle output (there is no GPU here). The tracker and the sample reader
are called as the beat calls them.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in
from tests.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_live_worker")]

ROOT = Path(__file__).parents[2]


def test_the_owner_keeps_an_idle_job_running_and_a_project_admin_sees_the_keep(new_page, live_server, local_site,
                                                                               eager, settings, make_user, shots):
    from portal.catalog.models import HardwareType
    from portal.jobs.actions.cancel import request_cancel
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from portal.jobs.causes import Cause
    from portal.jobs.models import Job, JobEvent, JobState
    from portal.jobs.tracking import track_cluster
    from portal.projects.models import Membership, Role
    from portal.samples.fetch import watch_cluster
    from portal.samples.models import IdleRule, JobSamples

    gpus = Path(tempfile.mkdtemp(prefix="kh-gpus-"))
    shutil.copy(ROOT / "tests/cluster/nvidia-smi-standin", gpus / "nvidia-smi")
    shutil.copy(ROOT / "tests/backends/fixtures/nvidia_smi/h100-2x-idle.csv", gpus / "gpus.csv")
    settings.KAKEHASHI_IDLE_MIN_WINDOW_SECONDS = 1
    cluster = local_site.cluster
    cluster.options = {**cluster.options, "sample_seconds": 1, "nvidia_smi": str(gpus / "nvidia-smi")}
    cluster.save()
    hardware = HardwareType.objects.create(cluster=cluster, slug="local-h100x2", name="Two H100 (stand-in)",
                                           gpu_model="h100", gpus_per_node=2, cpus_per_node=2, max_nodes=1,
                                           rate="10", rate_unit="points")
    IdleRule.objects.create(project=local_site.project, threshold_percent=5, window_seconds=3, warn_at_seconds=[3],
                            action="cancel", cancel_after_seconds=20, keep_max_hours=2)
    bob = make_user("bob")
    Membership.objects.create(user=bob, project=local_site.project, role=Role.ADMIN)
    job = submit_job(local_site.alice, JobRequest(project=local_site.project, name="forgotten", script="sleep 120",
                                                  hardware=hardware, walltime="00:10:00")).job

    def cycle():
        track_cluster(cluster.pk)
        watch_cluster(cluster.pk)

    def warned() -> bool:
        cycle()
        return JobEvent.objects.filter(job=job, cause=Cause.IDLE_WARNED).exists()

    try:
        wait_for(warned, timeout=60, interval=0.5, message="the idle warning")
        alice = new_page()
        log_in(alice, live_server.url, "alice", next_path=f"/jobs/{job.pk}/")
        gpu = alice.locator("#gpu-use")
        expect(gpu.locator("#idle-badge")).to_have_text("idle")
        expect(alice.locator("#idle-rule")).to_contain_text("Project vision rule")
        expect(alice.locator("#idle-rule")).to_contain_text("cancelled after 20 s unless its owner keeps")
        expect(alice.locator("#gpu-idle")).to_contain_text("points")
        chart = alice.locator("#gpu-chart")
        expect(chart).to_have_attribute("data-gpus", "2")  # gpu.js drew both GPUs
        assert int(chart.get_attribute("data-idle-periods")) >= 1  # and shaded the idle stretch
        shots(alice, "idle-job")
        alice.get_by_label("for").fill("1")
        alice.get_by_role("button", name="Keep running").click()
        expect(alice.get_by_role("alert").filter(has_text="Kept running until")).to_be_visible()
        expect(alice.locator("#kept")).to_contain_text("Kept running by alice")
        shots(alice, "kept")

        # Well past the rule's cancel time, the job still runs: the keep holds the warnings and the cancel.
        kept = JobSamples.objects.get(job=job)
        deadline = kept.idle_since.timestamp() + 25
        while time.time() < deadline:
            cycle()
            time.sleep(0.5)
        assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
        assert not Job.objects.get(pk=job.pk).cancel_requested_at
        assert JobEvent.objects.filter(job=job, cause=Cause.IDLE_WARNED).count() == 1

        admin = new_page()
        log_in(admin, live_server.url, "bob", next_path=f"/jobs/{job.pk}/")
        expect(admin.locator("#kept")).to_contain_text("Kept running by alice")
        expect(admin.locator("#kept")).to_contain_text("1 keep so far")
        expect(admin.locator("#events [data-cause='idle_kept']")).to_have_count(1)
        expect(admin.locator("#idle-actions")).to_have_count(0)  # only the owner keeps
        shots(admin, "the-admin-sees-the-keep")
        alice.goto(f"{live_server.url}/jobs/")
        expect(alice.locator("#job-list").get_by_text("idle", exact=True)).to_be_visible()
    finally:
        if not Job.objects.get(pk=job.pk).is_final:
            request_cancel(Job.objects.get(pk=job.pk), local_site.alice)
        shutil.rmtree(gpus, ignore_errors=True)
    assert re.search(r"kept running while idle by alice", JobEvent.objects.get(job=job, cause=Cause.IDLE_KEPT).reason)
