"""Every hostile value (tests/security/hostile.py) through every field of the API and the job form: a clear
refusal or a safely quoted value every time, never a 5xx; a sample of accepted ones run on real Slurm and Grid
Engine arrive verbatim and run no command on the login node.

The API and form rounds use dry runs and previews (render and estimate, nothing recorded), which go through the
same validation and rendering as a real submit.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from django.urls import reverse

from tests.api.conftest import notebook
from tests.security.hostile import CANARY, NOTEBOOKS, SAMPLE, STRINGS, VALUES

pytestmark = pytest.mark.django_db

HARDWARE = "slurm-a100x1"
DIRECTIVE = re.compile(r"#(SBATCH|PBS|\$|BSUB)\b")
# What a generated directive may hold: what the backends' own narrow patterns allow, nothing typed freely.
SAFE_DIRECTIVE = re.compile(r"#(SBATCH|PBS|\$|BSUB) [A-Za-z0-9_.:=,/+%@ -]*")
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def body(**fields) -> dict:
    base = {"project": "vision", "name": "hostile", "hardware": HARDWARE, "nodes": 1, "walltime": "00:10:00",
            "script": 'printf %s "$HOSTILE"\n', "dry_run": True}
    base.update(fields)
    return base


def _post(client, token, path: str, data) -> object:
    # ensure_ascii: the JSON text spells every character as an escape, exactly as many clients send it.
    return client.post(path, json.dumps(data), content_type="application/json",
                       headers={"Authorization": f"Bearer {token}"})


def _check_answer(response, label: str) -> dict | None:
    """A clear JSON answer: the refusal's message, or the dry run (returned) whose script is checked."""
    assert response.status_code < 500, f"{label}: {response.status_code} {response.content[:300]!r}"
    assert response["Content-Type"].startswith("application/json"), f"{label}: {response['Content-Type']}"
    answer = response.json()
    if response.status_code >= 400:
        assert isinstance(answer.get("detail"), str) and answer["detail"].strip(), f"{label}: {answer}"
        return None
    assert response.status_code == 200, f"{label}: {response.status_code}"
    return answer


def _check_script(script: str, label: str, extra: int = 0) -> None:
    """Directives only as generated (narrow characters, one per line), and no control character anywhere."""
    assert not CONTROLS.search(script), f"{label}: a control character reached the script"
    for line in script.splitlines():
        if DIRECTIVE.match(line.lstrip()):
            assert SAFE_DIRECTIVE.fullmatch(line), f"{label}: a directive carries typed text: {line!r}"
    count = script.count("\n#SBATCH")
    assert count == BASELINE_DIRECTIVES[0] + extra, f"{label}: the number of directives changed"


BASELINE_DIRECTIVES = [0]


def _arrives_verbatim(script: str, name: str, value: str, label: str) -> None:
    """The export line of `name`, run by a real bash (here, not on a login node), sets exactly `value`."""
    lines = [line.strip() for line in script.splitlines() if re.match(rf"\s*(\d+\) )?export {name}=", line)]
    assert lines, f"{label}: no export of {name}"
    line = re.sub(r"^\d+\) ", "", lines[0]).removesuffix(";;").strip()
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", f'{line}\nprintf %s "${name}"'],
                         capture_output=True, cwd="/tmp", env={"PATH": os.environ["PATH"]}, timeout=10)
    assert out.stdout.decode("utf-8", "surrogateescape") == value, f"{label}: arrived as {out.stdout[:200]!r}"


@pytest.fixture
def api(client, hpc_site, issue):
    token = issue(hpc_site.alice, "read", "submit")
    baseline = _post(client, token, "/api/v1/jobs/", body())
    assert baseline.status_code == 200, baseline.content
    BASELINE_DIRECTIVES[0] = baseline.json()["script"].count("\n#SBATCH")
    assert BASELINE_DIRECTIVES[0] >= 3
    return lambda path, data: _post(client, token, path, data)


def _safe_name(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,62}", value) is not None


