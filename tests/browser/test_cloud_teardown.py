"""A torn-down cloud cluster, or one whose queues went missing, is never offered: not in quick choices, not in
the comparison before Run, and a submit is refused before it reaches AWS; the Clusters page says why, and the
queues' return brings it back. In Chromium against moto's server (AWS's APIs) and SeaweedFS."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from tests.browser.conftest import job_form_field, log_in, open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _form_with_8_a100(page, live_server):
    page.goto(live_server.url + "/jobs/new/")
    job_form_field(page, "Name").fill("compare")
    job_form_field(page, "Walltime").fill("2h")
    job_form_field(page, "Script").fill("python train.py")


def test_after_teardown_the_cloud_cluster_is_withdrawn_and_a_missing_queue_is_never_offered(
        page, live_server, aws_site, moto_aws):
    from portal.catalog.defaults import ensure_default_presets
    from portal.catalog.models import HardwareType
    from portal.clusters.health import collect_all
    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest, SubmitError
    from portal.jobs.models import Job

    ensure_default_presets()
    collect_all()
    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    expect(page.locator('[data-preset-choice="8x-a100"]')).to_contain_text("AWS Tokyo")

    call_command("cloud_setup", "aws", "--teardown")
    page.goto(live_server.url + "/jobs/new/")
    expect(page.locator('#presets')).not_to_contain_text("AWS Tokyo")
    expect(job_form_field(page, "Hardware").locator("option", has_text="p4d")).to_have_count(0)
    with pytest.raises(SubmitError, match=r"AWS Tokyo is switched off: torn down on .*: its AWS Batch queues were removed"):
        submit_job(aws_site.alice, JobRequest(
            project=aws_site.project, name="late", script="echo hi", hardware=aws_site.p4d, software=aws_site.pytorch,
            walltime="01:00:00"))
    assert not Job.objects.exists()
    page.get_by_role("navigation", name="Main navigation").get_by_role("link", name="Clusters").click()
    row = page.locator("#cluster-health tr[data-cluster=aws]")
    expect(row).to_contain_text("switched off")
    expect(row).to_contain_text("its AWS Batch queues were removed (a site admin runs manage.py cloud_setup")

    # Set up again: offered again. Then one queue is deleted behind the portal's back (the AWS console).
    call_command("cloud_setup", "aws")
    batch = moto_aws.client("batch")
    queue = "kakehashi-aws-p4d-24xlarge-on-demand"
    batch.update_job_queue(jobQueue=queue, state="DISABLED")
    batch.delete_job_queue(jobQueue=queue)
    collect_all()  # the health beat finds it missing
    page.reload()
    row = page.locator("#cluster-health tr[data-cluster=aws]")
    expect(row.locator("[data-answering=yes]")).to_be_visible()
    expect(row.locator("[data-unavailable=aws-p4d]")).to_contain_text(f"Not offered: job queue {queue} does not exist")
    expect(row).not_to_contain_text("Last error")
    open_new_job_form(page)
    expect(page.locator('#presets [data-preset="8x-a100"]').first).not_to_contain_text("AWS Tokyo")
    expect(job_form_field(page, "Hardware").locator("option", has_text="p4d")).to_have_count(0)
    expect(job_form_field(page, "Hardware").locator("option", has_text="g5.xlarge")).to_have_count(1)
    with pytest.raises(SubmitError, match=f"cannot take jobs now: job queue {queue} does not exist"):
        submit_job(aws_site.alice, JobRequest(
            project=aws_site.project, name="late", script="echo hi", hardware=HardwareType.objects.get(pk=aws_site.p4d.pk), software=aws_site.pytorch,
            walltime="01:00:00"))

    call_command("cloud_setup", "aws")  # the queue is back, and so is the offer, at once
    page.reload()
    expect(page.locator('[data-preset-choice="8x-a100"]')).to_contain_text(re.compile("AWS Tokyo"))
