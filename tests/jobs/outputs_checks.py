"""What a job writing awkward names to outputs/ gets back, checked the same way on every backend's test."""

from __future__ import annotations

from urllib.parse import quote

import requests
from django.urls import reverse

from portal.jobs.models import Job
from tests.conftest import wait_for

# A space, a name in Japanese, a newline in a name, and a link to a file outside the job.
AWKWARD_OUTPUTS = (
    'mkdir -p "$KAKEHASHI_OUTPUT_DIR/run 1"\n'
    'echo log > "$KAKEHASHI_OUTPUT_DIR/run 1/log.txt"\n'
    'echo a,b > "$KAKEHASHI_OUTPUT_DIR/結果.csv"\n'
    "echo bad > \"$KAKEHASHI_OUTPUT_DIR/$(printf 'two\\nlines.txt')\"\n"
    'ln -s /etc/hostname "$KAKEHASHI_OUTPUT_DIR/elsewhere"\n'
)
NOT_COLLECTED = ["1 file not collected: names with control characters",
                 "1 file not collected: symbolic links or other files that are not regular files"]


def check_awkward_outputs(client, job: Job) -> None:
    """The space and the Japanese name come back and download with their names; the newline and the link do not,
    and the job's page and the API say so."""
    wait_for(lambda: Job.objects.get(pk=job.pk).outputs_not_collected, timeout=120, message="the outputs collected")
    job.refresh_from_db()
    client.force_login(job.user)
    assert sorted(job.artifacts.values_list("path", flat=True)) == ["run 1/log.txt", "結果.csv"]
    assert job.outputs_not_collected == NOT_COLLECTED
    body = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["outputs_not_collected"] == NOT_COLLECTED
    urls = {o["path"]: o["url"] for o in body["outputs"]}
    for path, content, filename in [("run 1/log.txt", b"log\n", 'filename="log.txt"'),
                                    ("結果.csv", b"a,b\n", f"filename*=UTF-8''{quote('結果.csv')}")]:
        redirect = client.get(urls[path])
        assert redirect.status_code == 302  # a presigned GET of the object store
        got = requests.get(redirect["Location"], timeout=60)
        assert got.status_code == 200 and got.content == content
        assert got.headers["Content-Disposition"].startswith("attachment;") and filename in got.headers["Content-Disposition"]
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "結果.csv" in page and "run 1/log.txt" in page
    assert "Not everything in <code>outputs/</code> came back" in page
    assert all(note in page for note in NOT_COLLECTED)
