"""Hostile values through every field the portal has, found from the portal itself, so a field added tomorrow is
walked the day it is added: every query parameter and request-body field (nested ones too) of every operation in
the OpenAPI schema, and every field of every form the pages show a signed-in project owner. Each answer is a clear
refusal or a success, never a 5xx; the API's refusals are JSON with a message.

The values are the corpus's sample (tests/security/hostile.py: every family of attack, every wrong JSON type). The
fields where a hostile value could reach a login node (the job's and the sweep's) get the whole corpus and a run on
real schedulers in test_hostile_input.py; this walk is the net under everything else.
"""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.security.hostile import CANARY, SAMPLE

pytestmark = pytest.mark.django_db

QUERY_VALUES = [v if isinstance(v, str) else json.dumps(v) for v in SAMPLE]


def _schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def _operations() -> list[tuple[str, str]]:
    return [(method.upper(), path) for path, ops in _schema()["paths"].items() for method in ops]


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    if "allOf" in node and len(node["allOf"]) == 1:
        return _resolve(schema, node["allOf"][0])
    return node


def _field_paths(schema: dict, node: dict, prefix: tuple = ()) -> list[tuple]:
    """Every field of a request body, as a path of keys and list indexes: nested objects and the first item of a
    list of objects too (a part's number inside `parts`)."""
    node = _resolve(schema, node)
    paths = []
    for name, prop in node.get("properties", {}).items():
        if prop.get("readOnly"):
            continue
        paths.append((*prefix, name))
        prop = _resolve(schema, prop)
        if prop.get("type") == "object" and prop.get("properties"):
            paths += _field_paths(schema, prop, (*prefix, name))
        items = _resolve(schema, prop.get("items", {})) if prop.get("type") == "array" else {}
        if items.get("properties"):
            paths += _field_paths(schema, items, (*prefix, name, 0))
    return paths


def _with(body: dict, path: tuple, value: object) -> dict:
    body = copy.deepcopy(body)
    node = body
    for key in path[:-1]:
        if isinstance(key, int):
            while len(node) <= key:
                node.append({})
        elif key not in node or not isinstance(node[key], dict | list):
            node[key] = [] if isinstance(path[path.index(key) + 1], int) else {}
        node = node[key]
    if isinstance(path[-1], int):
        while len(node) <= path[-1]:
            node.append(None)
    node[path[-1]] = value
    return body


class _World:
    """Project vision of local_site with one of everything an operation can name, and alice's token."""

    def __init__(self, client, site, issue) -> None:
        from portal.jobs.actions.submit import submit_job
        from portal.jobs.actions.sweeps import submit_sweep
        from portal.jobs.actions.validation import JobRequest
        from portal.jobs.models import JobArtifact
        from portal.storage.models import Dataset, DatasetKind, StoredFile

        self.client, self.site = client, site
        self.token = issue(site.alice, "read", "submit", "admin")
        request = JobRequest(project=site.project, name="walked", script="echo walked",
                                     hardware=site.hardware, walltime="00:05:00")
        self.job = submit_job(site.alice, request).job
        self.sweep = submit_sweep(site.alice, request, {"LR": ["0.1", "0.01"]}).group
        self.artifact = JobArtifact.objects.create(job=self.job, path="out.txt", size=1)
        self.file = StoredFile.objects.create(project=site.project, path="data/walk.bin", size=1, sha256="0" * 64,
                                              storage_name="projects/vision/data/walk.bin", uploaded_by=site.alice)
        Dataset.objects.create(project=site.project, name="walked", kind=DatasetKind.FILE, stored_file=self.file,
                               created_by=site.alice)
        # One no dataset names, for the baselines that move or delete a file.
        StoredFile.objects.create(project=site.project, path="data/spare.bin", size=1, sha256="0" * 64,
                                  storage_name="projects/vision/data/spare.bin", uploaded_by=site.alice)

    def upload_id(self) -> str:
        answer = self.call("POST", "/api/v1/projects/vision/uploads/", {"path": "data/walk-upload.bin", "size": 10})
        assert answer.status_code in (200, 201), answer.content  # 200: the same path's upload, resumed
        return answer.json()["id"]

    def batch_upload_id(self) -> str:
        """An open upload of a batch (never sent): completing it answers that its file is missing, not an error."""
        answer = self.call("POST", "/api/v1/projects/vision/uploads/batch/", BATCH)
        assert answer.status_code == 201, answer.content
        return answer.json()["uploads"][0]["id"]

    def url(self, path: str) -> str:
        ids = {"{slug}": "vision", "{name}": "walked", "{artifact_id}": str(self.artifact.pk)}
        for key, value in ids.items():
            path = path.replace(key, value)
        if "{upload_id}" in path:
            path = path.replace("{upload_id}", self.upload_id())
        if "{id}" in path:
            named = self.sweep.pk if "/sweeps/" in path else self.file.pk if "/files/" in path else self.job.pk
            path = path.replace("{id}", str(named))
        return path

    def call(self, method: str, path: str, body: dict | None = None, query: dict | None = None):
        headers = {"Authorization": f"Bearer {self.token}"}
        if method == "GET":
            return self.client.get(path, query or {}, headers=headers)
        return self.client.generic(method, path, json.dumps(body or {}), content_type="application/json",
                                   headers=headers)


