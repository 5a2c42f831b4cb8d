"""Every write of the authorization walk's table leaves exactly the audit row it should: who did it, what, to which
object, from where.

The writes are the ones tests/security/test_authz_matrix.py already lists (WRITES, with its request builders),
so a route added there tomorrow fails here until someone says which row it writes; the routes that change only
the caller's own things (PERSONAL there) are written out below, or exempt with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from portal.api.models import ApiToken
from portal.audit.models import AuditEntry
from portal.budgets.models import Budget
from portal.clusters.models import Allocation, ClusterAccount
from portal.jobs.models import Job, JobGroup
from portal.notifications.models import Notification, Preference
from portal.projects.models import Membership
from portal.samples.models import IdleRule
from portal.storage.models import Dataset, Folder, StoredFile, UploadSession
from tests.security import test_authz_matrix as matrix
from tests.security.test_authz_matrix import PERSONAL, WRITES, Write, _route_of, _send, _url

pytestmark = pytest.mark.django_db

# The walk's own fixtures: vision with its objects, and each role of it as a user and as tokens of each scope.
world, walkers = matrix.world, matrix.walkers

ADDRESS = "192.0.2.44"  # where every write of this walk comes from (TEST-NET-1)

# The rows each write of WRITES leaves, in the order of its writes: (action, the object it names) for each row.
Expect = Callable[[Any, dict, Any], list[tuple[str, Any]]]


def _jobs(**filters) -> list[Job]:
    return list(Job.objects.filter(**filters))


def _cancels(world) -> list[tuple[str, Any]]:
    return [("job.cancel", job) for job in world.group.jobs.all()]


EXPECTED: dict[str, list[Expect]] = {
    "project-members": [
        lambda w, p, u: [("membership.add", Membership.objects.get(project=w.project, user__username="nina"))],
        lambda w, p, u: [("membership.role", w.viewer_membership)],
        lambda w, p, u: [("membership.remove", w.viewer_membership)],
    ],
    "project-clusters": [lambda w, p, u: [("allocation.usage", w.allocation)]],
    "project-budget": [lambda w, p, u: [("budget.set", Budget.objects.get(project=w.project))]],
    "job-cancel": [lambda w, p, u: [("job.cancel", w.job)]],
    "job-keep": [lambda w, p, u: [("job.idle_kept", w.job)]],
    "project-idle-rule": [lambda w, p, u: [("idle_rule.set", IdleRule.objects.get(project=w.project))]],
    "api-job-keep": [lambda w, p, u: [("job.idle_kept", w.job)]],
    "job-group-cancel": [lambda w, p, u: _cancels(w)],
    # A sweep and a re-run are one row each, naming the group (the jobs' ids are in its data).
    "job-group-rerun": [lambda w, p, u: [("job.sweep_rerun", w.group)]],
    "api-files": [lambda w, p, u: [("file.upload", StoredFile.objects.get(path=p["path"]))]],
    "api-datasets": [lambda w, p, u: [("dataset.create", Dataset.objects.get(name="walked"))]] * 2,
    "data-datasets": [lambda w, p, u: [("dataset.create", Dataset.objects.get(name="walked-page"))]],
    "api-uploads": [lambda w, p, u: [("upload.start", UploadSession.objects.get(path=p["path"]))]],
    "api-upload": [lambda w, p, u: [("upload.abort", p["upload"])]],
    "api-upload-parts": [lambda w, p, u: [("upload.sign", p["upload"])]],
    "api-upload-complete": [lambda w, p, u: [("file.upload", StoredFile.objects.get(path=p["upload"].path))]],
    "api-upload-batch": [lambda w, p, u: [("upload.batch_start", w.project)]],
    "api-upload-batch-complete": [lambda w, p, u: [("file.upload_batch", w.project)]],
    "api-job-cancel": [lambda w, p, u: [("job.cancel", w.job)]],
    # Stopping a session is its job's cancel: the same row, naming the session's job.
    "session-stop": [lambda w, p, u: [("job.cancel", w.session_job)]],
    "api-session-stop": [lambda w, p, u: [("job.cancel", w.session_job)]],
    "api-sweep-cancel": [lambda w, p, u: _cancels(w)],
    "api-token-revoke": [lambda w, p, u: [("api_token.revoke", w.token)]],
    "job-new": [lambda w, p, u: [("job.submit", job) for job in _jobs(name="walk-page")]],
    "data": [lambda w, p, u: [("file.upload", StoredFile.objects.get(path=p["path"]))]],
    "job-bulk-cancel": [lambda w, p, u: [("job.cancel", w.job)]],
    "api-jobs": [lambda w, p, u: [("job.submit", job) for job in _jobs(name="walk-api")]],
    # A bulk submit: a job.submit row for each job it recorded, as one submit leaves for its job.
    "api-jobs-batch": [lambda w, p, u: [("job.submit", job) for job in _jobs(name__startswith="walk-batch-")]],
    "api-sweeps": [lambda w, p, u: [("job.sweep", JobGroup.objects.get(name="walk-sweep"))]],
    # Managing files and datasets: each change one row naming what it changed (a deleted one by its id).
    "api-dataset": [lambda w, p, u: [("dataset.rename", w.dataset)], lambda w, p, u: [("dataset.delete", w.dataset)]],
    "api-files-move": [lambda w, p, u: [("file.move", p["file"])]],
    "api-files-delete": [lambda w, p, u: [("file.delete", p["file"])]],
    "api-folders": [lambda w, p, u: [("folder.create", Folder.objects.get(path=p["path"][:-4]))]],
    "data-manage": [lambda w, p, u: [("folder.create", Folder.objects.get(path=p["path"][:-4]))]],
    "data-upload-abort": [lambda w, p, u: [("upload.abort", p["upload"])]],
}


def _other_cluster(world) -> dict:
    """A cluster where each person links an account of their own (the local one needs none)."""
    from portal.clusters.models import Cluster

    cluster = Cluster.objects.create(slug="walk-hpc", name="Walk HPC", kind="slurm", login_host="127.0.0.1")
    Allocation.objects.create(project=world.project, cluster=cluster)
    return {"slug": "walk-hpc", "cluster": cluster}


def _linked(world) -> dict:
    from portal.clusters.actions import link_account

    prepared = _other_cluster(world)
    prepared["account"] = link_account(prepared["cluster"], username="alice", user=world.alice, actor=world.alice)
    return prepared


# PERSONAL routes: each write as the table would have it (alice does it to her own things), with its rows.
PERSONAL_WRITES: dict[str, tuple[Write, Expect]] = {
    "api-tokens": (
        Write("POST", frozenset({"owner"}), 0, data=lambda w, p: {"name": "walked", "scopes": ["read"],
                                                                   "expires_in_days": "30"},
              done=lambda w, p, u: ApiToken.objects.filter(name="walked").exists()),
        lambda w, p, u: [("api_token.issue", ApiToken.objects.get(name="walked"))]),
    "cluster-account-link": (
        Write("POST", frozenset({"owner"}), 0, prepare=_other_cluster, data=lambda w, p: {"walk-hpc-username": "alice"},
              done=lambda w, p, u: ClusterAccount.objects.filter(cluster__slug="walk-hpc", user=u).exists()),
        lambda w, p, u: [("cluster_account.link", ClusterAccount.objects.get(cluster__slug="walk-hpc", user=u))]),
    "cluster-account-verify": (
        Write("POST", frozenset({"owner"}), 0, prepare=_linked,
              done=lambda w, p, u: ClusterAccount.objects.get(pk=p["account"].pk).last_error == "checking…"),
        lambda w, p, u: [("cluster_account.verify", p["account"])]),
    "notification-preferences": (
        Write("POST", frozenset({"owner"}), 0, data=lambda w, p: {"portal_failed": "on", "email_failed": "on"},
              done=lambda w, p, u: not Preference.objects.get(user=u).portal_ended),
        lambda w, p, u: [("notification.preferences", Preference.objects.get(user=u))]),
}

# PERSONAL routes that write no audit row, and why.
EXEMPT = {
    "notifications-read": "marks the caller's own notifications read: how their bell looks, nothing anyone acts on",
    "cluster-account-status": "shows the caller's account and how its last check went: it changes nothing",
}


def test_every_write_of_the_table_says_which_audit_rows_it_leaves():
    writes = {name for name, rule in WRITES.items() if isinstance(rule, list)}
    assert not writes - set(EXPECTED), f"say which audit rows these writes leave (EXPECTED): {sorted(writes - set(EXPECTED))}"
    assert not set(EXPECTED) - writes, f"EXPECTED names what is no write of the table: {sorted(set(EXPECTED) - writes)}"
    assert all(len(EXPECTED[name]) == len(WRITES[name]) for name in writes), "one expectation for each write"
    personal = {name for name, rule in WRITES.items() if rule == PERSONAL}
    said = set(PERSONAL_WRITES) | set(EXEMPT)
    assert personal == said, f"personal routes with no rows said: {sorted(personal - said)}; gone: {sorted(said - personal)}"
    assert not set(PERSONAL_WRITES) & set(EXEMPT)


def _cases():
    for name in sorted(EXPECTED):
        for i in range(len(EXPECTED[name])):
            yield pytest.param(name, i, id=f"{name}-{i}")
    for name in sorted(PERSONAL_WRITES):
        yield pytest.param(name, None, id=name)


def _actor(write: Write) -> str:
    return "owner" if "owner" in write.may else sorted(write.may)[0]


@pytest.mark.parametrize("name, index", list(_cases()))
def test_each_write_leaves_exactly_its_audit_rows_with_actor_object_and_address(client, world, walkers, name, index,
                                                                              request):
    users, tokens = walkers
    write, expect = PERSONAL_WRITES[name] if index is None else (WRITES[name][index], EXPECTED[name][index])
    if write.disk:
        request.getfixturevalue("filesystem_storage")
    api = _route_of(name).startswith("api/")
    role = _actor(write)
    user = users[role]
    client.defaults["REMOTE_ADDR"] = ADDRESS
    if api:
        headers = {"Authorization": f"Bearer {tokens[role, write.scope]}"}
    else:
        client.force_login(user)
        headers = {}
    with transaction.atomic():
        prepared = write.prepare(world)
        url = (_url(name, world, **{k: v for k, v in prepared.items() if k == "upload_id"}) if index is not None
               else "/" + re.sub(r"<[^>]+>", prepared.get("slug", ""), _route_of(name)))
        mark = AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        response = _send(client, write.method, url, write.data(world, prepared), json_body=api and not write.form,
                         headers=headers)
        assert 200 <= response.status_code < 400 and write.done(world, prepared, user), (
            f"{name} as {role}: {response.status_code} {response.content[:300]!r}")
        rows = sorted((e.action, e.target_type, e.target_id, e.actor_id, str(e.ip))
                      for e in AuditEntry.objects.filter(pk__gt=mark))
        expected = sorted((action, target._meta.label_lower, str(target.pk), user.pk, ADDRESS)
                          for action, target in expect(world, prepared, user))
        transaction.set_rollback(True)
    assert expected, f"{name}: a write expected to leave no audit row (say it in EXEMPT, with the reason)"
    assert rows == expected, f"{name} as {role}: the audit rows\n{rows}\nare not the expected\n{expected}"


def test_marking_a_notification_read_is_the_callers_own_and_leaves_no_row(client, world):
    """The exemption is what it says: alice's own notification, read, and nothing recorded."""
    from portal.notifications.models import Kind as NotificationKind

    note = Notification.objects.create(user=world.alice, job=world.job, kind=NotificationKind.values[0], text="ended")
    client.force_login(world.alice)
    mark = AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    assert client.post("/notifications/read/", {"id": [note.pk]}).status_code == 302
    assert Notification.objects.get(pk=note.pk).read_at is not None
    assert not AuditEntry.objects.filter(pk__gt=mark).exists()


