"""A researcher submits a shell script on the local cluster and watches it through the real worker."""

from __future__ import annotations

import pytest
import requests
from django.urls import reverse

from portal.jobs.models import Job, JobOutput, JobState
from tests.conftest import wait_for
from tests.jobs.outputs_checks import AWKWARD_OUTPUTS, check_awkward_outputs

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _submit(client, site, script: str, name: str = "hello", walltime: str = "00:10:00"):
    client.force_login(site.alice)
    return client.post(
        reverse("job-new"),
        {
            "project": site.project.pk,
            "name": name,
            "hardware": site.hardware.pk,
            "nodes": 1,
            "walltime": walltime,
            "launcher": "script",
            "script": script,
        },
    )


def _state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def test_a_submitted_script_runs_to_completed_with_its_output_captured(client, local_site, live_worker):
    response = _submit(client, local_site, "echo hello from kakehashi\necho to-stderr >&2\nsleep 2\n")
    assert response.status_code == 302
    job = Job.objects.get()
    assert response["Location"] == reverse("job-detail", args=[job.pk])

    seen = set()

    def finished():
        state = _state(job.pk)
        seen.add(state)
        return state in {JobState.COMPLETED, JobState.FAILED}

    wait_for(finished, timeout=60, interval=0.1, message="the job to finish")
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, job.state_reason
    assert job.exit_code == 0
    assert JobState.RUNNING in seen
    history = list(job.events.values_list("to_state", flat=True))
    assert history == ["queued", "submitting", "pending", "running", "completed"]
    out = wait_for(lambda: JobOutput.objects.filter(job=job, stream="stdout", complete=True).first(), message="stdout")
    assert b"hello from kakehashi" in bytes(out.data)
    # The final fetch stores stdout and stderr one after the other: wait for stderr's own "complete".
    err = wait_for(lambda: JobOutput.objects.filter(job=job, stream="stderr", complete=True).first(), message="stderr")
    assert bytes(err.data).strip() == b"to-stderr"
    # The page shows it without anyone running anything by hand.
    page = client.get(reverse("job-log", args=[job.pk, "stdout"]))
    assert "hello from kakehashi" in page.content.decode()


def test_a_failing_script_ends_failed_with_its_exit_code(client, local_site, live_worker):
    _submit(client, local_site, "echo about to fail\nexit 3\n", name="fails")
    job = Job.objects.get()
    wait_for(lambda: _state(job.pk) in {JobState.COMPLETED, JobState.FAILED}, timeout=60, message="the job to end")
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.exit_code == 3
    status = client.get(reverse("job-status", args=[job.pk])).content.decode()
    assert 'id="job-exit">exit code 3<' in status


def test_cancelling_a_running_job_stops_it_and_says_cancelled(client, local_site, live_worker):
    _submit(client, local_site, "echo started\nsleep 120\necho never-printed\n", name="long")
    job = Job.objects.get()
    wait_for(lambda: _state(job.pk) == JobState.RUNNING, timeout=60, message="the job to run")
    response = client.post(reverse("job-cancel", args=[job.pk]))
    assert response.status_code == 302
    wait_for(lambda: _state(job.pk) == JobState.CANCELLED, timeout=60, message="the job to be cancelled")
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    assert job.ended_at is not None and (job.ended_at - job.started_at).total_seconds() < 60
    out = wait_for(lambda: JobOutput.objects.filter(job=job, stream="stdout", complete=True).first(), message="stdout")
    assert b"started" in bytes(out.data) and b"never-printed" not in bytes(out.data)


def test_files_written_to_outputs_come_back_and_only_members_download_them(client, local_site, live_worker, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "input.txt").write_text("from the working directory\n")
    client.force_login(local_site.alice)
    client.post(reverse("job-new"), {
        "project": local_site.project.pk, "name": "outputs", "hardware": local_site.hardware.pk, "nodes": 1,
        "walltime": "00:10:00", "launcher": "script", "working_directory": str(workdir),
        "script": 'pwd\ncat input.txt\necho 42 > "$KAKEHASHI_OUTPUT_DIR/result.txt"\n'
                  'mkdir -p "$KAKEHASHI_OUTPUT_DIR/plots"\necho png > "$KAKEHASHI_OUTPUT_DIR/plots/loss.png"\n',
    })
    job = Job.objects.get()
    wait_for(lambda: job.artifacts.count() == 2, timeout=60, message="the outputs to be collected")
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    out = bytes(JobOutput.objects.get(job=job, stream="stdout").data).decode()
    assert f"{workdir}\nfrom the working directory\n" in out
    result = job.artifacts.get(path="result.txt")
    assert result.size == 3 and job.artifacts.filter(path="plots/loss.png").exists()
    download = client.get(reverse("job-artifact", args=[job.pk, result.pk]))
    # From the object store itself, by a presigned GET.
    assert download.status_code == 302 and requests.get(download["Location"], timeout=30).content == b"42\n"
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "plots/loss.png" in page
    client.force_login(local_site.mallory)
    assert client.get(reverse("job-artifact", args=[job.pk, result.pk])).status_code == 404