BATCH = {"files": [{"path": "data/walk-batch.bin", "size": 10, "sha256": "0" * 64}]}
# A body each operation accepts, so that a hostile value in one field meets the others valid; dry runs, so nothing
# is queued. Operations not named take an empty body; a callable makes it from the walk's world.
def _session_baseline(world) -> dict:
    """A dry run of a session on the local cluster, in software that provides JupyterLab."""
    from portal.catalog.models import Software

    software, _ = Software.objects.get_or_create(slug="walk-lab", defaults={
        "name": "Walk Lab", "kind": Software.Kind.MODULES, "provides": ["jupyterlab"]})
    software.clusters.add(world.site.cluster)
    return {"project": "vision", "hardware": "local-cpu", "software": "walk-lab", "walltime": "00:05:00",
            "dry_run": True}


BASELINES = {
    "/api/v1/sessions/": _session_baseline,
    "/api/v1/sessions/estimate/": lambda world: {k: v for k, v in _session_baseline(world).items() if k != "dry_run"},
    "/api/v1/jobs/": {"project": "vision", "name": "walk", "hardware": "local-cpu", "walltime": "00:05:00",
                      "script": "echo walk", "dry_run": True},
    "/api/v1/jobs/batch/": {"jobs": [{"project": "vision", "name": "walk-batch", "hardware": "local-cpu",
                                      "walltime": "00:05:00", "script": "echo walk"}]},
    "/api/v1/sweeps/": {"project": "vision", "name": "walk", "hardware": "local-cpu", "walltime": "00:05:00",
                        "script": "echo walk", "dry_run": True, "sweep": {"LR": ["0.1"]}},
    "/api/v1/projects/{slug}/datasets/": {"name": "walk-set", "path": "data/walk.bin"},
    "/api/v1/projects/{slug}/uploads/": {"path": "data/walk-new.bin", "size": 10},
    "/api/v1/projects/{slug}/files/move/": {"source": "data/spare.bin", "destination": "data/spare-moved.bin"},
    "/api/v1/projects/{slug}/files/delete/": {"path": "data/spare.bin"},
    "/api/v1/projects/{slug}/folders/": {"path": "walk-folder"},
    "/api/v1/projects/{slug}/datasets/{name}/": {"name": "walked-renamed"},
    "/api/v1/projects/{slug}/uploads/{upload_id}/parts/": {"parts": [{"number": 1}]},
    "/api/v1/projects/{slug}/uploads/{upload_id}/complete/": {"sha256": "0" * 64},
    "/api/v1/projects/{slug}/uploads/batch/": BATCH,
    "/api/v1/projects/{slug}/uploads/batch/complete/": lambda world: {"ids": [world.batch_upload_id()]},
}
def _kept(world) -> dict:
    """Keep needs a running job: the walk's job, as if the scheduler ran it."""
    from portal.jobs.models import Job, JobState

    Job.objects.filter(pk=world.job.pk).update(state=JobState.RUNNING, scheduler_id="4242")
    return {"hours": 1}


BASELINES["/api/v1/jobs/{id}/keep/"] = _kept
QUERY_BASELINES = {"/api/v1/places/": {"project": "vision", "walltime": "01:00:00"}, "/api/v1/presets/": {"project": "vision"}}
# Covered elsewhere with the whole corpus: a multipart file upload's name (test_hostile_input.py).
NOT_JSON = {("POST", "/api/v1/projects/{slug}/files/")}
# Called by a session's server with its own hub token, never by a person's: hostile addresses and tokens are walked in
# tests/api/test_session_report.py.
NOT_A_PERSONS = {("POST", "/api/v1/sessions/report/")}


def _check(response, label: str) -> None:
    assert response.status_code < 500, f"{label}: {response.status_code} {response.content[:300]!r}"
    if response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), f"{label}: {response['Content-Type']}"
        detail = response.json().get("detail")
        assert isinstance(detail, str) and detail.strip(), f"{label}: {response.json()}"


