"""The PBS backend without a cluster: rendering per dialect, and every command it sends run by a real bash against
recorded scheduler outputs.

OpenPBS / PBS Pro cannot be installed here, so its side is tested on what real PBS Pro servers printed
(tests/backends/fixtures/pbspro/README.md says where each sample comes from). The backend's command lines are
not mocked: `StubLoginNode` runs them unchanged in bash, with a private $HOME and stub `qsub`/`qstat`/`qdel`/
`qselect` first in PATH that print the recorded text, so the quoting, the job-directory index and the trailer
the query prints are all exercised. The Torque dialect is also run against the real wrappers by
test_scheduler_contract.py; its recorded outputs here come from that cluster.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from backends.base import (
    ArrayElement,
    BackendError,
    InvalidJobSpec,
    JobSpec,
    Launcher,
    Resources,
    State,
    SubmitRefused,
)
from backends.pbs import PBSBackend
from backends.pbs_parse import parse_duration, parse_time
from backends.pbspro import parse_qstat_json
from backends.torque import parse_qstat_text
from backends.transport import CommandResult, LocalTransport, Transport

FIXTURES = Path(__file__).parent / "fixtures" / "pbspro"
AURORA = "aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov"


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def merged_json(*names: str) -> str:
    """Several recorded `qstat -f -F json` answers as the one document PBS prints for all their jobs."""
    documents = [json.loads(recorded(name)) for name in names]
    merged = {key: value for key, value in documents[0].items() if key != "Jobs"}
    merged["Jobs"] = {job_id: job for document in documents for job_id, job in document["Jobs"].items()}
    return json.dumps(merged, indent=4)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class StubLoginNode(Transport):
    """bash on this machine standing in for a login node: the backend's command lines run as they are, with a
    private $HOME and stub scheduler commands that print recorded outputs and note how they were called."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.bin = root / "bin"
        self.home.mkdir(parents=True)
        self.bin.mkdir()
        self.local = LocalTransport(self.home)
        self.commands: list[str] = []

    def stub(self, name: str, *, stdout: str = "", stderr: str = "", exit_status: int = 0) -> None:
        (self.root / f"{name}.stdout").write_text(stdout)
        (self.root / f"{name}.stderr").write_text(stderr)
        note = shlex.quote(str(self.root / name))
        script = (
            "#!/bin/bash\n"
            f'printf "%s\\n" "$@" > {note}.args\n'
            f'printf "%s" "${{TZ-unset}}" > {note}.tz\n'
            f"pwd > {note}.cwd\n"
            f"cat {note}.stdout\n"
            f"cat {note}.stderr >&2\n"
            f"exit {exit_status}\n"
        )
        path = self.bin / name
        path.write_text(script)
        path.chmod(0o755)

    def called(self, name: str) -> list[str]:
        return (self.root / f"{name}.args").read_text().splitlines()

    def noted(self, name: str, what: str) -> str:
        return (self.root / f"{name}.{what}").read_text().strip()

    def clock(self, epoch: int) -> None:
        """The login node's `date +%s`."""
        path = self.bin / "date"
        path.write_text(f'#!/bin/bash\nif [ "$1" = "+%s" ]; then echo {epoch}; else exec /bin/date "$@"; fi\n')
        path.chmod(0o755)

    def index(self, job_id: str, *, exit_status: str | None = None, cancel: bool = False) -> Path:
        """A job directory as a submit leaves it, linked under its id, with what the job and cancel() write."""
        job_dir = self.home / "kakehashi-jobs" / job_id.replace("[", "_").replace("]", "_")
        job_dir.mkdir(parents=True)
        links = self.home / ".kakehashi" / "pbs-jobs"
        links.mkdir(parents=True, exist_ok=True)
        (links / job_id).symlink_to(job_dir)
        if exit_status is not None:
            (job_dir / "kakehashi-exit-status").write_text(exit_status)
        if cancel:
            (job_dir / "kakehashi-cancel-requested").write_text("1763771325\n")
        return job_dir

    def run_shell(self, command: str, *, stdin: bytes | None = None, timeout: float | None = None) -> CommandResult:
        self.commands.append(command)
        prefix = f'export HOME={shlex.quote(str(self.home))} PATH={shlex.quote(str(self.bin))}:"$PATH"; '
        return self.local.run_shell(prefix + command, stdin=stdin, timeout=timeout)

    def read_file(self, path: str, *, offset: int = 0, limit: int = 1 << 20) -> bytes:
        return self.local.read_file(path, offset=offset, limit=limit)


