"""Datasets staged onto the real test clusters over SFTP, as the researcher's account (backends/staging.py)."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from backends.base import DataFile, DataInput, DataRefused, State
from tests.backends.conftest import wait_state
from tests.backends.test_scheduler_contract import _sge, _slurm
from tests.processes import live_processes

pytestmark = [pytest.mark.cluster]

BACKENDS = {"slurm": ("slurm", _slurm), "sge-tsubame": ("sge-site", _sge("tsubame"))}


def _file(path: str, data: bytes) -> DataFile:
    return DataFile(path, hashlib.sha256(data).hexdigest(), len(data), lambda: io.BytesIO(data))


def _remote(backend, command: str) -> str:
    result = backend.transport.run_shell(command)
    assert result.ok, result.message
    return result.stdout


@pytest.fixture(params=sorted(BACKENDS))
def cluster_backend(request, transport_for, run_id):
    login, make = BACKENDS[request.param]
    backend = make(transport_for(login, "alice"))
    # A cache of this run's own, so that "already staged" is about this test only.
    backend.settings["data_cache"] = f"kakehashi-tests/{run_id}/cache-{request.param}"
    return backend


def test_a_job_reads_each_dataset_at_kakehashi_data_with_the_uploaded_checksum_and_a_second_job_copies_nothing(
        cluster_backend, make_spec, run_id):
    backend = cluster_backend
    blob = os.urandom(3 * 1024 * 1024 + 17)  # several SFTP chunks and a ragged end
    weights = _file("", blob)
    folder = [_file("train/a b.csv", b"x,y\n1,2\n"), _file("train/nested/c.txt", b"hello\n"), _file("README", b"r\n")]
    datasets = [DataInput("weights", files=[weights]), DataInput("tables", files=folder)]
    payload = ('sha256sum "$KAKEHASHI_DATA/weights" "$KAKEHASHI_DATA/tables/train/a b.csv" '
               '"$KAKEHASHI_DATA/tables/train/nested/c.txt" "$KAKEHASHI_DATA/tables/README"\n')

    spec = make_spec(payload, group="kkdemo", datasets=("weights", "tables"))
    spec, report = backend.stage_data(spec, "vision", datasets)
    assert (report.copied_files, report.copied_bytes, report.reused_files) == (4, len(blob) + 8 + 6 + 2, 0)
    # Four files in one tar stream, not four transfers: the bytes sent are theirs and the archive's headers.
    assert backend.transport.puts == 1 and report.copied_bytes < backend.transport.bytes_put < report.copied_bytes + 8192
    assert "export KAKEHASHI_DATA=" in backend.render(spec)
    job_id = backend.submit(spec)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    out = backend.read_output(spec.workdir, "stdout").decode()
    for f in (weights, *folder):
        assert f.sha256 in out, out

    cache = backend.settings["data_cache"] + "/vision"
    before = _remote(backend, f"stat -c '%i %Y' {cache}/{weights.sha256}")
    # A second job with the same datasets: nothing moves over SFTP, the cached file is the same file.
    again = make_spec(payload, group="kkdemo", datasets=("weights", "tables"))
    again, second = backend.stage_data(again, "vision", datasets)
    assert (second.copied_files, second.copied_bytes, second.reused_files) == (0, 0, 4)
    assert backend.transport.puts == 1
    job_id = backend.submit(again)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    assert weights.sha256 in backend.read_output(again.workdir, "stdout").decode()
    assert _remote(backend, f"stat -c '%i %Y' {cache}/{weights.sha256}") == before
    # A retried dispatch stages the same job again: still nothing copied, the links still right.
    _, retry = backend.stage_data(again, "vision", datasets)
    assert retry.copied_files == 0
    assert _remote(backend, f"ls {cache}").split() == sorted(f.sha256 for f in (weights, *folder))


def test_bytes_that_arrive_with_another_checksum_refuse_the_dataset_and_leave_nothing_in_the_cache(
        cluster_backend, make_spec, login_node_tools):
    backend = cluster_backend
    lying = DataFile("", hashlib.sha256(b"what the store recorded").hexdigest(), 5, lambda: io.BytesIO(b"other"))
    spec = make_spec("true", group="kkdemo", datasets=("bad",))
    with pytest.raises(DataRefused, match="does not match its checksum"):
        backend.stage_data(spec, "vision", [DataInput("bad", files=[lying])])
    cache = backend.settings["data_cache"] + "/vision"
    assert lying.sha256 not in _remote(backend, f"ls -a {cache}")
    assert ".part-" not in _remote(backend, f"ls -a {cache}")


@pytest.fixture
def group_disk(cluster_backend, run_id):
    """A TSUBAME-style group disk: the project's root on the cluster, with a dataset, a link out of it and a
    file its owner cannot read."""
    root = f"/home/alice/kakehashi-tests/{run_id}/gdisk-{cluster_backend.kind}"
    _remote(cluster_backend, f"rm -rf {root} && mkdir -p {root}/imagenet/val {root}/sneaky {root}/locked && "
                             f"printf 'img\\n' > {root}/imagenet/val/1.jpg && ln -s /etc {root}/escape && "
                             f"ln -s /etc/hostname {root}/sneaky/host && printf s > {root}/locked/secret && "
                             f"chmod 000 {root}/locked/secret && ln -s /etc '{root}/$(touch pwned)'")
    return root


def test_a_registered_cluster_path_is_used_in_place_and_paths_leaving_the_root_are_refused(
        cluster_backend, make_spec, group_disk):
    backend = cluster_backend
    home = _remote(backend, "echo $HOME").strip()
    assert group_disk.startswith(home)
    assert backend.check_data_path(f"{group_disk}/imagenet", group_disk) == f"{group_disk}/imagenet"
    spec = make_spec('cat "$KAKEHASHI_DATA/imagenet/val/1.jpg"; readlink "$KAKEHASHI_DATA/imagenet"',
                     group="kkdemo", datasets=("imagenet",))
    spec, report = backend.stage_data(spec, "vision", [DataInput("imagenet", cluster_path=f"{group_disk}/imagenet",
                                                                 root=group_disk)])
    assert report.in_place == 1 and report.copied_files == 0 and backend.transport.puts == 0
    job_id = backend.submit(spec)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    lines = backend.read_output(spec.workdir, "stdout").decode().splitlines()
    assert "img" in lines and f"{group_disk}/imagenet" in lines  # read through a link to the path itself

    refusals = {
        f"{group_disk}/escape": "outside the project's root",
        f"{group_disk}/../": "outside the project's root",
        "/etc": "outside the project's root",
        f"{group_disk}/sneaky": "points to /etc/hostname, outside the project's root",
        f"{group_disk}/locked": "secret is not readable",
        f"{group_disk}/missing": "does not exist",
        f"{group_disk}/it's; rm -rf ~": "does not exist",
        f"{group_disk}/$(touch pwned)": "outside the project's root",  # a name, never run
    }
    for path, words in refusals.items():
        with pytest.raises(DataRefused, match=words):
            backend.check_data_path(path, group_disk)
        bad = make_spec("true", group="kkdemo", datasets=("x",))
        with pytest.raises(DataRefused, match=words):
            backend.stage_data(bad, "vision", [DataInput("x", cluster_path=path, root=group_disk)])
    assert _remote(backend, "test -d ~ && echo home still there").strip() == "home still there"
    assert _remote(backend, "ls ~ kakehashi-tests 2>/dev/null | grep -c '^pwned$' || true").strip() == "0"


def test_a_long_copy_keeps_telling_the_caller_it_is_alive(cluster_backend, make_spec, monkeypatch):
    import backends.transport

    monkeypatch.setattr(backends.transport, "HEARTBEAT_EVERY", 0.0)  # as often as it looks, instead of every 15 s
    beats = []
    blob = os.urandom(4 * 1024 * 1024)
    spec = make_spec("true", datasets=("big",))
    _, report = cluster_backend.stage_data(spec, "vision", [DataInput("big", files=[_file("", blob)])],
                                           heartbeat=lambda: beats.append(1))
    assert report.copied_files == 1 and len(beats) >= 4


# ---------------------------------------------------------------------------- the project's shared cache

def _group_cache(run_id: str, kind: str) -> str:
    """A `data_cache` in the group's area of the test cluster (tests/cluster/lib.sh: GROUP_AREA_DIR), as a site
    sets `/gs/bs/{group}/.kakehashi/cache`; this run's own directory inside it."""
    from tests.conftest import CLUSTER_DIR

    return f"{CLUSTER_DIR}/groups/{{group}}/kakehashi-tests/{run_id}-{kind}/cache"


