"""Cloud jobs in the portal: set up a site, price and preview a job, run it with its data, and leave nothing running.

AWS's APIs are a moto server and the object store a real S3 server (SeaweedFS), both started by the tests;
moto's Batch ends a job as it is submitted, so a job that must wait or run is held in that state on the server
(tests/moto_aws.py), and the container's command runs as a process on this host (no container runtime here).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from botocore.stub import Stubber
from django.conf import settings as django_settings
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from portal.audit.models import AuditEntry
from portal.budgets.models import LedgerEntry
from portal.catalog.models import CloudPrice, HardwareType
from portal.cloud import reconciler as cloud
from portal.clusters.connect import backend_for
from portal.jobs import outputs, tracking
from portal.jobs.actions.cancel import cancel_on_scheduler
from portal.jobs.actions.dispatch import dispatch_job
from portal.jobs.actions.submit import prepare_job, submit_job
from portal.jobs.actions.sweeps import submit_sweep
from portal.jobs.actions.validation import BudgetRefused, JobRequest
from portal.jobs.models import Job, JobState
from portal.notifications.models import Notification
from portal.usage import enforcement
from tests.backends.test_batch_entrypoint import run_as_batch

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).resolve().parent.parent / "backends/fixtures/aws_batch"


def submitted(site, *, name="train", hardware=None, walltime="02:00:00", nodes=1, script="echo hello\n", **extra) -> Job:
    """Submitted as the form or the API would, and handed to AWS by the dispatch worker's own function."""
    request = JobRequest(project=site.project, name=name, script=script, hardware=hardware or site.p4d,
                         software=site.pytorch, walltime=walltime, nodes=nodes, **extra)
    job = submit_job(site.alice, request).job
    outcome = dispatch_job(job.pk)
    assert outcome.status == "submitted", outcome.detail
    return Job.objects.get(pk=job.pk)


def test_cloud_setup_creates_the_queues_once_and_teardown_removes_them(aws_site, capsys, moto_aws):
    call_command("cloud_setup", "aws")
    assert all(line.startswith(("unchanged", "created", "registered")) for line in capsys.readouterr().out.splitlines())
    call_command("cloud_setup", "aws")
    assert set(line.split()[0] for line in capsys.readouterr().out.splitlines()) == {"unchanged"}
    assert AuditEntry.objects.filter(action="cluster.cloud_setup").count() == 3
    call_command("cloud_setup", "aws", "--teardown")
    assert "deleted job queue kakehashi-aws-p4d-24xlarge-on-demand" in capsys.readouterr().out
    assert moto_aws.client("batch").describe_job_queues()["jobQueues"] == []


def test_cloud_setup_refuses_a_cluster_that_is_not_aws_batch(local_site):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not AWS Batch"):
        call_command("cloud_setup", "local")


def test_the_price_table_is_the_rate_of_cloud_hardware_and_an_admin_edit_changes_it(aws_site, admin_client):
    assert (aws_site.p4d.rate, aws_site.p4d.rate_unit) == (Decimal("32.7726"), "USD")
    price = CloudPrice.objects.get(instance_type="p4d.24xlarge")
    response = admin_client.post(reverse("admin:catalog_cloudprice_change", args=[price.pk]), {
        "region": price.region, "instance_type": price.instance_type, "market": "on-demand",
        "price_per_hour": "21.9580", "currency": "USD"})
    assert response.status_code == 302
    assert HardwareType.objects.get(pk=aws_site.p4d.pk).rate == Decimal("21.9580")
    entry = AuditEntry.objects.filter(action="hardware.price", target_id=str(aws_site.p4d.pk)).first()
    assert entry.actor.is_superuser and entry.data["after"] == "21.9580 USD"
    # The rate of cloud hardware is the table's: the hardware's own page shows it, and does not offer to edit it.
    page = admin_client.get(reverse("admin:catalog_hardwaretype_change", args=[aws_site.p4d.pk])).content.decode()
    assert "21.9580" in page and 'name="rate"' not in page
    local = admin_client.get(reverse("admin:catalog_hardwaretype_change", args=[aws_site.hardware.pk])).content.decode()
    assert 'name="rate"' in local