@pytest.fixture
def node(tmp_path) -> StubLoginNode:
    return StubLoginNode(tmp_path)


def spec(**kwargs) -> JobSpec:
    resources = kwargs.pop("resources", Resources())
    defaults = {"name": "kh-0123456789-train", "payload": "echo hi\n", "walltime_seconds": 600, "workdir": "jobs/x"}
    return JobSpec(resources=resources, **{**defaults, **kwargs})


# ------------------------------------------------------------------------------------------------- rendering


def test_pbspro_asks_for_gpus_per_chunk_and_spreads_nodes():
    job = spec(
        name="train",
        walltime_seconds=3 * 3600 + 5,
        resources=Resources(nodes=2, gpus_per_node=4, gpu_type="a100", cpus_per_node=32, memory_gb=200,
                            mapping={"queue": "gpu", "select": "gpu_model=a100"}),
        group="gaa50000",
        launcher=Launcher.TORCHRUN,
    )
    assert PBSBackend(None).directives(job) == [
        "#PBS -N train",
        "#PBS -S /bin/bash",
        "#PBS -l select=2:ncpus=32:ngpus=4:mem=200gb:mpiprocs=4:gpu_model=a100",
        "#PBS -l walltime=03:00:05",
        "#PBS -l place=scatter",
        "#PBS -P gaa50000",
        "#PBS -q gpu",
        "#PBS -o stdout.log",
        "#PBS -e stderr.log",
        "#PBS -k oed",
    ]


def test_pbspro_site_settings_account_queue_and_output():
    backend = PBSBackend(None, {"account_option": "-A", "queue": "workq", "direct_write": False})
    assert backend.directives(spec(group="proj1")) == [
        "#PBS -N kh-0123456789-train",
        "#PBS -S /bin/bash",
        "#PBS -l select=1:ncpus=1",
        "#PBS -l walltime=00:10:00",
        "#PBS -A proj1",
        "#PBS -q workq",
        "#PBS -o stdout.log",
        "#PBS -e stderr.log",
    ]
    # mpirun needs a CPU per rank: more ranks than CPUs asked for raise ncpus.
    mpi = spec(resources=Resources(cpus_per_node=2), launcher=Launcher.MPIRUN, procs_per_node=8)
    assert "#PBS -l select=1:ncpus=8:mpiprocs=8" in backend.directives(mpi)


def test_a_sweep_is_never_rendered_as_a_pbs_array():
    for flavour in ("pbspro", "torque"):
        backend = PBSBackend(None, {"dialect": flavour})
        assert not backend.supports_arrays
        with pytest.raises(InvalidJobSpec, match="sweep runs as separate jobs"):
            backend.render(spec(array=(ArrayElement(1), ArrayElement(2))))


def test_torque_asks_for_gpus_in_the_nodes_spec_and_leaves_output_paths_to_the_command_line():
    backend = PBSBackend(None, {"dialect": "torque"})
    gpu = spec(resources=Resources(gpus_per_node=8, gpu_type="a100", mapping={"queue": "gpu", "property": "a100"}),
               group="kkdemo")
    assert backend.directives(gpu) == [
        "#PBS -N kh-0123456789-train",
        "#PBS -S /bin/bash",
        "#PBS -l nodes=1:ppn=1:a100:gpus=8",
        "#PBS -l walltime=00:10:00",
        "#PBS -A kkdemo",
        "#PBS -q gpu",
    ]
    # Torque's mem is for the whole job and single-node only; on several nodes the request is per process.
    assert "#PBS -l mem=64gb" in backend.directives(spec(resources=Resources(memory_gb=64)))
    two = spec(resources=Resources(nodes=2, cpus_per_node=16, memory_gb=64))
    assert backend.directives(two)[2:5] == ["#PBS -l nodes=2:ppn=16", "#PBS -l walltime=00:10:00",
                                           "#PBS -l pmem=4096mb"]