@pytest.fixture(params=sorted(BACKENDS))
def researchers(request, transport_for, run_id):
    """alice, bob (both of group kkdemo, one project) and carol (of none of its groups) on one login node, each
    with the same shared `data_cache`."""
    login, make = BACKENDS[request.param]
    template = _group_cache(run_id, request.param)
    backends = {user: make(transport_for(login, user)) for user in ("alice", "bob", "carol")}
    for backend in backends.values():
        backend.settings["data_cache"] = template
    area = template.split("/{group}")[0] + "/kkdemo"
    assert _remote(backends["alice"], f"test -d {area} -a -w {area} && echo ok").strip() == "ok", (
        f"no group area {area} for kkdemo: run tests/cluster/up.sh")
    yield backends
    _remote(backends["alice"], f"rm -rf {template.replace('{group}', 'kkdemo').rsplit('/', 1)[0]} || true")


def test_a_dataset_alice_staged_is_read_by_bobs_job_of_the_same_project_without_a_second_copy_and_not_by_another_group(
        researchers, make_spec):
    alice, bob, carol = researchers["alice"], researchers["bob"], researchers["carol"]
    blob = os.urandom(2 * 1024 * 1024 + 5)
    weights, labels = _file("", blob), _file("labels/a.txt", b"cat\n")
    datasets = [DataInput("weights", files=[weights]), DataInput("tables", files=[labels])]
    payload = 'sha256sum "$KAKEHASHI_DATA/weights" "$KAKEHASHI_DATA/tables/labels/a.txt"; id -un\n'

    spec, first = alice.stage_data(make_spec(payload, group="kkdemo", datasets=("weights", "tables")), "vision", datasets)
    assert (first.copied_files, first.reused_files, alice.transport.puts) == (2, 0, 1)  # one tar stream
    assert "the cache shared by group kkdemo" in first.summary()
    job_id = alice.submit(spec)
    assert wait_state(alice, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    alice_out = alice.read_output(spec.workdir, "stdout").decode()

    # bob, another researcher of the project: nothing moves over SFTP, his job reads the same bytes as himself.
    spec, second = bob.stage_data(make_spec(payload, group="kkdemo", datasets=("weights", "tables")), "vision", datasets)
    assert (second.copied_files, second.copied_bytes, second.reused_files) == (0, 0, 2)
    assert bob.transport.puts == 0 and bob.transport.bytes_put == 0
    job_id = bob.submit(spec)
    assert wait_state(bob, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    bob_out = bob.read_output(spec.workdir, "stdout").decode()
    for f in (weights, labels):
        assert f"{f.sha256}  " in alice_out and f"{f.sha256}  " in bob_out
    assert "\nalice\n" in alice_out and "\nbob\n" in bob_out

    # The cache is the group's: its directory setgid and group-writable, its files group-readable, read-only, and
    # nothing for anyone else.
    cache = alice.settings["data_cache"].replace("{group}", "kkdemo") + "/vision"
    assert _remote(bob, f"stat -c '%G %a' {cache}").split() == ["kkdemo", "2770"]
    assert _remote(bob, f"stat -c '%U %G %a' {cache}/{weights.sha256}").split() == ["alice", "kkdemo", "440"]
    assert _remote(bob, f"ls -a {cache}").split() == sorted([".", "..", weights.sha256, labels.sha256])

    # carol, of another project: she cannot read it, list it, or stage into it.
    denied = carol.transport.run_shell(f"cat {cache}/{weights.sha256}; ls {cache}")
    assert not denied.ok and denied.stderr.count("Permission denied") == 2, denied.stderr
    with pytest.raises(DataRefused, match="this account \\(carol\\) is not in group kkdemo"):
        carol.stage_data(make_spec("true", group="kkdemo", datasets=("weights",)), "vision", datasets[:1])
    assert carol.transport.puts == 0


def test_two_researchers_staging_at_once_share_one_whole_copy_and_one_who_finished_first_saves_the_other_the_copy(
        researchers, make_spec, monkeypatch):
    import threading

    import backends.staging
    import backends.staging_copy

    alice, bob = researchers["alice"], researchers["bob"]
    blobs = [os.urandom(3 * 1024 * 1024), os.urandom(1024 * 1024)]
    files = sorted((_file("", blob) for blob in blobs), key=lambda f: f.sha256)
    datasets = [DataInput("first", files=[files[0]]), DataInput("second", files=[files[1]])]

    # At once, into a cache directory neither has made yet: each sees whole files only, under their names.
    reports, errors = {}, []

    def stage(name, backend):
        try:
            reports[name] = backend.stage_data(make_spec("true", group="kkdemo", datasets=("first", "second")),
                                               "vision", datasets)[1]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=stage, args=(n, b)) for n, b in (("alice", alice), ("bob", bob))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    cache = alice.settings["data_cache"].replace("{group}", "kkdemo") + "/vision"
    assert _remote(bob, f"ls -a {cache}").split() == sorted([".", "..", *(f.sha256 for f in files)])
    assert _remote(bob, f"cd {cache} && sha256sum -- *").split()[::2] == [f.sha256 for f in files]
    root = cache.rsplit("/", 2)[0]
    assert _remote(bob, f"find {root} -name '*.new-*' -o -name '*.part-*'") == ""  # nothing half-made left
    assert all(r.copied_files + r.reused_files == 2 for r in reports.values())
    # One stream each at most (both files in one tar), or none for one who found them there.
    assert 1 <= alice.transport.puts + bob.transport.puts <= 2

    # A new project's data: while bob copies the first file, alice stages the second whole; bob, looking at the
    # cache again before it, copies only the first. (Files this size travel alone when they are large: made so here.)
    monkeypatch.setattr(backends.staging, "RECHECK_SECONDS", 0.0)
    monkeypatch.setattr(backends.staging_copy, "LARGE_FILE", 512 * 1024)
    blobs = [os.urandom(1024 * 1024), os.urandom(1024 * 1024)]
    first, second = sorted((_file("", blob) for blob in blobs), key=lambda f: f.sha256)
    opened = first.open

    def open_while_alice_stages_the_second():
        alice.stage_data(make_spec("true", group="kkdemo", datasets=("b",)), "nlp", [DataInput("b", files=[second])])
        return opened()

    puts = bob.transport.puts
    racing = [DataInput("a", files=[DataFile("", first.sha256, first.size, open_while_alice_stages_the_second)]),
              DataInput("b", files=[second])]
    _, report = bob.stage_data(make_spec("true", group="kkdemo", datasets=("a", "b")), "nlp", racing)
    assert (report.copied_files, report.reused_files, bob.transport.puts - puts) == (1, 1, 1)


def test_without_a_group_in_data_cache_or_for_the_project_each_account_keeps_its_own_cache():
    from backends.staging import DEFAULT_CACHE_ROOT, cache_location

    assert cache_location("", "kkdemo") == (DEFAULT_CACHE_ROOT, "")
    assert cache_location("scratch/cache", "kkdemo") == ("scratch/cache", "")
    assert cache_location("/gs/bs/{group}/.kakehashi/cache", "tga-lab") == ("/gs/bs/tga-lab/.kakehashi/cache", "tga-lab")
    assert cache_location("/gs/bs/{group}/.kakehashi/cache", "") == (DEFAULT_CACHE_ROOT, "")
    with pytest.raises(Exception, match="not a group name"):
        cache_location("/gs/bs/{group}/cache", "../../etc")


def test_a_shared_cache_directory_someone_made_private_is_refused_with_how_to_fix_it(researchers, make_spec):
    alice = researchers["alice"]
    cache = alice.settings["data_cache"].replace("{group}", "kkdemo") + "/vision"
    _remote(alice, f"mkdir -p {cache} && chgrp alice {cache} && chmod 700 {cache}")
    with pytest.raises(DataRefused, match="is not group kkdemo's to share .group alice, mode 2?700.: its owner can run "
                                          "chgrp kkdemo and chmod g\\+rwxs on it"):
        alice.stage_data(make_spec("true", group="kkdemo", datasets=("w",)), "vision",
                         [DataInput("w", files=[_file("", b"w")])])
    assert alice.transport.puts == 0


# ------------------------------------------------------------------ the fast paths (docs/decisions/0041, 0042)

@pytest.fixture
def large_files_alone(monkeypatch):
    """Files of 512 KiB or more travel alone, hashed as they arrive (as 64 MiB and more do): small test files
    take the large-file path."""
    import backends.staging_copy

    monkeypatch.setattr(backends.staging_copy, "LARGE_FILE", 512 * 1024)


def test_a_large_file_travels_alone_through_openssh_and_arrives_whole_under_its_checksum(
        cluster_backend, make_spec, large_files_alone, login_node_tools):
    backend = cluster_backend
    assert backend.transport.bulk == "openssh"
    blob = os.urandom(5 * 1024 * 1024 + 3)
    big, small = _file("", blob), _file("labels.txt", f"cat\ndog\n{login_node_tools}\n".encode())
    spec = make_spec('sha256sum "$KAKEHASHI_DATA/big"', datasets=("big", "labels"))
    spec, report = backend.stage_data(spec, "vision", [DataInput("big", files=[big]),
                                                       DataInput("labels", files=[small])])
    assert (report.copied_files, report.copied_bytes) == (2, len(blob) + small.size)
    assert backend.transport.puts == 2  # the large file alone, the small one in a tar stream
    job_id = backend.submit(spec)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    assert big.sha256 in backend.read_output(spec.workdir, "stdout").decode()
    cache = backend.settings["data_cache"] + "/vision"
    assert _remote(backend, f"stat -c %a {cache}/{big.sha256}").strip() == "600"  # the account's own cache


def test_a_large_file_whose_bytes_are_not_its_checksum_is_refused_and_leaves_no_part_file(
        cluster_backend, make_spec, large_files_alone, login_node_tools):
    backend = cluster_backend
    recorded = os.urandom(1024 * 1024)
    lying = DataFile("", hashlib.sha256(recorded).hexdigest(), len(recorded), lambda: io.BytesIO(os.urandom(len(recorded))))
    with pytest.raises(DataRefused, match="does not match its checksum"):
        backend.stage_data(make_spec("true", datasets=("bad",)), "vision", [DataInput("bad", files=[lying])])
    cache = backend.settings["data_cache"] + "/vision"
    listing = _remote(backend, f"ls -A {cache}")
    assert lying.sha256 not in listing and ".part-" not in listing


def _ranged(path: str, data: bytes, stored: bytes | None = None, fail_from: int | None = None) -> DataFile:
    """A file whose store serves ranges (so a large one moves on several streams); `stored`: what the store
    really holds; `fail_from`: a range starting there cannot be read."""
    held = stored if stored is not None else data

    def open_range(start: int, end: int):
        if fail_from is not None and start >= fail_from:
            raise OSError("the store dropped the connection")
        return io.BytesIO(held[start:end])

    return DataFile(path, hashlib.sha256(data).hexdigest(), len(data), lambda: io.BytesIO(held), open_range=open_range)


def test_a_large_file_moves_on_several_streams_each_into_its_place_and_is_checked_whole(
        cluster_backend, make_spec, monkeypatch):
    import backends.staging_copy

    monkeypatch.setattr(backends.staging_copy, "LARGE_FILE", 1024 * 1024)
    monkeypatch.setattr(backends.staging_copy, "PARALLEL_MIN", 1024 * 1024)
    backend = cluster_backend
    backend.settings["ssh_streams"] = 3
    blob = os.urandom(7 * 1024 * 1024 + 12345)  # three ranges of whole MiB and a ragged end
    big = _ranged("", blob)
    spec = make_spec('sha256sum "$KAKEHASHI_DATA/big"', datasets=("big",))
    spec, report = backend.stage_data(spec, "vision", [DataInput("big", files=[big])])
    assert (report.copied_files, backend.transport.puts, backend.transport.bytes_put) == (1, 3, len(blob))
    job_id = backend.submit(spec)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    assert big.sha256 in backend.read_output(spec.workdir, "stdout").decode()

    cache = backend.settings["data_cache"] + "/vision"
    # Bytes in the store that are not the recorded ones: refused once the ranges are joined, nothing left behind.
    lying = _ranged("", os.urandom(3 * 1024 * 1024), stored=os.urandom(3 * 1024 * 1024))
    with pytest.raises(DataRefused, match="does not match its checksum"):
        backend.stage_data(make_spec("true", datasets=("bad",)), "vision", [DataInput("bad", files=[lying])])
    # One range cannot be read: the others are cut, the error is the store's (the dispatch retries), no part file.
    broken = _ranged("", os.urandom(3 * 1024 * 1024), fail_from=1024 * 1024)
    with pytest.raises(OSError, match="dropped the connection"):
        backend.stage_data(make_spec("true", datasets=("broken",)), "vision", [DataInput("broken", files=[broken])])
    listing = _remote(backend, f"ls -A {cache}")
    assert big.sha256 in listing and ".part-" not in listing
    assert lying.sha256 not in listing and broken.sha256 not in listing


class _Stalling(io.RawIOBase):
    """A store that sends half the file, then nothing for `pause` seconds (or for good), then the rest."""

    def __init__(self, data: bytes, pause: float) -> None:
        self.data, self.pause, self.at = data, pause, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        import time

        if self.at == len(self.data) // 2:
            time.sleep(self.pause)
        end = len(self.data) // 2 if self.at < len(self.data) // 2 else len(self.data)
        chunk = self.data[self.at:min(end, self.at + (n if n > 0 else end))]
        self.at += len(chunk)
        return chunk


@pytest.mark.parametrize("large", [True, False], ids=["alone", "in-a-tar-stream"])
def test_a_transfer_that_stalls_keeps_renewing_the_lease_for_a_while_then_gives_up_and_leaves_nothing_behind(
        cluster_backend, make_spec, monkeypatch, large):
    import time

    import backends.staging_copy
    import backends.transport
    from backends.transport import TransportError

    monkeypatch.setattr(backends.transport, "HEARTBEAT_EVERY", 0.1)
    monkeypatch.setattr(backends.staging_copy, "LARGE_FILE", 1024 if large else 1 << 40)
    blob = os.urandom(2 * 1024 * 1024)
    sha = hashlib.sha256(blob).hexdigest()
    beats = []
    # A pause shorter than the stall limit: the lease is renewed meanwhile, and the file arrives.
    paused = DataFile("", sha, len(blob), lambda: _Stalling(blob, 1.5))
    _, report = cluster_backend.stage_data(make_spec("true", datasets=("slow",)), "vision",
                                           [DataInput("slow", files=[paused])], heartbeat=lambda: beats.append(1))
    assert report.copied_files == 1 and len(beats) >= 8

    # A store that stops sending for good: given up after the stall limit, the job not refused (it may pass).
    monkeypatch.setattr(backends.staging_copy, "STALL_SECONDS", 1.0)
    other = os.urandom(2 * 1024 * 1024)
    stuck = DataFile("", hashlib.sha256(other).hexdigest(), len(other), lambda: _Stalling(other, 30))
    with pytest.raises(TransportError, match="stalled: no byte moved for 1 s"):
        cluster_backend.stage_data(make_spec("true", datasets=("stuck",)), "vision", [DataInput("stuck", files=[stuck])])
    cache = cluster_backend.settings["data_cache"] + "/vision"
    settle = time.monotonic() + 10  # the login node's side of the cut stream cleans up after itself

    def leftovers():
        return [n for n in _remote(cluster_backend, f"ls -A {cache}").split() if ".part-" in n or ".incoming-" in n]

    while leftovers() and time.monotonic() < settle:
        time.sleep(0.2)
    listing = _remote(cluster_backend, f"ls -A {cache}").split()
    assert sha in listing and stuck.sha256 not in listing and not leftovers()


@pytest.fixture(params=["python3", "shell tools"])
def login_node_tools(request, monkeypatch):
    """The login node with python3 (one pass: write and hash), or as if without it (tar, openssl, mv)."""
    import backends.staging_copy

    if request.param != "python3":
        monkeypatch.setattr(backends.staging_copy, "PYTHON", "python3-not-on-this-login-node")
    return request.param


def test_a_folder_of_many_files_with_awkward_names_is_one_stream_and_the_job_sees_its_tree(
        cluster_backend, make_spec, login_node_tools):
    backend = cluster_backend
    backend.settings["data_cache"] += "-" + login_node_tools.replace(" ", "-")  # this test's own: all copied
    files = [_file(f"train/{i // 100:02d}/{i:05d} img.jpg", os.urandom(100 + i)) for i in range(1200)]
    files += [_file("ラベル/猫.txt", b"neko\n"), _file("-rf", b"dash\n"), _file("$(touch pwned)", b"x\n"),
              _file("a" * 200 + "/" + "b" * 200, b"long\n")]
    spec = make_spec('echo RESULT; cd "$KAKEHASHI_DATA/set" && find . -type l | wc -l && cat ラベル/猫.txt ./-rf "$(printf "%s" '
                     "'$(touch pwned)')\" && ls ~ | grep -c pwned || true", datasets=("set",))
    spec, report = backend.stage_data(spec, "vision", [DataInput("set", files=files)])
    assert report.copied_files == len(files) and backend.transport.puts == 1
    job_id = backend.submit(spec)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    out = backend.read_output(spec.workdir, "stdout").decode().split("RESULT\n", 1)[-1].split()
    assert out[:5] == [str(len(files)), "neko", "dash", "x", "0"], out
    # A second job: nothing sent, the tree made again.
    again = make_spec("true", datasets=("set",))
    _, second = backend.stage_data(again, "vision", [DataInput("set", files=files)])
    assert (second.copied_files, second.reused_files, backend.transport.puts) == (0, len(files), 1)


@pytest.mark.parametrize("paths, words", [
    (["a/b", "a"], "'a' is both a file and a folder"),
    (["ok", "../up"], "is not a plain relative path"),
    (["line\nbreak"], "is not a plain relative path"),
    (["x//y"], "is not a plain relative path"),
])
def test_a_folder_with_names_no_tree_can_hold_is_refused_before_anything_moves(cluster_backend, make_spec, paths, words):
    files = [_file(p, p.encode()) for p in paths]
    with pytest.raises(DataRefused, match=words):
        cluster_backend.stage_data(make_spec("true", datasets=("set",)), "vision", [DataInput("set", files=files)])
    assert cluster_backend.transport.puts == 0


def test_the_key_never_appears_in_a_process_list_and_a_changed_host_key_sends_nothing(
        transport_for, known_hosts, user_key):
    import threading
    import time

    from backends.transport import HostKeyMismatch, SSHTransport

    key = user_key("alice")
    transport = SSHTransport("127.0.0.1", 2222, "alice", key, known_hosts, bulk="openssh")
    seen, agents, stop = [], set(), threading.Event()

    def watch():
        while not stop.is_set():
            for parent, command in live_processes().values():
                seen.append(command)
                if parent == os.getpid() and "IdentityAgent=" in command:  # this test's ssh, not another worker's
                    agents.add(Path(command.split("IdentityAgent=")[1].split()[0]))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = transport.pipe("sleep 0.5; wc -c", _Stalling(b"x" * 4096, 0.5), timeout=30)
    finally:
        stop.set()
        watcher.join()
    assert result.ok and result.stdout.strip() == "4096"
    body = "".join(line for line in key.splitlines() if "PRIVATE KEY" not in line)
    assert agents, "the watcher never saw the stream's ssh"
    assert not any(body[:40] in c or body[-40:] in c for c in seen)
    assert not [socket.parent for socket in agents if socket.parent.exists()]  # the agent's dir is gone

    other = known_hosts.splitlines()[0].split()[0] + " ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGdD4Ld8Jb1gwJwzKQ5rKmRgwA2k0yrBo1TQqhGNGY6W\n"
    impostor = SSHTransport("127.0.0.1", 2222, "alice", key, other, bulk="openssh")
    with pytest.raises(HostKeyMismatch):
        impostor.pipe("cat > should-not-exist", io.BytesIO(b"secret data"))
    assert _remote_plain(transport, "ls should-not-exist 2>&1 || true").startswith("ls: cannot access")


def _remote_plain(transport, command: str) -> str:
    return transport.run_shell(command).stdout


# ------------------------------------------------------------ direct pull: the login node fetches it itself

@pytest.fixture
def store_objects(object_store):
    """Put objects in the suite's SeaweedFS and give DataFiles whose `presign` signs a GET the login node fetches
    (here the same host: the store's own address) and whose `open` counts what the worker would relay."""
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=object_store.endpoint, region_name="us-east-1",
                      aws_access_key_id=os.environ["KAKEHASHI_S3_ACCESS_KEY_ID"],
                      aws_secret_access_key=os.environ["KAKEHASHI_S3_SECRET_ACCESS_KEY"],
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    bucket = os.environ["KAKEHASHI_S3_BUCKET"]
    relayed = []

    def put(path: str, data: bytes, *, stored: bytes | None = None, endpoint: str | None = None) -> DataFile:
        key = f"pull-tests/{hashlib.sha256(data).hexdigest()}/{path or 'file'}"
        s3.put_object(Bucket=bucket, Key=key, Body=stored if stored is not None else data)

        def opened():
            relayed.append(path)
            return io.BytesIO(data)

        def presign():
            url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
            return url.replace(object_store.endpoint, endpoint) if endpoint else url

        def get_url():
            relayed.append(f"GET {path}")
            return s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)

        return DataFile(path, hashlib.sha256(data).hexdigest(), len(data), opened, presign=presign, get_url=get_url)

    put.relayed = relayed
    return put