def test_a_researcher_moves_a_job_between_hpc_and_aws_by_changing_only_the_hardware(aws_site):
    request = dict(project=aws_site.project, name="same", script="python train.py\n", software=aws_site.pytorch,
                   walltime="01:00:00")
    on_local = prepare_job(aws_site.alice, JobRequest(**request, hardware=aws_site.hardware))
    on_aws = prepare_job(aws_site.alice, JobRequest(**request, hardware=aws_site.p4d))
    assert "apptainer exec" in on_local.script and "docker://nvcr.io/nvidia/pytorch:24.05-py3" in on_local.script
    assert '"image": "nvcr.io/nvidia/pytorch:24.05-py3"' in on_aws.script
    assert '"type": "GPU",' in on_aws.script and on_aws.job.submit_command.startswith("aws batch submit-job")
    # 1 node × 32.7726 USD/h × 1 h × 150 JPY/USD, in the project's budget unit
    assert (on_aws.estimate.amount, on_aws.estimate.unit) == (Decimal("4915.8900"), "JPY")


def test_a_cloud_job_is_refused_when_its_estimate_exceeds_a_strict_budget(aws_site):
    with pytest.raises(BudgetRefused, match="JPY"):
        submit_job(aws_site.alice, JobRequest(project=aws_site.project, name="big", script="echo\n",
                                                      hardware=aws_site.p4d, software=aws_site.pytorch,
                                                      nodes=2, walltime="10:00:00"))


def test_a_cloud_job_runs_and_the_portal_shows_its_log_and_outputs(aws_site, client, tmp_path):
    store = aws_site.store
    job = submitted(aws_site, script='echo "training on $(hostname)"\nmkdir -p outputs && echo 0.93 > outputs/accuracy.txt\n')
    assert job.state == JobState.PENDING and job.remote_dir == f"kakehashi-jobs/{job.scheduler_name}"
    backend = backend_for(job.cluster)
    done = run_as_batch(backend, job.scheduler_id, store, tmp_path / "container")  # what the container does on AWS
    assert done.returncode == 0, done.stderr.decode()

    calls = []
    backend.aws.batch.meta.events.register("before-call.batch.DescribeJobs", lambda **_: calls.append(1))
    assert tracking.track_cluster(job.cluster_id).finished == 1
    assert len(calls) == 1  # the queue's view and the final record come from one describe_jobs
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    outputs.fetch_output(job.pk)
    client.force_login(aws_site.alice)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "accuracy.txt" in page
    assert f"s3://{aws_site.aws.options['bucket']}/{job.remote_dir}/" in page  # where its files are
    log = client.get(reverse("job-log", args=[job.pk, "stdout"])).content.decode()
    assert "training on" in log
    ledger = dict(LedgerEntry.objects.filter(job=job).values_list("kind", "amount"))
    assert ledger["reserve"] == Decimal("9831.7800") and ledger["release"] == ledger["reserve"]
    assert "settle" in ledger