@pytest.mark.parametrize(
    ("dialect", "mapping"),
    [
        ("pbspro", {"select": "ngpus=1,walltime=999:00:00"}),  # "," starts another resource
        ("pbspro", {"select": "ncpus=1+4:ngpus=8"}),  # "+" starts another chunk
        ("pbspro", {"place": "scatter,walltime=999:00:00"}),
        ("pbspro", {"queue": "gpu,walltime=1"}),
        ("torque", {"property": "a100:ppn=64"}),
        ("torque", {"property": "a100,walltime=999:00:00"}),
        ("torque", {"queue": "gpu\n#PBS -A other"}),
    ],
)
def test_an_admin_mapping_value_cannot_smuggle_in_another_resource(dialect, mapping):
    with pytest.raises(InvalidJobSpec):
        PBSBackend(None, {"dialect": dialect}).render(spec(resources=Resources(mapping=mapping)))


@pytest.mark.parametrize(
    "settings",
    [{"dialect": "lsf"}, {"account_option": "-W"}, {"queue": "gpu -A x"}, {"index_dir": "../elsewhere"}],
)
def test_settings_a_directive_could_not_hold_are_refused_when_the_backend_is_made(settings):
    with pytest.raises(ValueError):
        PBSBackend(None, settings)


@pytest.mark.parametrize("dialect", ["pbspro", "torque"])
def test_the_script_is_bash_that_enters_the_job_directory_and_reads_hosts_from_the_nodefile(dialect):
    script = PBSBackend(None, {"dialect": dialect}).render(spec(launcher=Launcher.TORCHRUN,
                                                                resources=Resources(nodes=2, gpus_per_node=2)))
    assert subprocess.run(["bash", "-n"], input=script.encode(), capture_output=True).returncode == 0
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    # PBS starts a job in the home directory: leave it before anything is written.
    assert lines.index('cd "${PBS_O_WORKDIR:-$PWD}" || exit 1') < lines.index('export KAKEHASHI_JOB_DIR="$PWD"')
    # Each host once, in the nodefile's order: the first is where the job script runs.
    assert '{ cat "$PBS_NODEFILE" ; } 2>/dev/null | awk \'!seen[$0]++\' > hosts.txt' in lines


@pytest.mark.parametrize(("job_id", "port"), [("4242[3].pbs01.example.org", "29742"), ("36", "29536"), ("", "29500")])
def test_a_job_id_with_a_server_suffix_still_gives_a_port(job_id, port):
    script = PBSBackend(None).render(spec())
    lines = [line for line in script.splitlines() if line.startswith(("_kh_id_digits=", "export MASTER_PORT="))]
    result = subprocess.run(["bash", "-c", "\n".join([*lines, 'printf %s "$MASTER_PORT"'])], capture_output=True,
                            env={"PATH": os.environ["PATH"], "PBS_JOBID": job_id}, text=True)
    assert (result.stdout, result.stderr) == (port, "")


def test_a_port_another_program_listens_on_where_rank_0_will_is_skipped_for_the_next_free_one():
    import socket

    script = PBSBackend(None).render(spec())
    lines = [line for line in script.splitlines()
             if line.startswith(("_kh_id_digits=", "export MASTER_PORT=", "for _kh_try in"))]

    def free(port: int) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) != 0

    # A job id whose port and the next are free now: the shared test cluster's own trainings take ports of this range.
    job = next(n for n in range(36, 999) if free(29500 + n) and free(29501 + n))
    with socket.socket() as taken:  # the job's port, held as a job whose id ends in the same three digits would
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 29500 + job))
        taken.listen()
        result = subprocess.run(["bash", "-c", "\n".join(["MASTER_ADDR=127.0.0.1", *lines, 'printf %s "$MASTER_PORT"'])],
                                capture_output=True, env={"PATH": os.environ["PATH"], "PBS_JOBID": str(job)}, text=True)
    assert (result.stdout, result.stderr) == (str(29501 + job), "")


# ------------------------------------------------------------------------------------------------ submitting


def test_pbspro_submit_stages_the_job_and_links_its_directory_under_the_id(node):
    node.stub("qsub", stdout="1234.pbs01\n")
    job = spec(files={"params.json": b"{}"})
    assert PBSBackend(node).submit(job) == "1234.pbs01"
    job_dir = node.home / "jobs" / "x"
    assert node.called("qsub") == ["job.sh"]
    assert node.noted("qsub", "cwd") == str(job_dir)
    assert {p.name for p in job_dir.iterdir()} == {"job.sh", "payload.sh", "params.json", "scheduler-id"}
    assert (job_dir / "scheduler-id").read_text() == "1234.pbs01\n"
    assert (node.home / ".kakehashi" / "pbs-jobs" / "1234.pbs01").resolve() == job_dir.resolve()