def test_with_data_pull_the_login_node_fetches_the_objects_itself_and_the_worker_relays_no_byte(
        cluster_backend, make_spec, store_objects, monkeypatch):
    import backends.staging_pull

    monkeypatch.setattr(backends.staging_pull, "RANGE_BYTES", 1024 * 1024)  # several ranges in parallel
    backend = cluster_backend
    backend.settings["data_pull"] = "presigned"
    big = store_objects("", os.urandom(5 * 1024 * 1024 + 11))
    folder = [store_objects(f"part/{i}.txt", f"{i}\n".encode() * 50) for i in range(20)]
    spec = make_spec('sha256sum "$KAKEHASHI_DATA/big" "$KAKEHASHI_DATA/set/part/7.txt"', datasets=("big", "set"))
    spec, report = backend.stage_data(spec, "vision", [DataInput("big", files=[big]), DataInput("set", files=folder)])
    assert (report.copied_files, report.pulled_files, report.pulled_bytes) == (21, 21, report.copied_bytes)
    assert "fetched by the login node from the object store itself" in report.summary()
    assert store_objects.relayed == [] and backend.transport.puts == 0 and backend.transport.bytes_put == 0
    job_id = backend.submit(spec)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    out = backend.read_output(spec.workdir, "stdout").decode()
    assert big.sha256 in out and folder[7].sha256 in out
    cache = backend.settings["data_cache"] + "/vision"
    assert ".part-" not in _remote(backend, f"ls -A {cache}")
    # The presigned URLs went on stdin: no command the worker ran on the login node carries a signature.
    _, again = backend.stage_data(make_spec("true", datasets=("big",)), "vision", [DataInput("big", files=[big])])
    assert (again.copied_files, again.reused_files) == (0, 1)


