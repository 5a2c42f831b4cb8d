"""One comparison before Run, in a real browser: the job form shows every place "Run on 8×A100" may run for
the project — the Slurm and TSUBAME test clusters and AWS Batch (moto) — with its cost and how busy it is."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import job_form_field, log_in, open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TORCH = "PyTorch 2.13 + papermill (modules)"


def test_run_on_8_a100_shows_slurm_tsubame_and_aws_cheapest_first_and_use_switches_the_form(
        page, live_server, hpc_site, aws_site, shots):
    from portal.clusters.health import collect_all
    from portal.clusters.models import Allocation

    Allocation.objects.filter(project=hpc_site.project).exclude(
        cluster__slug__in=["local", "slurm-test", "sge-tsubame-test", "aws"]).delete()
    collect_all()  # what the health beat does every minute

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    page.get_by_role("button", name=re.compile("Run on 8×A100")).click()
    job_form_field(page, "Software").select_option(label=TORCH)
    job_form_field(page, "Name").fill("compare")
    job_form_field(page, "Walltime").fill("2h")
    job_form_field(page, "Script").fill("python train.py")

    table = page.locator("#places-table")
    expect(page.locator("#places-title")).to_have_text("Where 8×A100, 2 h can run")
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(3)
    # Cheapest first: two TSUBAME f_nodes (4 points = 40 JPY), the Slurm A100 node (6 points), AWS's p4d on demand.
    expect(rows.nth(0)).to_contain_text("TSUBAME-style Grid Engine (test cluster)")
    expect(rows.nth(0)).to_contain_text("2 nodes × 4×H100")
    expect(rows.nth(0)).to_contain_text("(not A100)")
    expect(rows.nth(0)).to_contain_text("40.00 JPY")
    expect(rows.nth(1)).to_contain_text("Slurm (test cluster)")
    expect(rows.nth(1)).to_contain_text("60.00 JPY")
    expect(rows.nth(1)).to_contain_text("chosen")
    expect(rows.nth(1)).to_contain_text(re.compile(r"nothing waiting|\d+ jobs? waiting"))
    expect(rows.nth(1)).to_contain_text(re.compile(r"\d of 2 nodes free"))
    expect(rows.nth(2)).to_contain_text("AWS Tokyo")
    expect(rows.nth(2)).to_contain_text("cloud")
    expect(rows.nth(2)).to_contain_text("9,831.78 JPY")  # 32.7726 USD/h × 2 h × 150
    shots(page, "comparison")

    # "Use" on the TSUBAME row puts its hardware and node count in the form; the preview follows.
    rows.nth(0).get_by_role("button", name="Use").click()
    expect(job_form_field(page, "Nodes")).to_have_value("2")
    expect(page.locator("#submit-command")).to_contain_text("qsub -g kkdemo")
    expect(page.locator("#places-table tbody tr.table-active")).to_contain_text("TSUBAME")
    shots(page, "tsubame-chosen")


def test_presets_and_the_comparison_put_first_where_the_researcher_can_run_and_say_what_is_missing_elsewhere(
        page, live_server, hpc_site, shots):
    """Issue 25: alice has no account on the TSUBAME-style cluster (the demo after `make cluster-up` has none
    anywhere). Its cheaper places come after those she can use, each saying what she lacks; Run is not the first
    she hears of it."""
    from portal.clusters.health import collect_all
    from portal.clusters.models import Allocation, ClusterAccount

    Allocation.objects.filter(project=hpc_site.project).exclude(
        cluster__slug__in=["local", "slurm-test", "sge-tsubame-test"]).delete()
    ClusterAccount.objects.filter(user=hpc_site.alice, cluster__slug="sge-tsubame-test").delete()
    collect_all()

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    one_gpu = page.locator('[data-preset-choice="1-gpu"]')
    # TSUBAME's s_gpu is cheaper (0.25 points/node-h) than Slurm's A100 slice (0.50), but alice cannot run there yet.
    expect(one_gpu.locator("button.preset").first).to_contain_text("on Slurm (test cluster)")
    expect(one_gpu.locator("[data-preset-missing]")).to_contain_text(
        "you have no account linked on TSUBAME-style Grid Engine (test cluster)")
    shots(page, "presets")

    page.get_by_role("button", name=re.compile("Run on 8×A100")).click()
    job_form_field(page, "Software").select_option(label=TORCH)
    job_form_field(page, "Name").fill("compare")
    job_form_field(page, "Walltime").fill("2h")
    job_form_field(page, "Script").fill("python train.py")
    rows = page.locator("#places-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("Slurm (test cluster)")  # 6 points, and she can run there
    expect(rows.nth(0).locator("[data-place-missing]")).to_have_count(0)
    expect(rows.nth(1)).to_contain_text("TSUBAME-style Grid Engine (test cluster)")  # 4 points, no account
    expect(rows.nth(1).locator("[data-place-missing]")).to_contain_text("open Settings → Cluster accounts")
    # Its whole nodes are the two compute nodes, not the login host's queue too.
    expect(rows.nth(1)).to_contain_text(re.compile(r"\d of 2 nodes free"))
    shots(page, "comparison")