def test_torque_submit_gives_the_output_paths_to_qsub(node):
    node.stub("qsub", stdout="36\n")
    assert PBSBackend(node, {"dialect": "torque"}).submit(spec()) == "36"
    assert node.called("qsub") == ["-o", "stdout.log", "-e", "stderr.log", "job.sh"]


@pytest.mark.parametrize(
    ("dialect", "stdout", "stderr", "message"),
    [
        ("pbspro", "", recorded("cirrus-qsub-refused.stderr.txt"), "Job violates queue and/or server resource limits"),
        ("torque", recorded("slurm-wlm-torque-qsub-gpu9.stdout.txt"), "",
         "Batch job submission failed: Requested node configuration is not available"),
    ],
)
def test_a_refusal_carries_the_schedulers_own_words(node, dialect, stdout, stderr, message):
    node.stub("qsub", stdout=stdout, stderr=stderr, exit_status=1)
    with pytest.raises(SubmitRefused) as refused:
        PBSBackend(node, {"dialect": dialect}).submit(spec())
    assert str(refused.value) == message
    assert not (node.home / ".kakehashi").exists()


@pytest.mark.parametrize("why", ["Connection refused", "No route to host"])
def test_a_server_that_does_not_answer_is_not_a_refusal(node, why):
    # The wording of pbs_connect's failure, as recorded for qstat in baw-qstat-connection-refused.stderr.txt
    # (OpenPBS 22.05) and baw-aqua-pbspro-2025.2-qstat-no-route.stderr.txt (PBS Professional 2025.2).
    node.stub("qsub", stderr=f"{why}\nqsub: cannot connect to server pbs01 (errno=15010)\n", exit_status=1)
    with pytest.raises(BackendError) as failed:
        PBSBackend(node).submit(spec())
    assert not isinstance(failed.value, SubmitRefused)


def test_qsub_that_prints_no_job_id_is_an_error_and_indexes_nothing(node):
    node.stub("qsub", stdout="qsub: warning: something odd\n")
    with pytest.raises(BackendError, match="no job id"):
        PBSBackend(node).submit(spec())
    assert not any((node.home / ".kakehashi" / "pbs-jobs").glob("*"))


def test_find_returns_the_recorded_id_before_asking_the_scheduler(node):
    node.stub("qselect", stdout="77.pbs01\n")
    backend = PBSBackend(node)
    assert backend.find(spec()) == "77.pbs01"
    me = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    assert node.called("qselect") == ["-x", "-u", me, "-N", "kh-0123456789-train"]
    job_dir = node.home / "jobs" / "x"
    job_dir.mkdir(parents=True)
    (job_dir / "scheduler-id").write_text("76.pbs01\n")
    assert backend.find(spec()) == "76.pbs01"
    node.stub("qselect")
    assert backend.find(spec(workdir="jobs/y")) is None


def test_torque_find_reads_job_names_from_the_full_listing(node):
    node.stub("qstat", stdout=recorded("slurm-wlm-torque-qstat-f-live.txt"))
    backend = PBSBackend(node, {"dialect": "torque"})
    assert backend.find(spec(name="kkhold")) == "312"
    assert backend.find(spec(name="kkhol")) is None


def test_cancel_marks_the_job_directory_then_deletes_the_job(node):
    job_dir = node.index("5.pbs01")
    node.stub("qdel")
    PBSBackend(node).cancel("5.pbs01")
    assert node.called("qdel") == ["5.pbs01"]
    assert (job_dir / "kakehashi-cancel-requested").read_text().strip().isdigit()


@pytest.mark.parametrize(
    ("stderr", "gone"),
    [
        ("", True),  # slurm-wlm-torque's qdel: exit 1 and silence for a job it does not know
        ("qdel: Unknown Job Id 5.pbs01\n", True),
        ("qdel: Job has finished\n", True),  # PBS Pro, a job in the history (baw-server connection_spec.rb)
        ("qdel: Unauthorized Request  5.pbs01\n", False),
    ],
)
def test_cancelling_a_job_that_already_ended_is_not_an_error(node, stderr, gone):
    node.stub("qdel", stderr=stderr, exit_status=1)
    if gone:
        PBSBackend(node).cancel("5.pbs01")
    else:
        with pytest.raises(BackendError, match="Unauthorized"):
            PBSBackend(node).cancel("5.pbs01")