def test_a_pulled_object_whose_bytes_are_not_its_checksum_is_refused_and_an_unreachable_store_is_relayed_instead(
        cluster_backend, make_spec, store_objects):
    backend = cluster_backend
    backend.settings["data_pull"] = "presigned"
    recorded = os.urandom(100_000)
    lying = store_objects("", recorded, stored=os.urandom(100_000))
    with pytest.raises(DataRefused, match="does not match its checksum"):
        backend.stage_data(make_spec("true", datasets=("bad",)), "vision", [DataInput("bad", files=[lying])])
    cache = backend.settings["data_cache"] + "/vision"
    listing = _remote(backend, f"ls -A {cache}")
    assert lying.sha256 not in listing and ".part-" not in listing

    # A store the login node cannot reach (a port nothing listens on): the worker relays the bytes after all.
    from tests.seaweedfs import free_port

    far = store_objects("", os.urandom(50_000), endpoint=f"http://127.0.0.1:{free_port()}")
    _, report = backend.stage_data(make_spec("true", datasets=("far",)), "vision", [DataInput("far", files=[far])])
    assert (report.copied_files, report.pulled_files) == (1, 0) and store_objects.relayed == ["GET "]


@pytest.mark.parametrize("size", [5 * 1024 * 1024 + 7, 300, 0], ids=["several MiB", "smaller than a buffer", "empty"])
def test_a_large_file_relayed_from_the_store_is_spliced_into_the_stream_and_arrives_whole(
        cluster_backend, make_spec, store_objects, large_files_alone, size):
    import backends.staging_copy

    backends.staging_copy.LARGE_FILE = 0  # every file alone (undone by large_files_alone's monkeypatch)
    blob = os.urandom(size)
    big = store_objects("", blob)
    spec = make_spec('sha256sum "$KAKEHASHI_DATA/big"', datasets=("big",))
    spec, report = cluster_backend.stage_data(spec, "vision", [DataInput("big", files=[big])])
    assert report.copied_bytes == size and cluster_backend.transport.bytes_put == size
    assert store_objects.relayed == ["GET "]  # by a presigned GET, not boto3's stream
    job_id = cluster_backend.submit(spec)
    assert wait_state(cluster_backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    assert big.sha256 in cluster_backend.read_output(spec.workdir, "stdout").decode()


# ------------------------------------------------------------ packs: many small files, a few GETs

@pytest.fixture
def packed_folder(store_objects, object_store):
    """A folder of 300 small files in the store, each its own object and also a member of one pack (a tar object
    of members named by SHA-256, no end-of-archive blocks) as portal/storage/packs.py writes it; `put_pack` writes
    the pack's bytes (or others), `relayed` counts the files' own GETs."""
    import dataclasses

    import boto3
    from botocore.config import Config

    from backends.base import Packed
    from backends.staging_copy import TarStream

    s3 = boto3.client("s3", endpoint_url=object_store.endpoint, region_name="us-east-1",
                      aws_access_key_id=os.environ["KAKEHASHI_S3_ACCESS_KEY_ID"],
                      aws_secret_access_key=os.environ["KAKEHASHI_S3_SECRET_ACCESS_KEY"],
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    bucket = os.environ["KAKEHASHI_S3_BUCKET"]
    own = sorted((store_objects(f"img/{i:03d}.jpg", os.urandom(700 + 37 * i)) for i in range(300)),
                 key=lambda f: f.sha256)
    stream = TarStream(own, archive_end=False, check=True)
    pack = b"".join(iter(lambda: stream.read(1 << 20), b""))
    stream.close()
    key = f"pack-tests/{os.urandom(6).hex()}.tar"
    ranges = []

    def get_url():
        ranges.append(key)
        return s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)

    places = {sha: offset for sha, offset, _, intact in stream.members if intact}
    assert len(places) == len(own)
    folder = [dataclasses.replace(f, packed=Packed(key, places[f.sha256], get_url)) for f in own]
    store_objects.relayed.clear()

    def put_pack(data: bytes | None = None) -> None:
        if data is None:
            s3.delete_object(Bucket=bucket, Key=key)
        else:
            s3.put_object(Bucket=bucket, Key=key, Body=data)

    put_pack(pack)
    return type("PackedFolder", (), {"files": folder, "pack": pack, "put": staticmethod(put_pack), "ranges": ranges,
                                     "relayed": store_objects.relayed})


def test_a_folder_whose_small_files_sit_in_a_pack_is_read_from_the_pack_in_one_get_and_checked_file_by_file(
        cluster_backend, make_spec, packed_folder, login_node_tools):
    backend = cluster_backend
    backend.settings["data_cache"] += "-" + login_node_tools.replace(" ", "-")
    files = packed_folder.files
    spec = make_spec('echo RESULT; cd "$KAKEHASHI_DATA/set" && sha256sum img/042.jpg && find . -type l | wc -l',
                     datasets=("set",))
    spec, report = backend.stage_data(spec, "vision", [DataInput("set", files=files)])
    assert (report.copied_files, report.packed_files) == (300, 300)
    assert "300 file(s) read from packs of the object store" in report.summary()
    # One GET of the pack's one run of members, no file's own GET; the bytes sent are the pack's and the end.
    assert len(packed_folder.ranges) == 1 and packed_folder.relayed == []
    assert backend.transport.bytes_put == len(packed_folder.pack) + 1024
    job_id = backend.submit(spec)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    out = backend.read_output(spec.workdir, "stdout").decode().split("RESULT\n", 1)[-1].split()[:3]
    forty_two = next(f for f in files if f.path == "img/042.jpg")
    assert out == [forty_two.sha256, "img/042.jpg", "300"]

    # A cache that holds all but a few files: only their runs of the pack are read (read in Python this time, over
    # paramiko, where OpenSSH's client spliced them above).
    cache = backend.settings["data_cache"] + "/vision"
    gone = files[10:13] + [files[200]]
    _remote(backend, f"cd {cache} && rm -f " + " ".join(f.sha256 for f in gone))
    packed_folder.ranges.clear()
    backend.transport.bulk = "paramiko"
    _, again = backend.stage_data(make_spec("true", datasets=("set",)), "vision", [DataInput("set", files=files)])
    assert (again.packed_files, again.reused_files, len(packed_folder.ranges)) == (4, 296, 2)
    for f in gone:
        assert _remote(backend, f"sha256sum {cache}/{f.sha256}").split()[0] == f.sha256


@pytest.mark.parametrize("damage", ["a member's bytes changed", "the pack deleted"])
def test_a_pack_that_is_damaged_or_gone_costs_nothing_but_time_each_file_comes_from_its_own_object(
        cluster_backend, make_spec, packed_folder, damage):
    backend = cluster_backend
    backend.settings["data_cache"] += "-" + os.urandom(3).hex()  # this test's own: its listing is checked
    files = packed_folder.files
    if damage == "the pack deleted":
        packed_folder.put(None)
        expect_relayed = 300
    else:
        damaged = bytearray(packed_folder.pack)
        damaged[files[5].packed.offset + 512] ^= 0xFF  # the first byte of the sixth file's content
        packed_folder.put(bytes(damaged))
        expect_relayed = 1
    spec = make_spec('cd "$KAKEHASHI_DATA/set" && sha256sum img/*.jpg | sha256sum', datasets=("set",))
    spec, report = backend.stage_data(spec, "vision", [DataInput("set", files=files)])
    assert report.copied_files == 300 and report.packed_files == 300 - expect_relayed
    assert len(packed_folder.relayed) == expect_relayed  # each a GET of the file's own object
    cache = backend.settings["data_cache"] + "/vision"
    listing = _remote(backend, f"ls -A {cache}").split()
    assert sorted(listing) == sorted(f.sha256 for f in files)  # nothing else: no part file, no damaged copy
    for f in files[:8]:
        assert _remote(backend, f"sha256sum {cache}/{f.sha256}").split()[0] == f.sha256


@pytest.fixture
def stalling_store():
    """An HTTP server standing in for a store that serves a pack's range, sends half of it, then nothing for
    `server.pause` seconds (or for good), then the rest: what a store stuck mid-answer looks like to the worker."""
    import http.server
    import threading
    import time

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the standard library's name
            start, end = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
            body = server.data[start:end + 1]
            self.send_response(206)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            time.sleep(server.pause)
            self.wfile.write(body[len(body) // 2:])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/pack.tar"
    yield server
    server.shutdown()


def test_a_pack_whose_store_stalls_keeps_renewing_the_lease_for_a_while_then_gives_up_and_leaves_nothing_behind(
        cluster_backend, make_spec, monkeypatch, stalling_store):
    import dataclasses
    import time

    import backends.staging_copy
    import backends.transport
    from backends.base import Packed
    from backends.staging_copy import TarStream
    from backends.transport import TransportError

    monkeypatch.setattr(backends.transport, "HEARTBEAT_EVERY", 0.1)
    cluster_backend.settings["data_cache"] += "-" + os.urandom(3).hex()

    def packed(n: int):
        files = [_file(f"{i}.bin", os.urandom(300_000)) for i in range(n)]
        stream = TarStream(files, archive_end=False)
        stalling_store.data = b"".join(iter(lambda: stream.read(1 << 20), b""))
        places = {sha: offset for sha, offset, _, _ in stream.members}
        return [dataclasses.replace(f, packed=Packed("pack.tar", places[f.sha256], lambda: stalling_store.url))
                for f in files]

    # A pause shorter than the stall limit: the lease is renewed meanwhile, and the files arrive from the pack.
    stalling_store.pause, beats = 1.5, []
    files = packed(3)
    _, report = cluster_backend.stage_data(make_spec("true", datasets=("slow",)), "vision",
                                           [DataInput("slow", files=files)], heartbeat=lambda: beats.append(1))
    assert (report.copied_files, report.packed_files) == (3, 3) and len(beats) >= 8

    # A store that stops sending for good: given up after the stall limit, retryable, nothing left half-written.
    monkeypatch.setattr(backends.staging_copy, "STALL_SECONDS", 1.0)
    stalling_store.pause = 30
    stuck = packed(2)
    with pytest.raises(TransportError, match="stalled: no byte moved for 1 s"):
        cluster_backend.stage_data(make_spec("true", datasets=("stuck",)), "vision", [DataInput("stuck", files=stuck)])
    cache = cluster_backend.settings["data_cache"] + "/vision"
    settle = time.monotonic() + 10

    def leftovers():
        return [n for n in _remote(cluster_backend, f"ls -A {cache}").split() if ".part-" in n or ".incoming-" in n]

    while leftovers() and time.monotonic() < settle:
        time.sleep(0.2)
    listing = _remote(cluster_backend, f"ls -A {cache}").split()
    # The first file of the stuck pack came whole before the stall (checked, kept); the second never did.
    assert all(f.sha256 in listing for f in files) and stuck[-1].sha256 not in listing and not leftovers()
    for f in stuck[:-1]:
        if f.sha256 in listing:
            assert _remote(cluster_backend, f"sha256sum {cache}/{f.sha256}").split()[0] == f.sha256