def test_adding_making_primary_and_removing_an_email_address_is_recorded_with_its_address(client, world):
    """Sign-in routes change nothing of a project (the walk's table has none): their writes are recorded by the
    sign-in library's signals. The e-mail address is where password resets go, so each change of it is a row."""
    from allauth.account.models import EmailAddress

    EmailAddress.objects.create(user=world.alice, email="alice@example.org", primary=True, verified=True)
    client.defaults["REMOTE_ADDR"] = ADDRESS
    client.force_login(world.alice)
    mark = AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    assert client.post("/accounts/email/", {"action_add": "", "email": "alice@lab.example.org"}).status_code == 302
    added = EmailAddress.objects.get(email="alice@lab.example.org")
    EmailAddress.objects.filter(pk=added.pk).update(verified=True)  # as the link in its e-mail would
    assert client.post("/accounts/email/", {"action_primary": "", "email": added.email}).status_code == 302
    assert client.post("/accounts/email/", {"action_remove": "", "email": "alice@example.org"}).status_code == 302
    rows = [(e.action, e.actor_id, str(e.ip), e.data.get("email") or e.data.get("after"))
            for e in AuditEntry.objects.filter(pk__gt=mark, action__startswith="auth.email").order_by("pk")]
    assert rows == [("auth.email_add", world.alice.pk, ADDRESS, "alice@lab.example.org"),
                    ("auth.email_primary", world.alice.pk, ADDRESS, "alice@lab.example.org"),
                    ("auth.email_remove", world.alice.pk, ADDRESS, "alice@example.org")], rows
