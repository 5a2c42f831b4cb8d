"""A quick choice says where it will run and lets the researcher pick another cluster that matches, in a browser
(the choice fills the form in static/kakehashi.js)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import job_form_field, log_in, open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_run_on_8_a100_names_its_cluster_and_another_matching_cluster_can_be_chosen(page, live_server, local_site):
    from portal.catalog.defaults import ensure_default_presets
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster, Kind

    ensure_default_presets()
    places = {}
    for slug, name, rate in (("tsubame", "TSUBAME 4.0", "9"), ("abci", "ABCI 3.0", "3")):
        cluster = Cluster.objects.create(slug=slug, name=name, kind=Kind.SLURM, login_host=slug, host_keys="x")
        Allocation.objects.create(project=local_site.project, cluster=cluster, group="kk")
        places[slug] = HardwareType.objects.create(
            cluster=cluster, slug=f"{slug}-a100x8", name="A100 node", gpu_model="a100", gpus_per_node=8,
            cpus_per_node=64, max_nodes=2, rate=Decimal(rate), scheduler_mapping={"partition": "gpu"})
    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    choice = page.locator('[data-preset-choice="8x-a100"]')
    cheapest = choice.get_by_role("button", name="Run on 8×A100")
    expect(cheapest).to_contain_text("on ABCI 3.0 · 3.00 points/node-h · cheapest of 2")
    other = choice.get_by_role("button", name="or on TSUBAME 4.0 (A100 node) · 9.00 points/node-h")
    other.click()
    expect(job_form_field(page, "Hardware")).to_have_value(str(places["tsubame"].pk))
    expect(other).to_have_attribute("aria-pressed", "true")
    expect(cheapest).to_have_attribute("aria-pressed", "false")
    cheapest.click()
    expect(job_form_field(page, "Hardware")).to_have_value(str(places["abci"].pk))
