"""Which names of outputs/ can come back, and what a job's page says of the rest (the real `find` of the local
backend on a real directory; the end-to-end runs are in test_local_end_to_end.py and test_datasets.py)."""

from __future__ import annotations

import os
import uuid
from collections import Counter

from backends.local import LocalBackend
from backends.transport import LocalTransport
from portal.jobs.outputs import _not_collected, key_problem

JOB = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _write(root, path: bytes, data: bytes = b"x") -> None:
    full = os.path.join(os.fsencode(root), b"job/outputs/" + path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as fh:
        fh.write(data)


def test_names_with_spaces_or_in_any_script_are_kept_and_control_characters_bad_bytes_and_traversal_are_not():
    for good in ["run 1/log.txt", "結果.csv", "a+b=c,d@e", "ünïcödé/données.h5", "'quoted' & $(not run)"]:
        assert key_problem(JOB, good) is None, good
    assert key_problem(JOB, "two\nlines") == "names with control characters"
    assert key_problem(JOB, "bell\x07") == "names with control characters"
    assert key_problem(JOB, "del\x7f") == "names with control characters"
    assert key_problem(JOB, "bad\ufffd.bin") == "names that are not valid UTF-8"
    for bad in ["../escape", "a/../../b", "/etc/passwd", "a//b", "./a", "a/"]:
        assert key_problem(JOB, bad) == "names that are not plain relative paths", bad
    assert key_problem(JOB, "x" * 501) == "names too long for an object key"
    assert key_problem(JOB, "名" * 330) == "names too long for an object key"  # 990 bytes: over 1024 with the prefix


def test_the_listing_keeps_every_name_says_what_is_not_a_file_and_where_it_stopped(tmp_path):
    _write(tmp_path, b"run 1/log.txt")
    _write(tmp_path, "結果.csv".encode())
    _write(tmp_path, b"two\nlines.txt")
    _write(tmp_path, b"\xff\xfe.bin")
    _write(tmp_path, b"a/b/c/deep.txt")
    os.symlink("/etc/hostname", tmp_path / "job/outputs/elsewhere")
    os.symlink("/etc", tmp_path / "job/outputs/etc")
    backend = LocalBackend(LocalTransport(tmp_path))

    listing = backend.list_outputs("job")
    assert {f.path for f in listing.files} == {"a/b/c/deep.txt", "run 1/log.txt", "two\nlines.txt",
                                               "\ufffd\ufffd.bin", "結果.csv"}
    assert sorted(listing.not_files) == ["elsewhere", "etc"]  # listed, never followed
    assert not (listing.more or listing.deeper or listing.outputs_link)
    problems = Counter(p for f in listing.files if (p := key_problem(JOB, f.path)))
    assert _not_collected(problems + Counter({"symbolic links or other files that are not regular files": 2}),
                          listing, 10_000, 32) == [
        "1 file not collected: names that are not valid UTF-8",
        "1 file not collected: names with control characters",
        "2 files not collected: symbolic links or other files that are not regular files"]

    short = backend.list_outputs("job", limit=3, depth=3)
    assert len(short.files) + len(short.not_files) == 3 and short.more and short.deeper
    assert _not_collected(Counter(), short, 3, 3) == [
        "only the first 3 files were collected (KAKEHASHI_OUTPUT_MAX_FILES)",
        "files more than 3 folders deep were not collected (KAKEHASHI_OUTPUT_MAX_DEPTH)"]


def test_an_outputs_folder_that_is_a_link_is_not_followed_and_said_so(tmp_path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets/key").write_text("private")
    (tmp_path / "job").mkdir()
    os.symlink(tmp_path / "secrets", tmp_path / "job/outputs")
    listing = LocalBackend(LocalTransport(tmp_path)).list_outputs("job")
    assert listing.files == [] and listing.outputs_link
    assert _not_collected(Counter(), listing, 10, 10) == [
        "outputs/ is a symbolic link: links are not followed, so nothing was collected"]