# Every field of a job's body, and where the hostile value goes in it. Free text gets the whole corpus.
FULL = {"working_directory", "env value", "script parameter value", "sweep value"}
JOB_FIELDS = {
    "name": lambda v: body(name=v),
    "launcher": lambda v: body(launcher=v),
    "working_directory": lambda v: body(working_directory=v),
    "walltime": lambda v: body(walltime=v),
    "nodes": lambda v: body(nodes=v),
    "procs_per_node": lambda v: body(procs_per_node=v),
    "template": lambda v: body(template=v),
    "hardware": lambda v: body(hardware=v),
    "software": lambda v: body(software=v),
    "project": lambda v: body(project=v),
    "script": lambda v: body(script=v),
    "env value": lambda v: body(env={"HOSTILE": v}),
    "env name": lambda v: body(env={v: "x"} if isinstance(v, str) else v),
    "notebook parameter value": lambda v: body(script="", notebook=notebook(), parameters={"HOSTILE": v}),
    "notebook parameter name": lambda v: body(script="", notebook=notebook(), parameters={v: 1} if isinstance(v, str) else v),
    "script parameter value": lambda v: body(parameters={"HOSTILE": v}),
    "dry_run": lambda v: {**body(), "dry_run": v, "name": "x" if v not in (False, None, "", 0, "0") else "hostile"},
}


@pytest.mark.long
@pytest.mark.cluster
@pytest.mark.parametrize("field", list(JOB_FIELDS))
def test_every_hostile_value_in_a_job_field_is_refused_clearly_or_arrives_quoted(api, field):
    make = JOB_FIELDS[field]
    accepted = 0
    for value in VALUES if field in FULL else SAMPLE:
        label = f"{field}={value!r:.80}"
        data = make(value)
        if field == "dry_run" and data["dry_run"] not in (True, "true", 1, "1", "yes", "on", "True"):
            data["dry_run"], data["project"] = value, "no-such-project"  # never records a job: 404 if accepted
        answer = _check_answer(api("/api/v1/jobs/", data), label)
        if answer is None:
            continue
        accepted += 1
        _check_script(answer["script"], label)
        if field == "name":
            # Surrounding white space is trimmed (DRF's CharField); what remains must be a safe name.
            assert _safe_name(answer["name"]) and answer["name"] == value.strip(), f"{label}: accepted as a job name"
        if field in ("env value", "script parameter value") and isinstance(value, str):
            _arrives_verbatim(answer["script"], "HOSTILE", value, label)
    if field in ("env value", "script parameter value"):
        assert accepted > 100, f"{field}: only {accepted} values accepted; the test would prove little"


@pytest.mark.long
@pytest.mark.cluster
@pytest.mark.parametrize("where", ["sweep value", "sweep name", "sweep values", "array"])
def test_every_hostile_value_in_a_sweep_is_refused_clearly_or_arrives_quoted(api, where):
    accepted = 0
    for value in VALUES if where in FULL else SAMPLE:
        label = f"{where}={value!r:.80}"
        sweep = {"sweep value": {"HOSTILE": [value, "plain"]}, "sweep name": {value: [1, 2]} if isinstance(value, str) else value,
                 "sweep values": {"HOSTILE": value}, "array": {"HOSTILE": [1, 2]}}[where]
        data = body(sweep=sweep, **({"array": value} if where == "array" else {}))
        answer = _check_answer(api("/api/v1/sweeps/", data), label)
        if answer is None:
            continue
        accepted += 1
        _check_script(answer["script"], label, extra=1 if answer["array"] else 0)  # --array=1-N
        if where == "sweep value" and isinstance(value, str):
            _arrives_verbatim(answer["script"], "HOSTILE", value, label)
    if where == "sweep value":
        assert accepted > 100


@pytest.mark.cluster
def test_malformed_notebooks_are_refused_with_a_message(api):
    for value in NOTEBOOKS:
        label = f"notebook={value!r:.80}"
        assert _check_answer(api("/api/v1/jobs/", body(script="", notebook=value)), label) is None, label