def test_ids_that_are_not_pbs_ids_never_reach_a_shell(node):
    backend = PBSBackend(node)
    for bad in (["1; rm -rf ~"], ["$(id)"], ["12 13"], [""]):
        with pytest.raises(BackendError):
            backend.statuses(bad)
    with pytest.raises(BackendError):
        backend.cancel("5.pbs01; reboot")
    assert node.commands == []


# ------------------------------------------------------------------------------------------ PBS Pro tracking

PBSPRO_FILES = (
    "aurora-qstat-x-f-F-json.json",
    "aurora-qstat-x-f-F-json-queue.json",
    "iitd-qstat-f-F-json-running.json",
    "constructed-failed-exit-3.json",
    "constructed-qdel-running.json",
    "constructed-walltime-before-openpbs-20.json",
    "constructed-array.json",
)
PBSPRO_EXPECTED = {
    # id: (state, exit code, reason starts with)
    f"6617175.{AURORA}": (State.TIMED_OUT, None, "walltime exceeded (06:01:24 used of 06:00:00)"),
    f"6631289.{AURORA}": (State.COMPLETED, 0, ""),
    f"4905472.{AURORA}": (State.PENDING, None, "Job held by user3 on Wed May 21 19:15:37 2025"),
    f"4683812.{AURORA}": (State.PENDING, None, "Not Running: Insufficient amount of resource: at_queue"),
    f"4846771.{AURORA}": (State.CANCELLED, None, "deleted (qdel) before it started"),
    f"4345644.{AURORA}": (State.PENDING, None, "job held, too many failed attempts to run"),
    "3472664.pbshpc": (State.RUNNING, None, ""),
    f"6631301.{AURORA}": (State.FAILED, 3, "exit code 3"),
    f"6631302.{AURORA}": (State.CANCELLED, 143, "deleted (qdel by user2@aurora-uan-0009"),
    f"6617176.{AURORA}": (State.TIMED_OUT, 143, "walltime exceeded (06:01:24 used of 06:00:00)"),
    "1016[].725ccdf1a5fb": (State.RUNNING, None, "array running"),
    "1017[].725ccdf1a5fb": (State.FAILED, None, "at least one subjob exited non-zero (Queued:0 Running:0"),
}


def test_every_recorded_pbspro_state_is_read_from_one_qstat_call(node):
    node.stub("qstat", stdout=merged_json(*PBSPRO_FILES))
    backend = PBSBackend(node)
    ids = list(PBSPRO_EXPECTED)
    statuses = backend.statuses(ids)
    assert len(node.commands) == 1
    assert node.called("qstat") == ["-f", "-F", "json", "-x", *ids]
    assert node.noted("qstat", "tz") == "UTC0"
    assert set(statuses) == set(ids)
    for job_id, (state, exit_code, reason) in PBSPRO_EXPECTED.items():
        status = statuses[job_id]
        assert (status.state, status.exit_code) == (state, exit_code), job_id
        assert status.reason.startswith(reason), (job_id, status.reason)

    records = backend.final_records(ids)
    assert len(node.commands) == 2
    assert set(records) == {i for i, (state, _, _) in PBSPRO_EXPECTED.items() if state.is_final}
    walltime = records[f"6617175.{AURORA}"]
    assert (walltime.started_at, walltime.ended_at) == (utc("2025-07-23 15:35:36"), utc("2025-07-23 21:37:59"))
    assert (walltime.elapsed_seconds, walltime.nodes) == (6 * 3600 + 84, 40)
    done = records[f"6631289.{AURORA}"]
    assert (done.elapsed_seconds, done.nodes, done.raw["Exit_status"], done.raw["substate"]) == (110, 30, "0", "92")
    assert "Variable_List.PBS_O_WORKDIR" not in done.raw
    queued_then_deleted = records[f"4846771.{AURORA}"]
    assert (queued_then_deleted.started_at, queued_then_deleted.ended_at) == (None, utc("2025-07-16 17:47:36"))


# Other versions' answers (fixtures README): PBS Pro 19.0.0 at MetaCentrum and OpenPBS 19.0.0 and 23.06.06 test
# servers, beside the 2021.1.3 and 2022.1.7 ones above.
OTHER_VERSIONS = {
    "openpbs-19.0-qstat-x-f-F-json-held.json": {"157.pbs": (State.PENDING, None, "held")},
    "metacentrum-pbs-19.0-qstat-x-f-F-json-running.json": {
        "12860476.meta-pbs.metacentrum.cz": (State.RUNNING, None, ""),
    },
    "openpbs-23.06-qstat-x-f-F-json.json": {
        "1004.pbs": (State.COMPLETED, 0, ""),
        "1005.pbs": (State.COMPLETED, 0, ""),
        "1006.pbs": (State.RUNNING, None, ""),
    },
}


