"""Units a person reads: quick choices in the budget's unit (never USD beside points), and a site admin told when
the unit conversions disagree, in Chromium."""

from __future__ import annotations

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_quick_choices_show_the_node_hour_in_the_budgets_unit_or_say_that_no_conversion_is_set(
        page, live_server, local_site):
    from portal.budgets.models import UnitConversion
    from portal.catalog.defaults import ensure_default_presets
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster, Kind

    ensure_default_presets()
    cloud = Cluster.objects.create(slug="aws", name="AWS Tokyo", kind=Kind.SLURM, login_host="aws", host_keys="x")
    Allocation.objects.create(project=local_site.project, cluster=cloud, group="kk")
    HardwareType.objects.create(cluster=cloud, slug="p4d", name="p4d.24xlarge", gpu_model="a100", gpus_per_node=8,
                                cpus_per_node=96, max_nodes=1, rate=Decimal("32.77"), rate_unit="USD")
    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    choice = page.locator('[data-preset-choice="8x-a100"]')
    expect(choice).to_contain_text("on AWS Tokyo · 32.77 USD/node-h, no conversion to points set")

    UnitConversion.objects.create(from_unit="USD", to_unit="points", factor=Decimal("15"))
    page.reload()
    expect(page.locator('[data-preset-choice="8x-a100"]')).to_contain_text("on AWS Tokyo · 491.55 points/node-h")
    expect(page.locator('[data-preset-choice="8x-a100"]')).not_to_contain_text("USD")


def test_a_site_admin_is_told_when_a_conversion_disagrees_with_the_others(page, live_server, make_user):
    from portal.budgets.models import UnitConversion

    make_user("root", staff=True).__class__.objects.filter(username="root").update(is_superuser=True)
    UnitConversion.objects.create(from_unit="USD", to_unit="JPY", factor=Decimal("150"))
    UnitConversion.objects.create(from_unit="USD", to_unit="points", factor=Decimal("15"))  # so 1 point = 10 JPY
    log_in(page, live_server.url, "root")
    page.goto(live_server.url + "/admin/budgets/unitconversion/add/")
    page.get_by_label("From unit").fill("points")
    page.get_by_label("To unit").fill("JPY")
    page.get_by_label("Factor").fill("150")
    page.get_by_role("button", name="Save", exact=True).click()
    error = page.locator("ul.errorlist.nonfield")
    expect(error).to_contain_text("This conversion disagrees with the others")
    expect(error).to_contain_text("1 JPY is")
    assert UnitConversion.objects.count() == 2

    page.get_by_label("Factor").fill("10")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_text("was added successfully")).to_be_visible()
    assert UnitConversion.objects.count() == 3

    # One saved behind the admin's back (the shell) is shown where conversions are set.
    UnitConversion.objects.filter(from_unit="points").update(factor=Decimal("150"))
    page.goto(live_server.url + "/admin/budgets/unitconversion/")
    expect(page.locator(".messagelist")).to_contain_text("These conversions disagree")
