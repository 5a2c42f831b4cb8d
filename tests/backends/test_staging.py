"""Datasets staged onto the real test clusters over SFTP, as the researcher's account (backends/staging.py)."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from backends.base import DataFile, DataInput, DataRefused, State
from tests.backends.conftest import wait_state
from tests.backends.test_scheduler_contract import _sge, _slurm

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
    assert backend.transport.puts == 4 and backend.transport.bytes_put == report.copied_bytes
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
    assert backend.transport.puts == 4
    job_id = backend.submit(again)
    assert wait_state(backend, job_id, lambda s: s.state.is_final).state == State.COMPLETED
    assert weights.sha256 in backend.read_output(again.workdir, "stdout").decode()
    assert _remote(backend, f"stat -c '%i %Y' {cache}/{weights.sha256}") == before
    # A retried dispatch stages the same job again: still nothing copied, the links still right.
    _, retry = backend.stage_data(again, "vision", datasets)
    assert retry.copied_files == 0
    assert _remote(backend, f"ls {cache}").split() == sorted(f.sha256 for f in (weights, *folder))


def test_bytes_that_arrive_with_another_checksum_refuse_the_dataset_and_leave_nothing_in_the_cache(
        cluster_backend, make_spec):
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
    import backends.staging

    monkeypatch.setattr(backends.staging, "HEARTBEAT_SECONDS", 0.0)  # every chunk, instead of every 15 s
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
    assert (first.copied_files, first.reused_files, alice.transport.puts) == (2, 0, 2)
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
    assert 2 <= alice.transport.puts + bob.transport.puts <= 4  # a file both started before either finished: twice

    # A new project's data: while bob copies the first file, alice stages the second whole; bob, looking at the
    # cache again before it, copies only the first.
    monkeypatch.setattr(backends.staging, "RECHECK_SECONDS", 0.0)
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