@pytest.mark.parametrize("sample", OTHER_VERSIONS)
def test_pbs_19_and_openpbs_23_answers_are_read_like_the_2021_and_2022_ones(node, sample):
    node.stub("qstat", stdout=recorded(sample))
    expected = OTHER_VERSIONS[sample]
    statuses = PBSBackend(node).statuses(list(expected))
    assert {i: (s.state, s.exit_code) for i, s in statuses.items()} == {i: e[:2] for i, e in expected.items()}
    for job_id, (_, _, reason) in expected.items():
        assert statuses[job_id].reason.startswith(reason), (job_id, statuses[job_id].reason)


def test_an_openpbs_23_job_that_finished_has_its_times_from_the_history(node):
    node.stub("qstat", stdout=recorded("openpbs-23.06-qstat-x-f-F-json.json"))
    record = PBSBackend(node).final_records(["1004.pbs", "1006.pbs"])
    assert set(record) == {"1004.pbs"}  # 1006 still runs
    done = record["1004.pbs"]
    assert (done.started_at, done.ended_at) == (utc("2025-06-19 10:36:47"), utc("2025-06-19 10:37:18"))
    assert (done.elapsed_seconds, done.nodes, done.raw["Exit_status"], done.raw["substate"]) == (30, 1, "0", "92")


def test_qsub_and_qstat_spelling_the_server_differently_still_match(node):
    node.stub("qstat", stdout=recorded("aurora-qstat-x-f-F-json.json"))
    statuses = PBSBackend(node).statuses(["6631289.aurora-pbs-0001", "6631290.aurora-pbs-0001"])
    assert statuses["6631289.aurora-pbs-0001"].state == State.COMPLETED
    assert "6631290.aurora-pbs-0001" not in statuses


def test_jobs_the_history_no_longer_holds_are_judged_by_their_own_directory(node):
    # PBS Pro without job history (the default), or past job_history_duration: "Unknown Job Id", exit 153.
    unknown = "".join(f"qstat: Unknown Job Id {i}.pbs01\n" for i in (5555, 5556, 5557))
    node.stub("qstat", stdout=recorded("baw-qstat-connection-refused.stdout.json"), stderr=unknown, exit_status=153)
    finished = node.index("5555.pbs01", exit_status="0\n")
    os.utime(finished / "kakehashi-exit-status", (1763771000, 1763771000))
    node.index("5556.pbs01", cancel=True)
    node.index("5557.pbs01")
    backend = PBSBackend(node)
    ids = ["5555.pbs01", "5556.pbs01", "5557.pbs01"]
    assert backend.statuses(ids) == {}
    records = backend.final_records(ids)
    assert set(records) == {"5555.pbs01", "5556.pbs01"}
    assert (records["5555.pbs01"].state, records["5555.pbs01"].exit_code) == (State.COMPLETED, 0)
    assert records["5555.pbs01"].ended_at == datetime.fromtimestamp(1763771000, UTC)
    assert records["5556.pbs01"].state == State.CANCELLED


@pytest.mark.parametrize(
    "sample",
    [
        "baw-qstat-connection-refused",  # OpenPBS 22.05.11, server down
        "baw-aqua-pbspro-2025.2-qstat-no-route",  # PBS Professional 2025.2.0 at QUT, server host unreachable
    ],
)
def test_a_server_that_does_not_answer_is_an_error_not_an_empty_queue(node, sample):
    node.stub("qstat", stdout=recorded(f"{sample}.stdout.json"), stderr=recorded(f"{sample}.stderr.txt"),
              exit_status=255)
    assert parse_qstat_json(recorded(f"{sample}.stdout.json")) == {}  # a header, no "Jobs": it says nothing
    backend = PBSBackend(node)
    with pytest.raises(BackendError, match="cannot connect to server"):
        backend.statuses(["1.pbs01"])
    with pytest.raises(BackendError, match="cannot connect to server"):
        backend.final_records(["1.pbs01"])