def test_a_dataset_uploaded_to_the_site_bucket_is_read_by_a_cloud_job_and_its_outputs_come_back(aws_site, client, tmp_path):
    """The whole way: a multipart upload by presigned URLs to the portal's bucket, a dataset attached to a job on
    AWS Batch, the dispatch, the container's entrypoint pulling it from the site bucket (not the cluster's) and
    checking it, the payload reading it, and its outputs on the job's page and in the API."""
    from portal.api.tokens import issue_token
    from tests.storage.test_datasets_reach_jobs import MiB, train_and_corpora

    blob = os.urandom(5 * MiB + 7)  # two parts in the store
    stored = train_and_corpora(aws_site.alice, aws_site.project, blob)
    script = ('sha256sum "$KAKEHASHI_DATA/train" "$KAKEHASHI_DATA/corpora/labels/a.txt"\n'
              'sha256sum < "$KAKEHASHI_DATA/train" | cut -d" " -f1 > "$KAKEHASHI_OUTPUT_DIR/train.sha256"\n')
    job = submitted(aws_site, name="reads-data", script=script, datasets=["train", "corpora"])
    assert job.state == JobState.PENDING
    backend = backend_for(job.cluster)
    definition = backend.aws.batch.describe_jobs(jobs=[job.scheduler_id])["jobs"][0]["container"]
    inputs = json.loads(next(e["value"] for e in definition["environment"] if e["name"] == "KAKEHASHI_INPUTS"))
    site_bucket = django_settings.KAKEHASHI_S3_BUCKET
    assert site_bucket != aws_site.aws.options["bucket"]  # the datasets stay where they were uploaded
    assert {(i["path"], i["bucket"], i["sha256"]) for i in inputs} >= {
        ("inputs/data/train", site_bucket, stored.sha256),
        ("inputs/data/corpora/labels/a.txt", site_bucket, hashlib.sha256(b"cat\n").hexdigest())}

    done = run_as_batch(backend, job.scheduler_id, aws_site.store, tmp_path / "container")
    assert done.returncode == 0, done.stderr.decode()
    digest = hashlib.sha256(blob).hexdigest()
    assert f"{digest}  " in done.stdout.decode()  # what the job printed (CloudWatch Logs on AWS)
    assert b"checked sha256" in done.stderr

    assert tracking.track_cluster(job.cluster_id).finished == 1
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, job.state_reason
    outputs.fetch_output(job.pk)
    client.force_login(aws_site.alice)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "train.sha256" in page and "train" in page and "corpora" in page
    log = client.get(reverse("job-log", args=[job.pk, "stdout"])).content.decode()
    assert digest in log and hashlib.sha256(b"cat\n").hexdigest() in log
    _, token = issue_token(aws_site.alice, name="cloud-data", scopes=["read"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = client.get(f"/api/v1/jobs/{job.pk}/", **auth).json()
    [listed] = [o for o in body["outputs"] if o["path"] == "train.sha256"]
    assert listed["size"] == 65
    download = client.get(listed["url"], **auth)
    content = b"".join(download.streaming_content) if download.status_code == 200 else requests.get(
        download["Location"], timeout=30).content
    assert content == f"{digest}\n".encode()


def test_a_cloud_job_whose_dataset_is_not_the_uploaded_bytes_fails_with_the_reason_and_runs_nothing(
        aws_site, client, moto_aws, tmp_path):
    from portal.storage import datasets
    from tests.storage.test_datasets_reach_jobs import upload

    liar = upload(aws_site.alice, aws_site.project, "d/liar.bin", b"real bytes")
    type(liar).objects.filter(pk=liar.pk).update(sha256=hashlib.sha256(b"claimed bytes").hexdigest())
    datasets.create_dataset(aws_site.alice, aws_site.project, name="liar", path="d/liar.bin")
    job = submitted(aws_site, name="never-runs", script='echo "the payload ran"\n', datasets=["liar"])
    backend = backend_for(job.cluster)
    done = run_as_batch(backend, job.scheduler_id, aws_site.store, tmp_path / "container")
    assert done.returncode == 65 and b"the payload ran" not in done.stdout
    moto_aws.end(job.scheduler_id, done.returncode)  # what AWS records once the container exited so

    assert tracking.track_cluster(job.cluster_id).finished == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.state_reason.startswith("input inputs/data/liar (s3://")
    assert "does not match its checksum" in job.state_reason and liar.storage_name in job.state_reason
    client.force_login(aws_site.alice)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "does not match its checksum" in page


def test_a_dataset_in_an_object_store_the_clouds_containers_cannot_read_fails_the_job_before_it_reaches_aws(
        aws_site, moto_aws):
    from portal.storage import datasets
    from tests.storage.test_datasets_reach_jobs import upload

    upload(aws_site.alice, aws_site.project, "d/on-prem.bin", b"kept at the centre")
    datasets.create_dataset(aws_site.alice, aws_site.project, name="on-prem", path="d/on-prem.bin")
    # The portal's store is the centre's SeaweedFS; this cluster's containers read AWS S3 itself.
    aws_site.aws.options = {k: v for k, v in aws_site.aws.options.items() if k != "s3_endpoint_url"}
    aws_site.aws.save()
    job = submit_job(aws_site.alice, JobRequest(project=aws_site.project, name="far", script="true\n",
                                                        hardware=aws_site.p4d, software=aws_site.pytorch,
                                                        datasets=["on-prem"])).job
    assert dispatch_job(job.pk).status == "refused"
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.scheduler_id == ""
    assert "dataset on-prem is in the portal's object store (http://127.0.0.1:" in job.state_reason
    assert "do not read (they read AWS S3)" in job.state_reason
    assert moto_aws.client("batch").list_jobs(jobQueue="kakehashi-aws-p4d-24xlarge-on-demand",
                                              jobStatus="SUCCEEDED")["jobSummaryList"] == []


def test_the_log_view_of_a_cloud_job_is_its_cloudwatch_log_stream(aws_site, client, moto_aws, tmp_path):
    job = submitted(aws_site, name="logs", script='echo "from the payload"\n')
    done = run_as_batch(backend_for(job.cluster), job.scheduler_id, aws_site.store, tmp_path / "container")
    assert done.returncode == 0, done.stderr.decode()  # stdout.log in the bucket says "from the payload"
    stream = moto_aws.write_log(job.scheduler_id, ["epoch 1 loss 0.9", "epoch 2 loss 0.4", "from CloudWatch"])
    assert stream == f"kakehashi-aws-p4d-24xlarge-on-demand/default/{job.scheduler_id}"

    assert tracking.track_cluster(job.cluster_id).finished == 1
    outputs.fetch_output(job.pk)
    client.force_login(aws_site.alice)
    log = client.get(reverse("job-log", args=[job.pk, "stdout"])).content.decode()  # the job page's log panel
    assert "epoch 1 loss 0.9\nepoch 2 loss 0.4\nfrom CloudWatch" in log and "from the payload" not in log
    from portal.api.tokens import issue_token

    _, token = issue_token(aws_site.alice, name="cloud-logs", scopes=["read"])
    body = client.get(f"/api/v1/jobs/{job.pk}/logs/", {"stream": "stdout"},
                      HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert body["data"] == "epoch 1 loss 0.9\nepoch 2 loss 0.4\nfrom CloudWatch\n"


def test_a_notebook_job_on_aws_runs_papermill_in_the_container_and_the_executed_notebook_is_on_its_page(
        aws_site, client, tmp_path):
    from tests.jobs.test_executed_notebook import text_of
    from tests.jobs.test_notebook_form import notebook

    job = submit_job(aws_site.alice, JobRequest(
        project=aws_site.project, name="nb-cloud", notebook=notebook(body="print(f'result={lr * epochs}')"),
        parameters={"lr": 0.5, "epochs": 4}, hardware=aws_site.p4d, software=aws_site.pytorch,
        walltime="00:30:00")).job
    assert job.kind == Job.Kind.NOTEBOOK and "papermill notebook.ipynb" in job.script
    assert dispatch_job(job.pk).status == "submitted"
    job.refresh_from_db()
    # The image has papermill and a python3 kernel (as NGC's PyTorch image with papermill added does); here the
    # test's own environment plays the image's.
    image_path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    done = run_as_batch(backend_for(job.cluster), job.scheduler_id, aws_site.store, tmp_path / "container",
                        PATH=image_path)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    assert tracking.track_cluster(job.cluster_id).finished == 1
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, job.state_reason
    outputs.fetch_output(job.pk)
    assert job.artifacts.filter(path="notebook.ipynb").exists()
    client.force_login(aws_site.alice)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert reverse("job-executed-notebook", args=[job.pk]) in page
    assert "<code>lr=0.5</code>, <code>epochs=4</code>" in page
    rendered = client.get(reverse("job-executed-notebook", args=[job.pk]))
    assert rendered.status_code == 200
    text = text_of(rendered.content.decode())
    assert "# Parameters\nlr = 0.5\nepochs = 4" in text and "result=2.0" in text


# ------------------------------------------------------------------------------------------ reconciler


def test_the_reconciler_stops_a_job_the_portal_does_not_know_and_says_so_on_the_site_page(aws_site, moto_aws, admin_client):
    batch = moto_aws.client("batch")
    stray = batch.submit_job(jobName="someones-notebook", jobQueue="kakehashi-aws-p4d-24xlarge-on-demand",
                             jobDefinition="kakehashi-aws-p4d-24xlarge-on-demand",
                             tags={"kakehashi:project": "nlp", "kakehashi:user": "mallory"})["jobId"]
    moto_aws.hold(stray, "RUNNING", started=timezone.now() - timedelta(hours=240))
    report = cloud.reconcile(aws_site.aws)
    assert [s.scheduler_id for s in report.stopped] == [stray]
    assert moto_aws.stop_reason(stray) == "Stopped by Kakehashi's reconciler: not a job the portal knows"
    entry = AuditEntry.objects.get(action="cloud.job_stopped")
    assert entry.data["scheduler_id"] == stray and entry.data["tags"]["kakehashi:user"] == "mallory"
    page = admin_client.get(reverse("site-admin")).content.decode()
    assert stray in page and "not a job the portal knows" in page and "mallory" in page
    assert "not a portal job: nothing samples it" in page  # "still computing?" has no samples to answer with
    assert "32.77 USD/h" in page and "4,915.89 JPY/h" in page  # one p4d node's burn (the money rule groups thousands)


def test_the_reconciler_stops_a_portal_job_running_past_its_walltime_and_it_ends_timed_out(aws_site, moto_aws):
    job = submitted(aws_site, walltime="01:00:00")
    moto_aws.hold(job.scheduler_id, "RUNNING", started=timezone.now() - timedelta(hours=3))
    report = cloud.reconcile(aws_site.aws)
    assert [s.job_id for s in report.stopped] == [job.pk]
    reason = moto_aws.stop_reason(job.scheduler_id)
    assert reason.startswith("Stopped by Kakehashi's reconciler: past its walltime")
    assert AuditEntry.objects.get(action="cloud.job_stopped").project == aws_site.project
    # Its history says the reconciler ordered the stop; AWS stops it; the tracker records what AWS says, and its
    # owner is told it ran out of time.
    asked = Job.objects.get(pk=job.pk).events.last()
    assert (asked.cause, asked.who) == ("cancel_requested", "the cloud reconciler")
    assert asked.reason == "cancel ordered: stopped by Kakehashi's cloud reconciler: past its walltime of 3600 s"
    moto_aws.stopped(job.scheduler_id)
    assert tracking.track_cluster(job.cluster_id).finished == 1
    job.refresh_from_db()
    assert (job.state, job.events.last().cause) == (JobState.TIMED_OUT, "walltime")
    (told,) = Notification.objects.filter(user=aws_site.alice, job=job)
    assert told.kind == "timed_out" and told.text.startswith("Job train (vision) ran out of its walltime")


def test_the_reconciler_leaves_a_known_job_in_its_walltime_and_shows_whose_it_is(aws_site, moto_aws):
    job = submitted(aws_site, walltime="02:00:00")
    moto_aws.hold(job.scheduler_id, "RUNNING", started=timezone.now() - timedelta(minutes=30))
    report = cloud.reconcile(aws_site.aws)
    assert report.stopped == []
    (seen,) = report.running
    assert (seen.job_id, seen.project, seen.user, seen.burn_per_hour, seen.burn_unit) == (
        job.pk, "vision", "alice", "32.77", "USD")
    assert moto_aws.stop_reason(job.scheduler_id) is None


def test_a_job_a_dispatch_submitted_but_has_not_recorded_yet_is_left_alone(aws_site, moto_aws):
    job = submit_job(aws_site.alice, JobRequest(project=aws_site.project, name="in-flight", script="echo\n",
                                                        hardware=aws_site.p4d, software=aws_site.pytorch)).job
    batch = moto_aws.client("batch")  # the dispatch worker's submit, its reply not recorded yet
    in_flight = batch.submit_job(jobName=job.scheduler_name, jobQueue="kakehashi-aws-p4d-24xlarge-on-demand",
                                 jobDefinition="kakehashi-aws-p4d-24xlarge-on-demand")["jobId"]
    moto_aws.hold(in_flight, "RUNNABLE")
    report = cloud.reconcile(aws_site.aws)
    assert report.stopped == [] and [s.scheduler_id for s in report.running] == [in_flight]


def test_the_cloud_rows_of_the_comparison_price_the_shape_and_say_how_many_jobs_wait_in_each_queue(aws_site, moto_aws):
    from portal.catalog.prices import cloud_rows

    batch = moto_aws.client("batch")
    for _ in range(2):
        waiting = batch.submit_job(jobName="someone-else", jobQueue="kakehashi-aws-p4d-24xlarge-on-demand",
                                   jobDefinition="kakehashi-aws-p4d-24xlarge-on-demand")["jobId"]
        moto_aws.hold(waiting, "RUNNABLE")
    job = submitted(aws_site)  # the portal's own, also waiting
    moto_aws.hold(job.scheduler_id, "RUNNABLE")
    cloud.reconcile(aws_site.aws)  # what the beat does; the page reads what it saw
    (row,) = cloud_rows(aws_site.project, gpus_per_node=8, gpu_model="a100", nodes=1, walltime_seconds=7200)
    assert row.hardware == aws_site.p4d and row.waiting == 1  # the two strays were stopped, the portal's waits
    assert (row.cost.amount, row.cost.unit) == (Decimal("9831.7800"), "JPY")
    assert str(row.price) == "32.77 USD" and row.seen_at
    assert [r.hardware for r in cloud_rows(aws_site.project, gpus_per_node=1, nodes=1, walltime_seconds=3600)] == [aws_site.g5]
    assert cloud_rows(aws_site.other, gpus_per_node=8, nodes=1, walltime_seconds=3600) == []  # no allocation there


# ---------------------------------------------------------------------------------------------- money


def test_a_strict_budget_cancels_a_running_cloud_job_counting_its_burn(aws_site, moto_aws):
    job = submitted(aws_site, walltime="02:00:00")
    moto_aws.hold(job.scheduler_id, "RUNNING", started=timezone.now() - timedelta(hours=1))
    assert tracking.apply_status(job.pk, JobState.PENDING, JobState.RUNNING)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=5))
    burn = enforcement.burn(aws_site.project)
    assert Decimal("24578.45") <= burn < Decimal("24600")  # 5 h × 32.7726 USD/h × 150 JPY/USD, past 20,000 JPY
    report = enforcement.enforce(aws_site.budget)
    assert report.cancelled == [job.pk]
    assert cancel_on_scheduler(job.pk) == "cancel sent"  # what the cancel task runs
    assert moto_aws.stop_reason(job.scheduler_id).startswith("Cancelled through Kakehashi")


def _stubbed_pricing(cluster) -> Stubber:
    """The Pricing API's answer for p4d.24xlarge in Tokyo, recorded (moto has no Pricing API), on the very client
    the portal gets for the cluster (clients are shared per account and endpoint)."""
    from backends import aws_pricing
    from portal.clusters.connect import cloud_client

    stubber = Stubber(cloud_client(cluster, "pricing", aws_pricing.PRICING_REGION))
    stubber.add_response("get_products", json.loads((FIXTURES / "pricing-get-products-p4d-tokyo.json").read_text()),
                         {"ServiceCode": "AmazonEC2", "MaxResults": 10,
                          "Filters": aws_pricing._filters("ap-northeast-1", "p4d.24xlarge")})
    return stubber


def _stubbed_spot_history(cluster, now) -> Stubber:
    """EC2's Spot price history for g5.xlarge in Tokyo, recorded: moto serves the call but with one constant
    price of 0.00001 USD, which no instance has (see the test of that below)."""
    from portal.clusters.connect import cloud_client

    history = json.loads((FIXTURES / "ec2-spot-price-history-g5-tokyo.json").read_text())
    for entry in history["SpotPriceHistory"]:
        entry["Timestamp"] = datetime.fromisoformat(entry["Timestamp"])
    stubber = Stubber(cloud_client(cluster, "ec2"))
    stubber.add_response("describe_spot_price_history", history, {
        "InstanceTypes": ["g5.xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": now, "MaxResults": 1000})
    return stubber


def test_refreshing_prices_writes_the_table_from_aws_and_the_next_estimate_uses_them(aws_site):
    from portal.cloud import price_list as prices
    from portal.clusters.connect import cloud_client

    CloudPrice.objects.filter(instance_type="g5.xlarge").update(price_per_hour=Decimal("0.3000"))
    now = datetime(2026, 11, 23, 8, tzinfo=UTC)
    with _stubbed_pricing(aws_site.aws) as pricing, _stubbed_spot_history(aws_site.aws, now) as spot:
        saved = prices.refresh_prices(aws_site.aws, pricing=cloud_client(aws_site.aws, "pricing", "us-east-1"),
                                      ec2=cloud_client(aws_site.aws, "ec2"), now=now)
    pricing.assert_no_pending_responses()
    spot.assert_no_pending_responses()
    rows = {(p.region, p.instance_type, p.market): (p.price_per_hour, p.currency, p.source)
            for p in CloudPrice.objects.all()}
    assert rows == {  # on demand from the price list; Spot the highest of the region's zones
        ("ap-northeast-1", "p4d.24xlarge", "on-demand"): (Decimal("44.4096"), "USD", "AWS price list"),
        ("ap-northeast-1", "g5.xlarge", "spot"): (Decimal("0.4510"), "USD", "AWS price list"),
    }
    assert {p.instance_type for p in saved} == {"p4d.24xlarge", "g5.xlarge"}
    assert HardwareType.objects.get(pk=aws_site.g5.pk).rate == Decimal("0.4510")
    p4d = HardwareType.objects.get(pk=aws_site.p4d.pk)
    assert (p4d.rate, p4d.rate_unit) == (Decimal("44.4096"), "USD")
    change = AuditEntry.objects.filter(action="hardware.price", target_id=str(p4d.pk)).latest("pk")
    assert (change.data["before"], change.data["after"], change.data["source"]) == (
        "32.7726 USD", "44.4096 USD", "AWS price list")
    estimate = prepare_job(aws_site.alice, JobRequest(
        project=aws_site.project, name="priced", script="true\n", hardware=p4d, software=aws_site.pytorch,
        walltime="01:00:00")).estimate
    assert (estimate.amount, estimate.unit) == (Decimal("6661.4400"), "JPY")  # 44.4096 USD × 1 h × 150 JPY/USD


def test_a_spot_price_too_small_for_the_table_is_not_written_as_free(aws_site, moto_aws):
    from portal.cloud import price_list as prices
    from portal.clusters.connect import cloud_client

    answer = moto_aws.client("ec2").describe_spot_price_history(InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
    assert answer and {e["SpotPrice"] for e in answer} == {"0.00001"}  # what moto's EC2 says for every type
    with _stubbed_pricing(aws_site.aws):
        saved = prices.refresh_prices(aws_site.aws, pricing=cloud_client(aws_site.aws, "pricing", "us-east-1"),
                                      ec2=cloud_client(aws_site.aws, "ec2"))
    assert [p.instance_type for p in saved] == ["p4d.24xlarge"]
    assert CloudPrice.objects.get(instance_type="g5.xlarge").price_per_hour == Decimal("0.4510")  # kept
    assert HardwareType.objects.get(pk=aws_site.g5.pk).rate == Decimal("0.4510")


def test_the_refresh_cloud_prices_command_prints_the_rows_and_says_when_aws_does_not_answer(aws_site, capsys):
    from django.core.management.base import CommandError

    with _stubbed_pricing(aws_site.aws):  # and moto's EC2 for Spot, whose price is too small to keep
        call_command("refresh_cloud_prices", "aws")
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["p4d.24xlarge on-demand in ap-northeast-1: 44.4096 USD/h"] and CloudPrice.objects.count() == 2
    assert HardwareType.objects.get(pk=aws_site.p4d.pk).rate == Decimal("44.4096")

    from backends import aws_pricing
    from portal.clusters.connect import cloud_client

    with Stubber(cloud_client(aws_site.aws, "pricing", aws_pricing.PRICING_REGION)) as stubber:
        stubber.add_client_error("get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts")
        with pytest.raises(CommandError, match="AWS did not give the prices: .*pricing:GetProducts"):
            call_command("refresh_cloud_prices", "aws")
    assert HardwareType.objects.get(pk=aws_site.p4d.pk).rate == Decimal("44.4096")  # the table is kept
    with pytest.raises(CommandError, match="no AWS Batch cluster 'local'"):
        call_command("refresh_cloud_prices", "local")


def test_a_sweep_on_aws_is_one_array_job_whose_points_are_each_tracked_to_their_end(aws_site):
    request = JobRequest(project=aws_site.project, name="lr-sweep", script='echo "lr=$LR"\n', hardware=aws_site.g5,
                         software=aws_site.pytorch, walltime="00:30:00")
    sweep = submit_sweep(aws_site.alice, request, {"LR": [0.1, 0.01, 0.001]})
    assert sweep.array and '"KAKEHASHI_S3_PREFIX"' in sweep.script
    assert dispatch_job(sweep.jobs[0].pk).status == "submitted"
    jobs = list(Job.objects.filter(group=sweep.group).order_by("array_index"))
    array_id = jobs[0].scheduler_id.split(":")[0]
    assert [job.scheduler_id for job in jobs] == [f"{array_id}:{i}" for i in range(3)]
    assert tracking.track_cluster(aws_site.aws.pk).finished == 3
    assert {job.state for job in Job.objects.filter(group=sweep.group)} == {JobState.COMPLETED}
    assert LedgerEntry.objects.filter(job__group=sweep.group, kind="settle").count() == 3


def test_a_clusters_cloud_key_is_stored_encrypted_and_never_shown_back(aws_site, admin_client):
    from portal.clusters.models import CloudCredential

    credential = CloudCredential.objects.get(cluster=aws_site.aws)
    secret = aws_site.store.secret_key
    assert secret not in credential.secret_encrypted and credential.secret() == secret
    page = admin_client.get(reverse("admin:clusters_cluster_change", args=[aws_site.aws.pk])).content.decode()
    assert credential.access_key_id in page and secret not in page and credential.secret_encrypted not in page


def test_a_cluster_without_a_stored_key_runs_jobs_with_the_workers_own_credentials(aws_site, monkeypatch, tmp_path,
                                                                                  moto_aws, request):
    """An instance role on AWS: no CloudCredential, so boto3's default chain gives the worker's own credentials.
    Here its first link, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, holds the test servers' key (the S3 server checks
    signatures; moto takes any key)."""
    from botocore.exceptions import ClientError

    from backends.aws_batch import _client
    from backends.base import BackendError
    from portal.clusters.connect import access_for, cloud_client
    from portal.clusters.models import CloudCredential

    request.addfinalizer(_client.cache_clear)  # no client of this test's variables outlives it
    CloudCredential.objects.filter(cluster=aws_site.aws).delete()
    assert (access_for(aws_site.aws, None).key_id, access_for(aws_site.aws, None).secret) == ("", "")
    # Nothing anywhere in the chain yet: no variables, no files, and no instance metadata (not on this machine).
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _client.cache_clear()  # clients keep the credentials they were made with
    with pytest.raises(BackendError, match="Unable to locate credentials"):
        backend_for(aws_site.aws).whoami()

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", aws_site.store.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", aws_site.store.secret_key)
    _client.cache_clear()
    assert backend_for(aws_site.aws).whoami().startswith("arn:aws:")
    job = submitted(aws_site, name="role", walltime="00:10:00")  # the dispatch worker's own function
    on_aws = moto_aws.client("batch").describe_jobs(jobs=[job.scheduler_id])["jobs"][0]
    assert (on_aws["tags"]["kakehashi:job"], on_aws["tags"]["kakehashi:user"]) == (job.uuid.hex, "alice")
    s3 = cloud_client(aws_site.aws, "s3")  # what is not a job (setup, prices) takes the same chain
    assert s3.head_object(Bucket=aws_site.aws.options["bucket"], Key=f"{job.remote_dir}/bundle.tar")["ContentLength"] > 0
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-key")  # and the S3 server did check them
    _client.cache_clear()
    with pytest.raises(ClientError, match="403|Forbidden"):
        cloud_client(aws_site.aws, "s3").head_object(Bucket=aws_site.aws.options["bucket"], Key=f"{job.remote_dir}/bundle.tar")
    assert [q["jobQueueName"] for q in cloud_client(aws_site.aws, "batch").describe_job_queues()["jobQueues"]]
