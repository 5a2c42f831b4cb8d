"""On AWS Batch a job's datasets are S3 inputs its container pulls itself (backends/batch_entrypoint.py)."""

from __future__ import annotations

import json

import pytest

from backends.aws_batch import AWSBatchBackend
from backends.aws_batch_defs import job_definition
from backends.base import DataFile, DataInput, DataRefused, JobSpec, Resources


def _file(path: str, key: str) -> DataFile:
    return DataFile(path, "ab" * 32, 3, lambda: None, url=f"s3://site-bucket/{key}")


def test_a_cloud_job_reads_its_datasets_from_the_object_store_at_inputs_data():
    backend = AWSBatchBackend(None, {"bucket": "jobs", "default_image": "docker://busybox"})
    spec = JobSpec(name="kh-1-cloud", payload='ls "$KAKEHASHI_DATA"', walltime_seconds=60, workdir="kakehashi-jobs/x",
                   datasets=("corpus", "weights"), resources=Resources(mapping={"instance_type": "g5.xlarge"}))
    staged, report = backend.stage_data(spec, "vision", [
        DataInput("weights", files=[_file("", "projects/vision/model.bin")]),
        DataInput("corpus", files=[_file("a.txt", "projects/vision/corpus/a.txt"),
                                   _file("b/c.txt", "projects/vision/corpus/b/c.txt")])])
    assert report.copied_files == 0  # nothing moves through the portal
    # What the job's history says: what happens on this backend, not "copied 0 file(s)".
    assert report.summary() == ("nothing copied before submitting: the job's container pulls 3 file(s), 9 B, from "
                                "AWS S3 when it starts, checking each file's SHA-256")
    environment = {e["name"]: e["value"] for e in job_definition(staged, backend.settings)["containerProperties"]["environment"]}
    assert json.loads(environment["KAKEHASHI_INPUTS"]) == [
        {"path": "inputs/data/corpus/a.txt", "bucket": "site-bucket", "key": "projects/vision/corpus/a.txt",
         "sha256": "ab" * 32},
        {"path": "inputs/data/corpus/b/c.txt", "bucket": "site-bucket", "key": "projects/vision/corpus/b/c.txt",
         "sha256": "ab" * 32},
        {"path": "inputs/data/weights", "bucket": "site-bucket", "key": "projects/vision/model.bin",
         "sha256": "ab" * 32},
    ]  # each checked as it arrives (backends/batch_entrypoint.py)
    assert 'export KAKEHASHI_DATA="$PWD/inputs/data"' in backend.render(staged)


def test_a_cluster_path_or_a_file_on_the_portals_disk_cannot_go_to_the_cloud():
    backend = AWSBatchBackend(None, {"bucket": "jobs"})
    spec = JobSpec(name="kh-1-cloud", payload="true", walltime_seconds=60, workdir="x", datasets=("g",))
    with pytest.raises(DataRefused, match="a cloud job cannot read it"):
        backend.stage_data(spec, "vision", [DataInput("g", cluster_path="/gs/bs/tga-x/g", root="/gs/bs/tga-x")])
    with pytest.raises(DataRefused, match="an object store is needed"):
        backend.stage_data(spec, "vision", [DataInput("g", files=[DataFile("", "ab" * 32, 1, lambda: None)])])