def test_a_query_cut_short_is_an_error():
    class Silent(Transport):
        def run_shell(self, command, *, stdin=None, timeout=None):
            return CommandResult(255, "", "Connection to login node closed.")

        def read_file(self, path, *, offset=0, limit=1 << 20):
            return b""

    with pytest.raises(BackendError, match="did not run to its end"):
        PBSBackend(Silent()).statuses(["1.pbs01"])


def test_an_environment_value_printed_without_escaping_does_not_hide_the_jobs():
    text = recorded("aurora-qstat-x-f-F-json.json")
    broken = text.replace('"PBS_O_SHELL":"/bin/bash"', '"PBS_O_SHELL":"/bin/ba\\sh"', 1)
    assert broken != text
    with pytest.raises(ValueError):
        json.loads(broken)
    jobs = parse_qstat_json(broken)
    assert jobs[f"6617175.{AURORA}"]["Exit_status"] == "-29"
    assert parse_qstat_json("") == {}
    assert parse_qstat_json(recorded("baw-qstat-connection-refused.stdout.json")) == {}
    with pytest.raises(BackendError):
        parse_qstat_json('{"Jobs": {"1.x": {"job_state": "Q",')


def test_pbspro_exit_status_as_a_string_still_means_walltime(node):
    document = json.loads(recorded("aurora-qstat-x-f-F-json.json"))
    job = document["Jobs"][f"6617175.{AURORA}"]
    job["Exit_status"] = "-29"  # printed as a string (baw-server issues #875, #878, #880)
    job["comment"] = "Job run at Wed Jul 23 at 20:35"
    node.stub("qstat", stdout=json.dumps(document))
    record = PBSBackend(node).final_records([f"6617175.{AURORA}"])[f"6617175.{AURORA}"]
    assert record.state == State.TIMED_OUT


def test_time_and_duration_parsing():
    assert parse_time("Thu May  8 08:42:45 2025") == utc("2025-05-08 08:42:45")
    assert parse_time("1763771000") == datetime.fromtimestamp(1763771000, UTC)
    assert parse_time("UNKNOWN") is None
    assert parse_time("0") is None
    assert parse_duration("06:01:24") == 21684
    assert parse_duration("1234:00:00") == 1234 * 3600
    assert parse_duration("90") == 90
    assert parse_duration("soon") is None


# ------------------------------------------------------------------------------------------- Torque tracking

TORQUE_TEXT = recorded("slurm-wlm-torque-qstat-f-finished.txt") + recorded("slurm-wlm-torque-qstat-f-live.txt")


def test_every_recorded_wrapper_state_is_read_from_one_call_with_each_jobs_own_exit_status(node):
    node.stub("qstat", stdout=TORQUE_TEXT)
    node.index("98", exit_status="0\n")
    node.index("99", exit_status="3\n")
    node.index("154", cancel=True)  # cancelled while running: killed before writing its status
    node.index("167", cancel=True)  # cancelled while held: never ran
    node.index("170", exit_status="")  # killed at its walltime while opening the file (seen on the cluster)
    backend = PBSBackend(node, {"dialect": "torque"})
    ids = ["98", "99", "154", "167", "170", "311", "312"]
    statuses = backend.statuses(ids)
    assert len(node.commands) == 1
    assert node.called("qstat") == ["-f", *ids]
    assert node.noted("qstat", "tz") == "UTC0"
    assert {i: (s.state, s.exit_code) for i, s in statuses.items()} == {
        "98": (State.COMPLETED, 0),
        "99": (State.FAILED, 3),
        "154": (State.CANCELLED, None),
        "167": (State.CANCELLED, None),
        "170": (State.TIMED_OUT, None),
        "311": (State.RUNNING, None),
        "312": (State.PENDING, None),
    }
    assert statuses["167"].reason == "deleted from the queue before it started"
    assert statuses["170"].reason == "walltime exceeded (00:01:21 used of 00:01:00)"

    records = backend.final_records(ids)
    assert set(records) == {"98", "99", "154", "167", "170"}
    ok = records["98"]
    assert (ok.started_at, ok.ended_at, ok.elapsed_seconds, ok.nodes) == (
        utc("2026-11-22 00:28:21"), utc("2026-11-22 00:28:23"), 2, 1)
    assert records["167"].started_at is None