def test_outputs_named_with_spaces_or_in_japanese_come_back_and_a_newline_or_a_link_is_said_not_collected(
        client, local_site, live_worker):
    _submit(client, local_site, AWKWARD_OUTPUTS, name="awkward-names")
    job = Job.objects.get()
    wait_for(lambda: _state(job.pk) in {JobState.COMPLETED, JobState.FAILED}, timeout=60, message="the job")
    check_awkward_outputs(client, job)


def test_a_working_directory_outside_the_rules_is_refused(client, local_site):
    client.force_login(local_site.alice)
    response = client.post(reverse("job-new"), {
        "project": local_site.project.pk, "name": "bad-dir", "hardware": local_site.hardware.pk, "nodes": 1,
        "walltime": "00:10:00", "launcher": "script", "working_directory": "../../etc; rm -rf ~", "script": "pwd",
    })
    assert "working directory" in response.content.decode() and Job.objects.count() == 0


def test_a_notebook_runs_on_the_local_backend_too(local_site, live_worker):
    from django.core.files.storage import default_storage

    from portal.jobs.actions.submit import submit_job
    from portal.jobs.actions.validation import JobRequest
    from tests.jobs.test_notebook_jobs import _notebook

    job = submit_job(local_site.alice, JobRequest(
        project=local_site.project, name="local-notebook", notebook=_notebook(), parameters={"lr": 2, "epochs": 3},
        hardware=local_site.hardware, walltime="00:10:00")).job
    job = wait_for(lambda: Job.objects.filter(pk=job.pk, artifacts__path="notebook.ipynb").first(), timeout=120,
                   message="the executed notebook")
    assert job.state == JobState.COMPLETED, job.state_reason
    assert "result=6" in default_storage.open(job.artifacts.get(path="notebook.ipynb").stored_name).read().decode()


@pytest.mark.django_db(transaction=True)
def test_collecting_outputs_holds_no_transaction_or_row_lock_while_the_files_are_copied(local_site, object_store,
                                                                                      monkeypatch):
    """Thousands of files can take minutes to copy: meanwhile the job's row stays free for others and no
    connection sits idle in a transaction (which a site's idle_in_transaction_session_timeout would cut); the
    record is written after, once."""
    import shlex

    import psycopg
    from django.db import connection

    from portal.clusters.connect import backend_for
    from portal.jobs import outputs
    from portal.jobs.actions.submit import prepare_job
    from portal.jobs.actions.validation import JobRequest

    # A job that ended with three files in outputs/ (recorded as such, so no worker of another test touches it).
    job = prepare_job(local_site.alice, JobRequest(
        project=local_site.project, name="many-outputs", hardware=local_site.hardware, walltime="00:05:00",
        script="true")).job
    job.state, job.scheduler_id = JobState.COMPLETED, "1"
    job.save()
    outputs_dir = shlex.quote(f"{job.remote_dir}/outputs")
    backend_for(local_site.cluster, None).run(
        f'mkdir -p {outputs_dir} && for i in 1 2 3; do echo "$i" > {outputs_dir}/part-$i.txt; done')

    seen = []
    copy = outputs.stream_job_output

    def copying(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        # Someone else (a cancel, a tracker, an admin) locks the job's row while its files are being copied.
        with psycopg.connect(host="127.0.0.1", port=5432, user="postgres",
                             dbname=connection.settings_dict["NAME"]) as other:
            other.execute("SELECT id FROM jobs_job WHERE id = %s FOR UPDATE NOWAIT", [job.pk])
        return copy(*args, **kwargs)

    monkeypatch.setattr(outputs, "stream_job_output", copying)
    collected = outputs.collect_artifacts(job)
    assert sorted(a.path for a in collected) == ["part-1.txt", "part-2.txt", "part-3.txt"]
    assert seen == [False, False, False]
    # Recorded once: another collection (a log view's final fetch) gets the same three, copies nothing.
    seen.clear()
    assert sorted(a.path for a in outputs.collect_artifacts(Job.objects.get(pk=job.pk))) == [
        "part-1.txt", "part-2.txt", "part-3.txt"]
    assert seen == [] and job.artifacts.count() == 3
