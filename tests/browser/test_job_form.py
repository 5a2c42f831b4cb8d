"""The job form with bad input, in a real browser: a clear message next to the field, and nothing typed is lost."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import job_form_field, log_in, open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_bad_walltime_is_explained_next_to_the_field_and_the_form_is_kept(page, live_server, local_site, shots):
    from portal.jobs.models import Job

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    # Untouched, the preview lists what is still to fill in, calmly (no alert).
    expect(page.locator("#preview-error")).to_contain_text("Hardware: still to fill in")
    expect(page.locator("#preview [role=alert]")).to_have_count(0)
    shots(page, "empty-form")

    job_form_field(page, "Hardware").select_option(str(local_site.hardware.pk))
    job_form_field(page, "Name").fill("bad-walltime")
    job_form_field(page, "Script").fill("echo hi")
    job_form_field(page, "Walltime").fill("abc")
    # The preview already says what is wrong.
    expect(page.locator("#preview-error")).to_contain_text("walltime 'abc' is not a duration")
    shots(page, "preview-says-why")

    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/new/$"))
    walltime = job_form_field(page, "Walltime")
    message = page.locator(".kk-field:has(#id_walltime) .invalid-feedback")
    expect(message).to_have_text("walltime 'abc' is not a duration: write HH:MM:SS (e.g. 01:30:00) or 90m, 2h, 1d")
    expect(message).to_be_visible()
    # Next to the field: right under it.
    field_box, message_box = walltime.bounding_box(), message.bounding_box()
    assert 0 <= message_box["y"] - (field_box["y"] + field_box["height"]) < 40, (field_box, message_box)
    expect(walltime).to_have_attribute("aria-invalid", "true")
    # The summary at the top says the job was not submitted and links to the field.
    summary = page.locator("#form-errors")
    expect(summary).to_contain_text("The job was not submitted.")
    summary.get_by_role("link", name="Walltime").click()
    expect(walltime).to_be_focused()
    # What was typed is still there.
    expect(walltime).to_have_value("abc")
    expect(job_form_field(page, "Name")).to_have_value("bad-walltime")
    expect(job_form_field(page, "Script")).to_have_value("echo hi")
    expect(job_form_field(page, "Hardware")).to_have_value(str(local_site.hardware.pk))
    shots(page, "refused")
    assert Job.objects.count() == 0

    # Corrected, it goes through.
    walltime.fill("90m")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    assert Job.objects.get().walltime_seconds == 5400


def test_a_multi_line_script_typed_in_the_browser_reaches_the_job_with_unix_line_ends(page, live_server, local_site):
    from portal.jobs.models import Job

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    job_form_field(page, "Hardware").select_option(str(local_site.hardware.pk))
    job_form_field(page, "Name").fill("two-lines")
    job_form_field(page, "Script").fill("echo one\nsleep 1\n")
    expect(page.locator("#script-preview")).to_contain_text("two-lines")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    assert Job.objects.get().script.split("\n") == ["echo one", "sleep 1"]


def test_a_dataset_chosen_in_the_form_shows_in_the_preview_and_the_job_page(page, live_server, local_site):
    from portal.jobs.models import Job
    from portal.storage.models import Dataset, StoredFile

    stored = StoredFile.objects.create(project=local_site.project, path="models/weights.bin", size=5,
                                       storage_name="projects/vision/models/weights.bin", sha256="ab" * 32)
    Dataset.objects.create(project=local_site.project, name="weights", kind="file", stored_file=stored, size=5)
    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    job_form_field(page, "Hardware").select_option(str(local_site.hardware.pk))
    job_form_field(page, "Name").fill("with-weights")
    job_form_field(page, "Script").fill('ls -l "$KAKEHASHI_DATA/weights"\n')
    job_form_field(page, "Datasets").select_option(label="vision: weights (models/weights.bin)")
    expect(page.locator("#script-preview")).to_contain_text("export KAKEHASHI_DATA=")
    expect(page.locator("#script-preview")).to_contain_text("# datasets, each at $KAKEHASHI_DATA/<name>: weights")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    expect(page.get_by_text("$KAKEHASHI_DATA/weights", exact=True)).to_be_visible()
    assert [d.name for d in Job.objects.get().datasets.all()] == ["weights"]


def test_the_hardware_and_datasets_offered_follow_the_project_and_another_projects_choice_is_dropped(
        page, live_server, local_site, filesystem_storage):
    from decimal import Decimal

    from django.core.files.base import ContentFile

    from portal.budgets.models import Budget
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster, Kind
    from portal.jobs.models import Job
    from portal.projects.models import Membership, Project, Role
    from portal.storage import actions, datasets

    robotics = Project.objects.create(slug="robotics", name="Robotics lab")
    Membership.objects.create(user=local_site.alice, project=robotics, role=Role.OWNER)
    Budget.objects.create(project=robotics, amount=Decimal("100"), unit="points")
    lab = Cluster.objects.create(slug="lab", name="Lab box", kind=Kind.LOCAL, options=local_site.cluster.options)
    Allocation.objects.create(project=robotics, cluster=lab)
    arm = HardwareType.objects.create(cluster=lab, slug="lab-cpu", name="Lab CPU", cpus_per_node=2, max_nodes=1,
                                      max_walltime_hours=2, rate=Decimal("1"), rate_unit="points")
    for project, name in ((local_site.project, "images"), (robotics, "trajectories")):
        actions.store_file(local_site.alice, project, ContentFile(b"x", name="f"), path=f"{name}.bin")
        datasets.create_dataset(local_site.alice, project, name=name, path=f"{name}.bin")

    log_in(page, live_server.url, "alice")
    open_new_job_form(page)
    job_form_field(page, "Project").select_option(label="Vision lab")
    hardware = job_form_field(page, "Hardware")
    expect(hardware.locator(f"option[value='{arm.pk}']")).to_be_hidden()
    hardware.select_option(str(local_site.hardware.pk))
    job_form_field(page, "Datasets").select_option(label="vision: images (images.bin)")
    expect(job_form_field(page, "Datasets").locator("option", has_text="trajectories")).to_be_disabled()

    # Another project: the other project's hardware and dataset are no longer chosen nor offered.
    job_form_field(page, "Project").select_option(label="Robotics lab")
    expect(hardware).to_have_value("")
    expect(hardware.locator(f"option[value='{local_site.hardware.pk}']")).to_be_disabled()
    expect(job_form_field(page, "Datasets").locator("option", has_text="images")).to_be_disabled()
    assert job_form_field(page, "Datasets").evaluate("s => Array.from(s.selectedOptions).map(o => o.text)") == []
    hardware.select_option(str(arm.pk))
    job_form_field(page, "Datasets").select_option(label="robotics: trajectories (trajectories.bin)")
    job_form_field(page, "Name").fill("follows")
    job_form_field(page, "Script").fill("echo hi")
    job_form_field(page, "Walltime").fill("10m")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get()
    assert (job.project, job.hardware, [d.name for d in job.datasets.all()]) == (robotics, arm, ["trajectories"])