def test_a_killed_job_waits_for_its_exit_file_before_it_is_called_failed(node):
    node.stub("qstat", stdout=recorded("slurm-wlm-torque-qstat-f-finished.txt"))
    node.index("154")  # no file and no cancel from Kakehashi: qdel by hand, a signal, a node failure...
    backend = PBSBackend(node, {"dialect": "torque"})
    ended = int(utc("2026-11-22 00:28:45").timestamp())
    node.clock(ended + 5)
    assert backend.statuses(["154"])["154"].state == State.RUNNING
    assert backend.final_records(["154"]) == {}
    node.clock(ended + 31)
    record = backend.final_records(["154"])["154"]
    assert (record.state, record.exit_code) == (State.FAILED, None)
    assert record.reason.startswith("ended without recording an exit status")


@pytest.mark.parametrize(
    ("job_id", "cancel", "expected"),
    [
        ("170", False, (State.TIMED_OUT, 143)),  # ran its whole walltime: the 143 is the walltime's SIGTERM
        ("154", True, (State.CANCELLED, 143)),
        ("154", False, (State.FAILED, 143)),
    ],
)
def test_a_kill_status_written_on_the_way_out_does_not_hide_the_walltime_or_the_cancel(node, job_id, cancel,
                                                                                       expected):
    node.stub("qstat", stdout=recorded("slurm-wlm-torque-qstat-f-finished.txt"))
    node.index(job_id, exit_status="143\n", cancel=cancel)
    record = PBSBackend(node, {"dialect": "torque"}).final_records([job_id])[job_id]
    assert (record.state, record.exit_code) == expected


def test_a_real_pbs_server_says_the_exit_status_itself(node):
    text = recorded("torque-pbs_server-qstat-f-subjob.txt")
    job_id = "48[1].torque01.bcgsc.ca"
    attributes = parse_qstat_text(text)[job_id]
    # Continuation lines are cut anywhere, even mid-word, and one ends a value at column 0.
    assert attributes["comment"] == (
        "Job 48[].torque01.bcgsc.ca deleted because its dependency of array 43[].torque01.bcgsc.ca can never be "
        "satisfied"
    )
    assert "PBS_O_HOST=torque01.bcgsc.ca" in attributes["Variable_List"]
    assert attributes["Variable_List"].endswith("modulecmd bash $*`\\}")
    assert attributes["euser"] == "user8"
    node.stub("qstat", stdout=text)
    record = PBSBackend(node, {"dialect": "torque"}).final_records([job_id])[job_id]
    assert (record.state, record.exit_code, record.started_at) == (State.FAILED, 143, None)
    assert record.reason == (
        "killed by signal 15 (SIGTERM) (Job 48[].torque01.bcgsc.ca deleted because its dependency of array "
        "43[].torque01.bcgsc.ca can never be satisfied)"
    )
    assert record.ended_at == utc("2018-05-29 18:27:33")


def test_a_real_pbs_server_job_that_exited_0_is_completed_and_its_comment_is_no_reason(node):
    text = recorded("torque-pbs_server-qstat-f-completed.txt")
    job_id = "9.torque01.bcgsc.ca"
    node.stub("qstat", stdout=text)
    backend = PBSBackend(node, {"dialect": "torque"})
    record = backend.final_records([job_id])[job_id]
    assert (record.state, record.exit_code, record.reason) == (State.COMPLETED, 0, "")
    assert record.raw["comment"] == "Job started on Tue May 29 at 09:37"  # kept with the record, not shown as why
    assert (record.started_at, record.ended_at, record.elapsed_seconds) == (
        utc("2018-05-29 09:37:01"), utc("2018-05-29 09:38:01"), 60)
    # Nor does that note explain a job that failed.
    node.stub("qstat", stdout=text.replace("exit_status = 0", "exit_status = 3"))
    failed = backend.final_records([job_id])[job_id]
    assert (failed.state, failed.exit_code, failed.reason) == (State.FAILED, 3, "exit code 3")


def test_a_broken_scheduler_is_an_error_not_an_empty_queue(node):
    # slurm-wlm-torque's qstat when slurmctld does not answer: `die "Problem loading jobs.\n"` (exit 255).
    node.stub("qstat", stderr="Problem loading jobs.\n", exit_status=255)
    with pytest.raises(BackendError, match="Problem loading jobs"):
        PBSBackend(node, {"dialect": "torque"}).statuses(["98"])
    # Nothing known at all is exit 153 and silence: an empty answer, not an error.
    node.stub("qstat", exit_status=153)
    assert PBSBackend(node, {"dialect": "torque"}).statuses(["98"]) == {}