def test_a_lone_surrogate_in_parameters_a_sweep_or_the_launcher_is_a_clear_400(client, local_site, issue):
    """The JSON escape "\\ud800" decodes to a string no UTF-8 text or database can hold; it used to be a 500
    HTML page (the error message quoting it could not be written out)."""
    token = issue(local_site.alice, "read", "submit")
    job = {"project": "vision", "name": "s", "hardware": "local-cpu", "walltime": "00:10:00", "script": "true\n",
           "dry_run": True}
    cases = [
        ("/api/v1/jobs/", {**job, "script": "", "notebook": notebook(), "parameters": {"lr": "\ud800"}}, "parameters.lr"),
        ("/api/v1/jobs/", {**job, "launcher": "\ud800"}, "launcher"),
        ("/api/v1/jobs/", {**job, "env": {"A": "x\udfff"}}, "env.A"),
        ("/api/v1/jobs/", {**job, "script": "", "notebook": json.dumps(notebook("print('\ud800')"))}, "notebook"),
        ("/api/v1/sweeps/", {**job, "sweep": {"LR": [0.1, "\ud800"]}}, "sweep.LR[1]"),
        ("/api/v1/sweeps/", {**job, "sweep": {"\udc00": [1]}}, "sweep"),
        ("/api/v1/jobs/", {**job, "parameters": {"A": "a\u0000b"}}, "parameters.A"),
    ]
    for path, data, field in cases:
        raw = json.dumps(data)  # ensure_ascii: the surrogate travels as the six characters \ud800
        response = client.post(path, raw, content_type="application/json", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 400, (field, response.status_code, response.content[:300])
        answer = response.json()
        assert answer["field"] == field and answer["code"] in ("invalid_text", "invalid"), answer
        assert "surrogate" in answer["detail"] or "NUL" in answer["detail"], answer


# ------------------------------------------------------------------------------------------ the job form


FORM_FIELDS = ["name", "walltime", "nodes", "launcher", "procs_per_node", "template", "sweep", "env",
               "working_directory", "script", "edited_script", "draft", "project", "hardware", "software"]


@pytest.mark.long
@pytest.mark.cluster
@pytest.mark.parametrize("field", FORM_FIELDS)
def test_every_hostile_value_in_a_job_form_field_gets_a_message_or_a_safe_preview(client, hpc_site, field):
    from portal.catalog.models import HardwareType

    client.force_login(hpc_site.alice)
    hardware = HardwareType.objects.get(slug=HARDWARE)
    form = {"project": hpc_site.project.pk, "name": "hostile", "hardware": hardware.pk, "nodes": 1,
            "walltime": "00:10:00", "launcher": "script", "script": 'printf %s "$HOSTILE"\n'}
    baseline = client.post(reverse("job-preview"), form)
    assert baseline.status_code == 200 and baseline.context["script"]
    BASELINE_DIRECTIVES[0] = baseline.context["script"].count("\n#SBATCH")
    for value in STRINGS if field in ("env", "sweep") else SAMPLE:
        if not isinstance(value, str):
            continue
        if "\x00" in value and field not in ("script", "env", "name"):
            continue  # a browser cannot send NUL in a form field; the three fields above prove the refusal
        label = f"form {field}={value!r:.80}"
        sent = {**form, field: value}
        if field == "env":
            sent[field] = f"HOSTILE={value}"
        response = client.post(reverse("job-preview"), sent)
        assert response.status_code < 500, label
        script = response.context.get("script") if response.context else None
        if script:
            _check_script(script, label)
            if field == "env" and "\r" not in value and not any(b in value for b in "\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"):
                _arrives_verbatim(script, "HOSTILE", value, label)


# ----------------------------------------------------------------------------------- files and uploads


def _check_stored_path(path: str, label: str) -> None:
    """What portal/storage/actions.py promises: relative, no '..', no shell metacharacter, quote, backslash or
    control character (spaces and a few marks such as '#', '~' are allowed in names)."""
    assert ".." not in path.split("/") and not path.startswith(("/", "-")), label
    assert not CONTROLS.search(path) and not re.search(r"[\t\n\r\f\v$`;|&<>\\'\"*?!]", path), label


@pytest.mark.parametrize("field", ["path", "size", "sha256", "overwrite"])
def test_every_hostile_upload_field_is_refused_clearly_or_names_a_safe_path(client, local_site, issue, field):
    token = issue(local_site.alice, "read", "submit")
    for value in VALUES if field == "path" else SAMPLE:
        label = f"upload {field}={value!r:.80}"
        data = {"path": "data/hostile.bin", "size": 10, field: value}
        response = _post(client, token, "/api/v1/projects/vision/uploads/", data)
        answer = _check_answer(response, label) if response.status_code != 201 else response.json()
        if answer is None:
            continue
        path = answer["path"]
        _check_stored_path(path, label)
        client.delete(f"/api/v1/projects/vision/uploads/{answer['id']}/", headers={"Authorization": f"Bearer {token}"})


def test_every_hostile_file_name_uploaded_through_the_portal_is_refused_or_kept_safe(client, local_site, issue,
                                                                                    filesystem_storage):
    from django.core.exceptions import SuspiciousFileOperation
    from django.core.files.uploadedfile import SimpleUploadedFile

    token = issue(local_site.alice, "read", "submit")
    for value in SAMPLE:
        if not isinstance(value, str) or len(value) > 300 or "\x00" in value:
            continue  # multipart file names: no NUL, and the path test above covers the long ones
        label = f"file name {value!r:.80}"
        try:
            upload = SimpleUploadedFile(value or "x", b"data")
        except SuspiciousFileOperation:  # Django's own client will not even send a file named like this
            upload = SimpleUploadedFile("upload.bin", b"data")
        response = client.post("/api/v1/projects/vision/files/", {"file": upload, "path": value},
                               headers={"Authorization": f"Bearer {token}"})
        assert response.status_code < 500, f"{label}: {response.status_code} {response.content[:200]!r}"
        assert response["Content-Type"].startswith("application/json"), label
        if response.status_code == 201:
            _check_stored_path(response.json()["path"], label)
    for stored in Path(filesystem_storage).rglob("*"):
        assert filesystem_storage in stored.parents  # nothing was written outside the portal's own directory


# ------------------------------------------------------------------------------- on the real schedulers

# Accepted hostile values (each would run `touch CANARY` if it ever reached a shell unquoted), sent as a sweep
# (one array, each element its own value) and as one job's environment variable.
ON_SCHEDULER = [f"$(touch {CANARY})", f"`touch {CANARY}`", f"'; touch {CANARY}; '", f'"; touch {CANARY} #',
                f"a\\ b|touch {CANARY}&&$HOME*"]


@pytest.mark.cluster
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("hardware", ["slurm-a100x1", "sge-gpu"])
def test_accepted_hostile_values_arrive_verbatim_on_a_real_scheduler_and_run_nothing(client, hpc_site, issue,
                                                                                   live_worker, hardware):
    from portal.jobs.models import Job, JobState
    from tests.conftest import ended_job, job_output, wait_for

    Path(CANARY).unlink(missing_ok=True)
    token = issue(hpc_site.alice, "read", "submit")
    script = 'echo "VALUE=$(printf %s "$HOSTILE" | base64 -w0)"\n'
    sweep = _post(client, token, "/api/v1/sweeps/", body(hardware=hardware, script=script, dry_run=False,
                                                         sweep={"HOSTILE": ON_SCHEDULER}))
    assert sweep.status_code == 201, sweep.content
    single = _post(client, token, "/api/v1/jobs/", body(hardware=hardware, script=script, dry_run=False,
                                                        name="hostile-env", env={"HOSTILE": ON_SCHEDULER[0]}))
    assert single.status_code == 201, single.content
    expected = {job["id"]: value for job, value in zip(sweep.json()["jobs"], ON_SCHEDULER, strict=True)}
    expected[single.json()["id"]] = ON_SCHEDULER[0]
    for job_id, value in expected.items():
        job = wait_for(lambda job_id=job_id: ended_job(job_id), timeout=180, message=f"job {job_id} to end")
        assert job.state == JobState.COMPLETED, (job.state, job.state_reason)
        encoded = base64.b64encode(value.encode()).decode()
        assert f"VALUE={encoded}\n" in job_output(Job.objects.get(pk=job_id), "stdout"), value
    assert not Path(CANARY).exists(), "a hostile value ran a command"


def test_a_path_is_a_file_or_a_folder_never_both(client, local_site, issue):
    """Found by the corpus: "ok/etc/passwd" after a file "ok" was a 500 on the portal's disk."""
    token = issue(local_site.alice, "read", "submit")
    folder_upload = _post(client, token, "/api/v1/projects/vision/uploads/", {"path": "a/b.bin", "size": 10})
    assert folder_upload.status_code == 201, folder_upload.content
    file_a = _post(client, token, "/api/v1/projects/vision/uploads/", {"path": "a", "size": 0})  # complete at once
    assert file_a.status_code == 201, file_a.content
    refused = _post(client, token, "/api/v1/projects/vision/uploads/", {"path": "a/c.bin", "size": 10})
    assert refused.status_code == 409 and refused.json()["code"] == "path_is_a_file", refused.content
    late = _post(client, token, f"/api/v1/projects/vision/uploads/{folder_upload.json()['id']}/complete/",
                 {"sha256": "0" * 64})
    assert late.status_code == 409 and late.json()["code"] == "path_is_a_file", late.content
    _post(client, token, "/api/v1/projects/vision/uploads/", {"path": "d/e.bin", "size": 0})
    refused = _post(client, token, "/api/v1/projects/vision/uploads/", {"path": "d", "size": 0})
    assert refused.status_code == 409 and refused.json()["code"] == "path_is_a_folder", refused.content
