"""Bad input gets a clear message and changes nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.audit.models import AuditEntry
from portal.budgets.models import LedgerEntry
from portal.jobs.models import Job

pytestmark = pytest.mark.django_db


def _post(client, site, user=None, **fields):
    client.force_login(user or site.alice)
    data = {
        "project": site.project.pk,
        "name": "ok-name",
        "hardware": site.hardware.pk,
        "nodes": 1,
        "walltime": "00:10:00",
        "launcher": "script",
        "script": "echo hi",
        **fields,
    }
    return client.post(reverse("job-new"), data)


def _nothing_changed():
    assert Job.objects.count() == 0
    assert LedgerEntry.objects.count() == 0
    assert AuditEntry.objects.filter(action="job.submit").count() == 0


def test_an_empty_script_is_refused_with_a_message(client, local_site):
    response = _post(client, local_site, script="   \n  ")
    assert response.status_code == 200
    assert "script" in response.context["form"].errors
    _nothing_changed()


def test_a_script_over_the_size_limit_is_refused(client, local_site, settings):
    settings.KAKEHASHI_MAX_SCRIPT_BYTES = 1024
    response = _post(client, local_site, script="echo x\n" * 500)
    assert "larger than 1 KiB" in response.content.decode()
    _nothing_changed()


def test_a_job_in_a_project_you_are_not_in_is_refused(client, local_site):
    # mallory is not in project "vision": it is not even offered, and a forged post is refused.
    response = _post(client, local_site, user=local_site.mallory)
    assert response.status_code == 200
    assert "project" in response.context["form"].errors
    _nothing_changed()


@pytest.mark.parametrize(
    ("walltime", "message"),
    [("abc", "is not a duration"), ("0", "longer than zero"), ("00:00:00", "longer than zero"), ("13:00:00", "at most 12 h")],
)
def test_a_bad_walltime_is_explained(client, local_site, walltime, message):
    response = _post(client, local_site, walltime=walltime)
    assert message in response.content.decode()
    _nothing_changed()


@pytest.mark.parametrize("name", ["$(reboot)", "a\nb", "x;rm -rf ~", "`id`", "with space", "#SBATCH", "-x"])
def test_a_job_name_that_could_reach_a_shell_is_refused(client, local_site, name):
    response = _post(client, local_site, name=name)
    assert "job name" in response.content.decode()
    _nothing_changed()


def test_nodes_that_are_not_a_number_are_refused(client, local_site):
    response = _post(client, local_site, nodes="abc")
    assert "nodes" in response.context["form"].errors
    _nothing_changed()


def test_overriding_a_variable_kakehashi_sets_is_refused(client, local_site):
    response = _post(client, local_site, env="GOOD=1\nPATH=/evil")
    assert "set by Kakehashi" in response.content.decode()
    _nothing_changed()


def test_a_script_bash_cannot_parse_is_refused_with_bashs_words(client, local_site):
    response = _post(client, local_site, script="for x in 1 2; do\n  echo $x\nfi\n")
    text = response.content.decode()
    assert "the script is not valid bash" in text and "syntax error" in text and "line 3" in text
    _nothing_changed()