@pytest.mark.parametrize(("method", "path"), [op for op in _operations() if op not in NOT_JSON | NOT_A_PERSONS])
def test_every_hostile_value_in_every_field_of_every_api_operation_gets_a_clear_answer(client, local_site, issue,
                                                                                       settings, method, path):
    settings.KAKEHASHI_API_RATE = "1000000/min"  # thousands of requests with one token: not what is tested here
    world = _World(client, local_site, issue)
    schema = _schema()
    operation = schema["paths"][path][method.lower()]
    queries = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    fields = _field_paths(schema, content["schema"]) if content else []
    baseline = BASELINES.get(path, {})
    baseline = baseline(world) if callable(baseline) else baseline
    if (queries or fields) and "{upload_id}" not in path:  # an upload can be completed or deleted once
        answer = world.call(method, world.url(path), baseline, query=QUERY_BASELINES.get(path))
        assert answer.status_code < 400, f"the baseline of {method} {path}: {answer.content[:300]!r}"
    for name in queries:
        for value in QUERY_VALUES:
            label = f"{method} {path} ?{name}={value!r:.60}"
            _check(world.call("GET", world.url(path), query={**QUERY_BASELINES.get(path, {}), name: value}), label)
    for field in fields:
        for value in SAMPLE:
            label = f"{method} {path} {'.'.join(map(str, field))}={value!r:.60}"
            _check(world.call(method, world.url(path), _with(baseline, field, value)), label)
    assert not Path(CANARY).exists()


# ------------------------------------------------------------------------------------------- the pages' forms


class _Forms(HTMLParser):
    """The forms of a page: method, action and each named field with the value the page gives it."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"method": (attrs.get("method") or "get").lower(), "action": attrs.get("action"),
                               "fields": {}})
        elif self.forms and tag in ("input", "textarea", "select") and attrs.get("name"):
            kind = (attrs.get("type") or "").lower()
            if kind in ("submit", "button", "file", "image", "reset"):
                return
            if kind in ("checkbox", "radio") and "checked" not in attrs:
                self.forms[-1]["fields"].setdefault(attrs["name"], None)
                return
            self.forms[-1]["fields"][attrs["name"]] = attrs.get("value", "")
            self._select = attrs["name"] if tag == "select" else None
        elif tag == "option" and self._select and self.forms:
            fields = self.forms[-1]["fields"]
            if not fields.get(self._select) or "selected" in attrs:
                fields[self._select] = attrs.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None


PAGES = ["/", "/projects/", "/projects/vision/", "/projects/vision/members/", "/projects/vision/clusters/",
         "/projects/vision/budget/", "/projects/vision/usage/", "/jobs/", "/jobs/{job}/", "/jobs/groups/{group}/",
         "/data/", "/notifications/", "/settings/notifications/", "/settings/clusters/", "/settings/tokens/",
         "/clusters/", "/usage/"]
# The job form's fields get the whole corpus, previewed and rendered, in test_hostile_input.py.
WALKED_ELSEWHERE = {"/jobs/new/", "/jobs/preview/"}


@pytest.mark.long
def test_every_hostile_value_in_every_field_of_every_form_a_researcher_is_shown_gets_a_page_not_an_error(
        client, local_site, issue, make_user):
    from portal.projects.models import Membership, Role

    world = _World(client, local_site, issue)
    Membership.objects.create(user=make_user("bob"), project=local_site.project, role=Role.MEMBER)
    client.force_login(local_site.alice)
    forms = []
    for page in PAGES:
        url = page.format(job=world.job.pk, group=world.sweep.pk)
        response = client.get(url)
        assert response.status_code == 200, f"{url}: {response.status_code}"
        parser = _Forms()
        parser.feed(response.content.decode())
        for form in parser.forms:
            action = form["action"] or url
            if action.startswith("/") and action not in WALKED_ELSEWHERE and form["fields"]:
                forms.append((url, action, form["method"], form["fields"]))
    assert len(forms) >= 10, forms  # the walk reaches the settings, members, budget and data forms
    walked = set()
    for url, action, method, fields in forms:
        for name in fields:
            if name == "csrfmiddlewaretoken" or (action, method, name) in walked:
                continue
            walked.add((action, method, name))
            for value in QUERY_VALUES:
                data = {k: v for k, v in fields.items() if v is not None and k != "csrfmiddlewaretoken"}
                data[name] = value
                label = f"{method.upper()} {action} (on {url}) {name}={value!r:.60}"
                response = client.post(action, data) if method == "post" else client.get(action, data)
                assert response.status_code < 500, f"{label}: {response.status_code}"
                assert response.status_code != 403 or b"CSRF" not in response.content, label
                # A person reads a saved form's message on the page it leads to; the walk does not follow, so the
                # messages would pile up (thousands, moved into the session) and be re-encoded on every request.
                client.cookies.pop("messages", None)
    assert len(walked) >= 20, sorted(walked)
    assert not Path(CANARY).exists()
