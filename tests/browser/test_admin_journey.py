"""A project owner manages members and the budget in the browser; a member is then refused by that budget."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import job_form_field, log_in, open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_owner_adds_a_member_sets_a_strict_budget_and_the_member_is_refused(new_page, live_server, local_site, make_user,
                                                                            shots):
    from portal.budgets.models import Budget, LedgerEntry
    from portal.jobs.models import Job
    from portal.projects.models import Membership

    make_user("bob")  # has an account, is in no project yet
    base = live_server.url
    owner = new_page()
    log_in(owner, base, "alice")

    # Projects → the project → Members.
    owner.get_by_role("navigation", name="Main navigation").get_by_role("link", name="Projects").click()
    owner.get_by_role("link", name="Vision lab").click()
    expect(owner.get_by_role("heading", level=1)).to_have_text("Vision lab")
    owner.get_by_role("link", name="Members").click()
    expect(owner.get_by_role("heading", level=1)).to_have_text("Members")
    members = owner.locator("#members-table")
    expect(members.locator("tr[data-user=bob]")).to_have_count(0)

    owner.get_by_label("User name or email").fill("bob")
    owner.get_by_label("Role", exact=True).select_option(label="Member")
    owner.get_by_role("button", name="Add", exact=True).click()
    expect(owner.get_by_role("alert").filter(has_text="bob is now member of vision.")).to_be_visible()
    expect(members.locator("tr[data-user=bob]")).to_be_visible()
    expect(owner.get_by_label("Role of bob")).to_have_value("member")
    shots(owner, "bob-added")

    # Change a role: bob to admin, and back to member.
    bob_row = members.locator("tr[data-user=bob]")
    owner.get_by_label("Role of bob").select_option(label="Admin")
    bob_row.get_by_role("button", name="Change").click()
    expect(owner.get_by_role("alert").filter(has_text="bob is now admin.")).to_be_visible()
    expect(owner.get_by_label("Role of bob")).to_have_value("admin")
    assert Membership.objects.get(project=local_site.project, user__username="bob").role == "admin"
    owner.get_by_label("Role of bob").select_option(label="Member")
    members.locator("tr[data-user=bob]").get_by_role("button", name="Change").click()
    expect(owner.get_by_role("alert").filter(has_text="bob is now member.")).to_be_visible()
    assert Membership.objects.get(project=local_site.project, user__username="bob").role == "member"
    shots(owner, "bob-role-changed")

    # Budget: 5 points, strict. The project page's budget bar shows it.
    owner.get_by_role("link", name="Vision lab").click()
    owner.get_by_role("link", name="Budget").click()
    expect(owner.get_by_role("heading", level=1)).to_have_text("Budget")
    owner.get_by_label("Amount").fill("5")
    owner.get_by_label("Unit").fill("points")
    strict = owner.get_by_label(re.compile("^Strict"))
    strict.check()
    shots(owner, "budget-form")
    owner.get_by_role("button", name="Save budget").click()
    expect(owner).to_have_url(re.compile(r"/projects/vision/$"))
    expect(owner.get_by_role("alert").filter(has_text="The budget of vision is now 5")).to_be_visible()
    bar = owner.locator("#budget-bar")
    expect(bar).to_contain_text("5.00 points available")
    expect(bar).to_contain_text("of 5.00 points · strict")
    expect(owner.locator("#budget-bar [role=img]")).to_have_attribute("aria-label", "0.00 spent, 0.00 reserved of 5.00 points")
    budget = Budget.objects.get(project=local_site.project)
    assert budget.amount == 5 and budget.strict
    shots(owner, "project-with-budget")

    # bob, a member now, asks for more than is left: the preview warns, Run is refused, nothing is queued.
    member = new_page()
    log_in(member, base, "bob")
    open_new_job_form(member)
    expect(job_form_field(member, "Project")).to_have_value(str(local_site.project.pk))
    job_form_field(member, "Hardware").select_option(str(local_site.hardware.pk))
    job_form_field(member, "Name").fill("too-expensive")
    job_form_field(member, "Script").fill("echo hi")
    expect(member.locator("#estimate-amount")).to_have_text("10.00 points")  # 1 node × 10 points/node-h × 1 h
    expect(member.locator("#estimate")).to_contain_text("over budget: only 5.00 points left")
    shots(member, "preview-over-budget")
    member.get_by_role("button", name="Run", exact=True).click()
    refusal = member.locator(".kk-field:has(#id_walltime) .invalid-feedback")
    expect(refusal).to_contain_text("needs an estimated 10.00 points")
    expect(refusal).to_contain_text("has only 5.00 points left of 5.00 points")
    expect(member).to_have_url(re.compile(r"/jobs/new/$"))
    expect(member.locator("#form-errors")).to_contain_text("The job was not submitted.")
    expect(member.locator("#form-errors")).to_contain_text("has only 5.00 points left")
    expect(job_form_field(member, "Name")).to_have_value("too-expensive")  # the form is kept as typed
    shots(member, "refused")
    assert Job.objects.count() == 0
    assert not LedgerEntry.objects.filter(budget=budget).exists()
    member.get_by_role("navigation", name="Main navigation").get_by_role("link", name="Jobs").click()
    expect(member.get_by_text("No jobs yet.")).to_be_visible()


def test_a_site_admin_lowering_a_strict_budget_in_the_django_admin_is_told_which_jobs_it_cancels_first(
        new_page, live_server, local_site, make_user, shots):
    """The Django admin's budget page asks first, as the project's Budget page does: the job's name and why, and
    nothing saved until the box is ticked."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from portal.budgets.models import Budget
    from portal.jobs.models import Job, JobState

    admin = make_user("root-admin", staff=True)
    admin.is_superuser = True
    admin.save()
    Job.objects.create(project=local_site.project, user=local_site.alice, cluster=local_site.cluster,
                       hardware=local_site.hardware, name="long-training", state=JobState.RUNNING,
                       scheduler_id="local-1", walltime_seconds=7200, estimate_unit="points",
                       started_at=timezone.now() - timedelta(hours=1))  # 10 points burnt so far
    page = new_page()
    log_in(page, live_server.url, "root-admin")
    page.goto(f"{live_server.url}/admin/budgets/budget/{local_site.budget.pk}/change/")
    page.get_by_label("Amount").fill("5")
    page.get_by_role("button", name="Save", exact=True).click()
    error = page.locator(".errorlist").filter(has_text="Saving a strict budget of 5.00 points cancels 1 job(s)")
    expect(error).to_contain_text("long-training")
    shots(page, "django-admin-asks-first")
    assert Budget.objects.get(pk=local_site.budget.pk).amount == Decimal("100")
    page.get_by_label("Cancel the jobs this budget no longer covers").check()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert Budget.objects.get(pk=local_site.budget.pk).amount == Decimal("5")
