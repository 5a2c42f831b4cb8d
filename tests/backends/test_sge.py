"""Grid Engine backend without a cluster: rendering per site profile, the exact qsub command line, and parsing
of qstat -xml / qacct / qsub outputs recorded from the test cluster's Son of Grid Engine 8.1.9, and of what
Univa/Altair Grid Engine, Open Grid Scheduler and SGE 6 printed at other sites (tests/backends/fixtures/sge, see
its README for each file's source). The same backend against the live daemons is in test_scheduler_contract.py."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from backends.base import ArrayElement, BackendError, InvalidJobSpec, JobSpec, Resources, State, SubmitRefused
from backends.safety import directive_lines
from backends.sge import SGEBackend, h_rt
from backends.sge_parse import (
    parse_find,
    parse_qacct,
    parse_qacct_time,
    parse_qstat_load,
    parse_qstat_xml,
    split_qacct,
    task_ranges,
)
from backends.transport import CommandResult, Transport

FIXTURES = Path(__file__).parent / "fixtures" / "sge"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# The recorder writes the ids it got (they change with every recording): read them rather than hard-coding.
IDS = dict(pair.split("=") for pair in fixture("ids.txt").split())
# The array fixtures have a recorder of their own (record-arrays.sh).
ARRAY_IDS = dict(pair.split("=") for pair in fixture("ids-arrays.txt").split())
SWEEP = ARRAY_IDS["sweep"]


def task(job_id: str, index: int) -> str:
    return f"{job_id}.{index}"


def elements(n: int) -> tuple[ArrayElement, ...]:
    return tuple(ArrayElement(i) for i in range(1, n + 1))


class FakeTransport(Transport):
    """Answers every command with the next canned result and remembers what was asked."""

    def __init__(self, *results: CommandResult) -> None:
        self.results = list(results)
        self.commands: list[str] = []
        self.stdins: list[bytes | None] = []

    def run_shell(self, command, *, stdin=None, timeout=None):
        self.commands.append(command)
        self.stdins.append(stdin)
        return self.results.pop(0) if self.results else CommandResult(0, "", "")

    def read_file(self, path, *, offset=0, limit=1 << 20):
        return b""


def ok(stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(0, stdout, stderr)


def failed(stderr: str, status: int = 1, stdout: str = "") -> CommandResult:
    return CommandResult(status, stdout, stderr)


def spec(**overrides) -> JobSpec:
    resources = overrides.pop("resources", None) or Resources(
        nodes=2, gpus_per_node=4, gpu_type="h100", cpus_per_node=1, mapping={"resource": "f_node"}
    )
    fields = dict(
        name="kh-42-train",
        payload="#$ -l f_node=99\npython train.py\n",
        walltime_seconds=600,
        resources=resources,
        workdir="kakehashi-jobs/kh-42",
        group="kkdemo",
    )
    fields.update(overrides)
    return JobSpec(**fields)


def backend(profile: str, *results: CommandResult, **settings) -> SGEBackend:
    return SGEBackend(FakeTransport(*results), {"site_profile": profile, **settings})


def submitted_qsub(b: SGEBackend) -> str:
    """The qsub part of the staged submit command (what runs inside the job directory)."""
    command = b.transport.commands[-1]
    start = command.index("out=$(") + len("out=$(")
    return command[start : command.index(")", start)]


# ---------------------------------------------------------------------------------------------- rendering


def test_tsubame_puts_the_group_on_the_command_line_and_the_node_type_in_the_script():
    b = backend("tsubame", ok("119\n"))
    s = spec()
    script = b.render(s)
    assert b.directives(s) == [
        "#$ -S /bin/bash",
        "#$ -N kh-42-train",
        "#$ -cwd",
        "#$ -o stdout.log",
        "#$ -e stderr.log",
        "#$ -j n",
        "#$ -l f_node=2",
        "#$ -l h_rt=0:10:00",
    ]
    assert script.startswith("#!/bin/bash\n#$ -S /bin/bash\n")
    assert sorted(directive_lines(script, "#$")) == sorted(b.directives(s))
    assert "-g" not in " ".join(b.directives(s)) and "-P" not in " ".join(b.directives(s))
    assert b.submit(s) == "119"
    # -g first: the site wrapper of the test cluster (like many) stops translating at the first non-option.
    assert submitted_qsub(b) == "qsub -g kkdemo -terse -w e job.sh"
    assert b.submit_command(s) == ["qsub", "-g", "kkdemo", "-terse", "-w", "e", "job.sh"]


def test_abci_uses_its_resource_type_and_the_same_command_line():
    b = backend("abci")
    s = spec(resources=Resources(nodes=2, gpus_per_node=8, gpu_type="a100", mapping={"resource": "rt_AF"}))
    assert "#$ -l rt_AF=2" in b.directives(s)
    assert "#$ -l h_rt=0:10:00" in b.directives(s)
    assert b.submit_command(s) == ["qsub", "-g", "kkdemo", "-terse", "-w", "e", "job.sh"]


def test_a_site_job_without_a_group_has_no_g_option():
    assert backend("tsubame").submit_command(spec(group="")) == ["qsub", "-terse", "-w", "e", "job.sh"]


def test_plain_sge_carries_the_group_as_a_project_and_gpus_as_a_consumable():
    b = backend("generic", ok("23\n"))
    s = spec(
        resources=Resources(nodes=1, gpus_per_node=8, cpus_per_node=1, mapping={"pe": "smp", "gpu_resource": "gpu"})
    )
    lines = b.directives(s)
    assert lines[-4:] == ["#$ -P kkdemo", "#$ -pe smp 8", "#$ -l gpu=8", "#$ -l h_rt=0:10:00"]
    assert b.submit_command(s) == ["qsub", "-terse", "-w", "e", "job.sh"]
    b.submit(s)
    assert submitted_qsub(b) == "qsub -terse -w e job.sh"


def test_plain_sge_slots_are_the_larger_of_cpus_and_processes_on_every_node():
    b = backend("generic")
    s = spec(resources=Resources(nodes=2, gpus_per_node=2, cpus_per_node=16, mapping={"pe": "mpi"}))
    assert "#$ -pe mpi 32" in b.directives(s)
    assert not any("gpu" in line for line in b.directives(s))  # no gpu_resource mapped: nothing guessed


def test_plain_sge_options_queue_memory_account_and_a_site_wide_pe():
    b = backend("generic", group_as="account", pe="smp")
    s = spec(
        resources=Resources(
            nodes=1, cpus_per_node=4, memory_gb=64, mapping={"queue": "gpu.q", "memory_resource": "mem_req"}
        )
    )
    lines = b.directives(s)
    for expected in ("#$ -A kkdemo", "#$ -q gpu.q", "#$ -pe smp 4", "#$ -l mem_req=64G"):
        assert expected in lines
    assert "#$ -P kkdemo" not in lines


def test_walltime_hours_are_not_capped_at_two_digits():
    assert h_rt(5) == "0:00:05"
    assert h_rt(3600 * 100 + 61) == "100:01:01"


def test_an_array_is_one_job_of_tasks_1_to_n_each_writing_into_its_own_directory():
    b = backend("generic")
    lines = b.directives(spec(array=elements(4)))
    assert "#$ -t 1-4" in lines
    # qsub expands $TASK_ID: element 3 writes 3/stdout.log, beside its payload (see backends/script.py).
    assert "#$ -o $TASK_ID/stdout.log" in lines and "#$ -e $TASK_ID/stderr.log" in lines
    assert "#$ -o stdout.log" not in lines
    plain = b.directives(spec())
    assert "#$ -o stdout.log" in plain and not any(line.startswith("#$ -t") for line in plain)
    assert '"${SGE_TASK_ID:-}"' in b.render(spec(array=elements(4)))


def test_an_element_is_addressed_in_grid_engines_job_task_notation():
    b = backend("tsubame")
    assert b.supports_arrays
    assert b.element_id(SWEEP, 4) == f"{SWEEP}.4"


@pytest.mark.parametrize(
    "mapping",
    [
        {"resource": "f_node=1,gpu=99"},
        {"resource": "1f"},
        {"pe": "smp,mpi"},
        {"gpu_resource": "gpu=2"},
        {"queue": "a;b"},
        {"resource": "f_node\n#$ -l gpu=99"},
    ],
)
def test_a_mapping_value_that_is_no_plain_name_is_refused(mapping):
    with pytest.raises(InvalidJobSpec):
        backend("tsubame").render(spec(resources=Resources(nodes=1, mapping=mapping)))


def test_an_unknown_site_profile_is_a_configuration_error():
    with pytest.raises(ValueError, match="site profile"):
        SGEBackend(None, {"site_profile": "tsubame3"})
    assert SGEBackend(None, {}).profile == "generic"


def test_the_payload_travels_in_its_own_file_so_its_directives_stay_inert():
    b = backend("tsubame", ok("7\n"))
    s = spec()
    script = b.render(s)
    assert "f_node=99" not in script
    b.submit(s)
    command = b.transport.commands[0]
    assert shlex.split(command)[3] == "kakehashi-jobs/kh-42"  # mkdir -p -- DIR: the directory is one word
    assert b"f_node=99" in b.transport.stdins[0]  # payload.sh, inside the staged tar


def test_hosts_come_from_the_pe_hostfile_and_the_job_id_from_JOB_ID():
    script = backend("generic").render(spec())
    assert '"$PE_HOSTFILE"' in script
    assert "${JOB_ID:-}" in script


# --------------------------------------------------------------------------------------------- submitting


def test_qsub_terse_ids_plain_and_array():
    assert backend("generic", ok(fixture("qsub-terse.txt"))).submit(spec()) == IDS["ok"]
    assert backend("generic", ok(fixture("qsub-terse-array.txt"))).submit(spec(array=elements(3))) == IDS["arr"]
    assert backend("generic", ok(fixture("qsub-terse-sweep.txt"))).submit(spec(array=elements(10))) == SWEEP
    # A site qsub may print a notice before the id.
    assert backend("tsubame", ok("Submitting to group kkdemo\n4711\n")).submit(spec()) == "4711"


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ("qsub-no-suitable-queues.txt", "no suitable queues"),
        ("qsub-site-f_node-99.txt", "no suitable queues"),
        ("qsub-no-access-to-project.txt", 'no access to project "kkteamb" for user "alice"'),
        ("qsub-no-such-project.txt", 'the requested project "nosuch" does not exist'),
        ("qsub-plain-sge-rejects-g.txt", 'qsub: invalid option argument "-g"'),
    ],
)
def test_a_refusal_carries_the_schedulers_own_words(sample, message):
    b = backend("generic", failed(fixture(sample)))
    with pytest.raises(SubmitRefused) as refused:
        b.submit(spec())
    text = str(refused.value)
    assert message in text
    assert "Exiting." not in text and "Unable to run job" not in text


@pytest.mark.parametrize(
    "stderr",
    [
        "error: commlib error: got select error (Connection refused)\n"
        'Unable to run job: unable to send message to qmaster using port 6444 on host "localhost": got send error\n'
        "Exiting.",
        "Unable to run job: failed receiving gdi request response for mid=1 (got syncron message receive timeout error).\n"
        "Exiting.",
        "mkdir: cannot create directory 'kakehashi-jobs': Disk quota exceeded",
    ],
)
def test_an_unreachable_qmaster_or_a_full_disk_is_retryable_not_a_refusal(stderr):
    with pytest.raises(BackendError) as error:
        backend("generic", failed(stderr)).submit(spec())
    assert not isinstance(error.value, SubmitRefused)


def test_qsub_output_without_an_id_is_an_error():
    with pytest.raises(BackendError, match="no job id"):
        backend("generic", ok('Your job 23 ("x") has been submitted\n')).submit(spec())


# ------------------------------------------------------------------------------------------------- status


def test_statuses_of_running_pending_array_held_and_error_state_jobs_from_one_qstat():
    wanted = [IDS[k] for k in ("run", "hrt", "arr", "held", "heldarr", "eqw", "ok")]
    b = backend("generic", ok(fixture("qstat-xml.xml")))
    statuses = b.statuses(wanted)
    assert b.transport.commands == ["qstat -xml -u '*'"]
    assert statuses[IDS["run"]].state == State.RUNNING
    assert statuses[IDS["hrt"]].state == State.RUNNING
    # Two tasks run, the third waits: the array job as a whole is running.
    assert statuses[IDS["arr"]].state == State.RUNNING
    assert statuses[IDS["held"]].state == State.PENDING and "held" in statuses[IDS["held"]].reason
    assert statuses[IDS["heldarr"]].state == State.PENDING
    # Error state: final, so the portal asks accounting, which has the cause (see the qacct test below), and
    # stuck: the entry would sit in the queue until somebody deletes it.
    assert statuses[IDS["eqw"]].state == State.FAILED and "error state Eqw" in statuses[IDS["eqw"]].reason
    assert statuses[IDS["eqw"]].stuck
    assert not any(statuses[IDS[k]].stuck for k in ("run", "hrt", "arr", "held", "heldarr"))
    assert IDS["ok"] not in statuses  # finished: only accounting knows it
    assert IDS["bob"] not in statuses  # another user's job, not asked for


def test_another_users_job_with_an_odd_name_is_parsed_too():
    statuses = parse_qstat_xml(fixture("qstat-xml.xml"), {IDS["bob"]})
    assert statuses[IDS["bob"]].state == State.PENDING


def test_xml_that_does_not_parse_falls_back_to_the_flat_job_list():
    broken = fixture("qstat-xml.xml").replace("<JB_name>kk-held</JB_name>", "<JB_name>kk<held&</JB_name>")
    statuses = parse_qstat_xml(broken, {IDS["held"], IDS["run"]})
    assert statuses[IDS["held"]].state == State.PENDING
    assert statuses[IDS["run"]].state == State.RUNNING


def test_a_dtd_is_never_parsed():
    evil = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><job_info>&a;</job_info>'
    with pytest.raises(BackendError, match="DTD"):
        backend("generic", ok(evil)).statuses(["1"])


@pytest.mark.parametrize(
    ("code", "listed", "state", "reason"),
    [
        ("qw", "pending", State.PENDING, ""),
        ("hqw", "pending", State.PENDING, "held"),
        ("t", "running", State.RUNNING, "transferred"),
        ("r", "running", State.RUNNING, ""),
        ("Rr", "running", State.RUNNING, ""),
        ("dr", "running", State.RUNNING, "deleted"),
        ("s", "running", State.RUNNING, "suspended"),
        ("S", "running", State.RUNNING, "suspended"),
        ("Eqw", "pending", State.FAILED, "error state"),
    ],
)
def test_state_letters(code, listed, state, reason):
    xml = (
        f"<?xml version='1.0'?><job_info><queue_info></queue_info><job_info><job_list state=\"{listed}\">"
        f"<JB_job_number>5</JB_job_number><state>{code}</state></job_list></job_info></job_info>"
    )
    status = parse_qstat_xml(xml, {"5"})["5"]
    assert status.state == state
    assert reason in status.reason


def test_qstat_failure_is_retryable_and_bad_ids_never_reach_the_shell():
    with pytest.raises(BackendError, match="qstat failed"):
        backend("generic", failed("error: commlib error: got select error (Connection refused)")).statuses(["5"])
    b = backend("generic")
    for bad in (["5; touch x"], ["$(id)"], ["5.1-3"], ["5."], [".5"], ["5.1.2"], ["5\n"], ["5 -t 1"], [""]):
        with pytest.raises(BackendError):
            b.statuses(bad)
        with pytest.raises(BackendError):
            b.final_records(bad)
    assert b.transport.commands == []
    assert b.statuses([]) == {} and b.final_records([]) == {}


# ------------------------------------------------------------------------------------------------ records


def test_final_records_ask_qacct_for_many_ids_in_one_command_in_utc():
    b = backend("generic", ok(fixture("qacct-loop.txt"), fixture("qacct-loop.stderr")))
    ids = [IDS["ok"], IDS["three"], IDS["held"], "999999"]
    records = b.final_records(ids)
    (command,) = b.transport.commands
    assert command.startswith(f"for id in {' '.join(ids)}; do TZ=UTC0 LC_ALL=C qacct -j")
    # Deleted while pending (held) and unknown: no record, no error.
    assert set(records) == {IDS["ok"], IDS["three"]}
    done = records[IDS["ok"]]
    assert (done.state, done.exit_code, done.reason) == (State.COMPLETED, 0, "")
    assert done.started_at.tzinfo is UTC and done.ended_at >= done.started_at
    assert done.raw["project"] == "kkdemo" and done.nodes == 1
    three = records[IDS["three"]]
    assert (three.state, three.exit_code, three.reason) == (State.FAILED, 3, "exit code 3")
    assert three.raw["category"] == "-l f_node=1,h_rt=60"


def test_told_when_the_jobs_were_submitted_qacct_reads_the_accounting_once_for_all_and_asks_only_the_missing_one():
    # Recorded from the test cluster: the same qacct output serves the one pass (it lists ok and three); held was
    # deleted while waiting and has no record, so it alone is asked for again (and still has none).
    b = backend("generic", ok(fixture("qacct-loop.txt")), ok("", f"error: job id {IDS['held']} not found\n"))
    tokyo = timezone(timedelta(hours=9))
    records = b.final_records([IDS["ok"], IDS["three"], IDS["held"]],
                              submitted_since=datetime(2026, 11, 24, 17, 30, tzinfo=tokyo))
    once, missing = b.transport.commands
    # 08:30 UTC less the hour allowed for the two clocks, in the login node's zone as the command sets it.
    assert once == "TZ=UTC0 LC_ALL=C qacct -b 202611240730 -j 'kh-*' 2>/dev/null; true"
    assert missing.startswith(f"for id in {IDS['held']}; do TZ=UTC0 LC_ALL=C qacct -j")
    assert set(records) == {IDS["ok"], IDS["three"]}
    assert records == backend("generic", ok(fixture("qacct-loop.txt"))).final_records([IDS["ok"], IDS["three"]])


def test_one_job_or_no_hint_keeps_one_qacct_per_job():
    for ids, since in (([IDS["ok"]], datetime(2026, 11, 24, tzinfo=UTC)), ([IDS["ok"], IDS["three"]], None)):
        b = backend("generic", ok(fixture("qacct-loop.txt")))
        b.final_records(ids, submitted_since=since)
        (command,) = b.transport.commands
        assert command.startswith(f"for id in {' '.join(ids)}; do")


def test_qacct_errors_other_than_not_found_are_retryable():
    with pytest.raises(BackendError, match="accounting file"):
        backend("generic", failed("error: can't open accounting file")).final_records(["5"])


def test_times_follow_the_tz_the_command_sets():
    # The same record printed under TZ=Asia/Tokyo is 9 h "later": why the backend pins TZ=UTC0.
    utc = parse_qacct(fixture("qacct-completed.txt"), {IDS["ok"]})[IDS["ok"]]
    tokyo = parse_qacct(fixture("qacct-completed-tokyo.txt"), {IDS["ok"]})[IDS["ok"]]
    assert (tokyo.started_at - utc.started_at).total_seconds() == 9 * 3600
    assert utc.started_at == datetime.strptime(
        fixture("qacct-completed.txt").split("start_time")[1].split("\n")[0].strip(), "%a %b %d %H:%M:%S %Y"
    ).replace(tzinfo=UTC)


def test_qdel_of_a_running_job_is_cancelled():
    record = parse_qacct(fixture("qacct-qdel-running.txt"), {IDS["run"]})[IDS["run"]]
    assert (record.state, record.exit_code) == (State.CANCELLED, 137)
    assert record.raw["failed"].startswith("100")


def test_past_h_rt_is_timed_out():
    record = parse_qacct(fixture("qacct-h_rt.txt"), {IDS["hrt"]})[IDS["hrt"]]
    assert record.state == State.TIMED_OUT and "walltime" in record.reason
    assert record.elapsed_seconds >= 3


def test_failed_37_below_h_rt_is_a_memory_or_cpu_limit_not_a_timeout():
    text = fixture("qacct-h_rt.txt").replace("category     -l h_rt=3", "category     -l h_rt=3600,h_vmem=1G")
    record = parse_qacct(text, {IDS["hrt"]})[IDS["hrt"]]
    assert record.state == State.FAILED and "h_vmem" in record.reason


def test_an_error_state_job_fails_with_the_shepherds_reason():
    record = parse_qacct(fixture("qacct-error-state.txt"), {IDS["eqw"]})[IDS["eqw"]]
    assert record.state == State.FAILED
    assert record.exit_code is None  # it never ran: exit_status 0 means nothing here
    assert "opening input/output file" in record.reason
    assert record.started_at is None and record.ended_at is None


def test_an_array_job_is_one_record_spanning_its_tasks():
    record = parse_qacct(fixture("qacct-array.txt"), {IDS["arr"]})[IDS["arr"]]
    assert (record.state, record.exit_code) == (State.COMPLETED, 0)
    assert record.elapsed_seconds == (record.ended_at - record.started_at).total_seconds() >= 8  # two waves
    failing = fixture("qacct-array.txt").replace("exit_status  0", "exit_status  2", 1)
    assert parse_qacct(failing, {IDS["arr"]})[IDS["arr"]].exit_code == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Sun Nov 22 00:18:30 2026", datetime(2026, 11, 22, 0, 18, 30, tzinfo=UTC)),
        ("Mon Feb  2 07:05:09 2026", datetime(2026, 2, 2, 7, 5, 9, tzinfo=UTC)),
        ("11/22/2026 00:18:30.123", datetime(2026, 11, 22, 0, 18, 30, 123000, tzinfo=UTC)),  # Univa/Altair GE
        # Open Cluster Scheduler 9 (SoGE's successor), as its sge_ctime64() formats them; no record was found.
        ("2026-11-22 00:18:30.123456", datetime(2026, 11, 22, 0, 18, 30, 123456, tzinfo=UTC)),
        ("1795306886", datetime.fromtimestamp(1795306886, UTC)),
        ("-/-", None),
        ("undefined", None),
        ("Thu Jan  1 00:00:00 1970", None),
        ("", None),
    ],
)
def test_qacct_times(value, expected):
    assert parse_qacct_time(value) == expected


# ----------------------------------------------------------------------------------------- find and cancel


def test_find_prefers_the_recorded_id_then_the_queue_then_accounting():
    unknown = fixture("qstat-xml-j-unknown.xml").replace("exit=0\n", "")
    assert parse_find(f"@@recorded\n{fixture('qsub-terse-array.txt')}@@queue\n{unknown}@@accounting\n") == IDS["arr"]
    assert parse_find(f"@@recorded\n@@queue\n{fixture('qstat-xml-j-name.xml')}@@accounting\n") == IDS["held"]
    assert parse_find(f"@@recorded\n@@queue\n{unknown}@@accounting\n7\n12\n") == "12"
    assert parse_find(f"@@recorded\n@@queue\n{unknown}@@accounting\n") is None


def test_find_is_one_command_with_the_name_quoted():
    b = backend("tsubame", ok(f"@@recorded\n@@queue\n{fixture('qstat-xml-j-name.xml')}@@accounting\n"))
    assert b.find(spec()) == IDS["held"]
    (command,) = b.transport.commands
    assert "qstat -xml -j kh-42-train" in command and "qacct -j kh-42-train" in command
    assert "cat -- kakehashi-jobs/kh-42/scheduler-id" in command
    with pytest.raises(InvalidJobSpec):
        b.find(spec(name="x; qdel -u alice"))


def test_cancel_tolerates_a_job_that_already_left():
    b = backend("generic", failed(fixture("qdel-unknown.txt").replace("exit=1\n", "")))
    b.cancel("999999")
    assert b.transport.commands == ["qdel 999999"]
    backend("generic", ok(fixture("qdel-running.txt"))).cancel(IDS["run"])
    with pytest.raises(BackendError, match="privileges"):
        backend("generic", failed("alice - you do not have the necessary privileges to delete the job")).cancel("5")
    with pytest.raises(BackendError):
        backend("generic").cancel("5 -u bob")


def test_a_reused_job_number_reports_only_the_latest_submission():
    # Job numbers wrap (or restart after a spool reset) while accounting keeps the old jobs.
    old = fixture("qacct-exit-3.txt").replace(f"jobnumber    {IDS['three']} ", f"jobnumber    {IDS['ok']} ")
    # The old job ran and ended a day earlier, before the number was used again.
    old = old.replace("Sun Nov 22", "Sat Nov 21")
    assert len(parse_qacct(old, {IDS["ok"]})) == 1
    for text in (old + fixture("qacct-completed.txt"), fixture("qacct-completed.txt") + old):
        record = parse_qacct(text, {IDS["ok"]})[IDS["ok"]]
        assert (record.state, record.exit_code) == (State.COMPLETED, 0)


def test_a_two_node_mpirun_job_ends_as_its_own_record_says_not_as_its_parallel_tasks_records():
    # Recorded on the test cluster: every rank exited 3; mpirun's two daemons on sgenode01 (`qrsh -inherit`) ended
    # well, and their records carry the second they started as their qsub_time, after the job's own.
    text = fixture("qacct-two-nodes-mpirun-exit-3.txt")
    job_id = split_qacct(text)[0]["jobnumber"]
    record = parse_qacct(text, {job_id})[job_id]
    assert (record.state, record.exit_code, record.nodes) == (State.FAILED, 3, 2)
    # SoGE's qacct does not say which record is the job's own: the tasks' records alone may be all there is yet.
    tasks_only = "".join(f"{'=' * 62}\n{block}" for block in text.split("=" * 62 + "\n")[1:3])
    record = parse_qacct(tasks_only, {job_id})[job_id]
    assert (record.state, record.settled) == (State.COMPLETED, False)


# ---------------------------------------------------------------------------- array elements, one at a time
# qstat-xml-array-tasks.xml (record-arrays.sh): the 10-task sweep with tasks 2 and 4 running, 1 done, 3 in error
# state (its directory was missing), 7 deleted while waiting, 9 held, 5, 6, 8, 10 waiting; beside it a held
# array with tasks 2 and 4 deleted and one submitted as `-t 2-10:4`.


def test_each_element_has_the_state_of_its_own_queue_entry_from_one_qstat():
    ids = [task(SWEEP, i) for i in range(1, 11)]
    b = backend("generic", ok(fixture("qstat-xml-array-tasks.xml")))
    statuses = b.statuses(ids)
    assert b.transport.commands == ["qstat -xml -u '*'"]
    state = {i: statuses[task(SWEEP, i)].state for i in range(1, 11) if task(SWEEP, i) in statuses}
    assert state == {
        2: State.RUNNING,
        3: State.FAILED,
        4: State.RUNNING,
        5: State.PENDING,
        6: State.PENDING,
        8: State.PENDING,
        9: State.PENDING,
        10: State.PENDING,
    }  # 1 has ended and 7 was deleted: only accounting can tell
    assert all(statuses[i].scheduler_id == i for i in statuses)
    assert "held" in statuses[task(SWEEP, 9)].reason
    stuck = [i for i in ids if i in statuses and statuses[i].stuck]
    assert stuck == [task(SWEEP, 3)]  # the others run on: only this task's entry needs deleting
    assert "error state Eqw" in statuses[task(SWEEP, 3)].reason


def test_waiting_tasks_are_found_in_lists_with_gaps_and_steps():
    gaps, step = ARRAY_IDS["gaps"], ARRAY_IDS["step"]
    wanted = {task(gaps, i) for i in range(1, 8)} | {task(step, i) for i in range(1, 12)}
    statuses = parse_qstat_xml(fixture("qstat-xml-array-tasks.xml"), wanted)
    assert sorted(statuses) == sorted([task(gaps, i) for i in (1, 3, 5, 6)] + [task(step, i) for i in (2, 6, 10)])
    assert {s.state for s in statuses.values()} == {State.PENDING}


def test_the_array_as_a_whole_still_reports_its_liveliest_task():
    statuses = parse_qstat_xml(fixture("qstat-xml-array-tasks.xml"), {SWEEP, task(SWEEP, 3)})
    assert statuses[SWEEP].state == State.RUNNING and not statuses[SWEEP].stuck
    assert statuses[task(SWEEP, 3)].state == State.FAILED


def test_a_task_of_a_job_not_asked_for_or_of_a_plain_job_is_not_reported():
    statuses = parse_qstat_xml(fixture("qstat-xml.xml"), {task(IDS["run"], 1), task(IDS["heldarr"], 6)})
    assert statuses == {}


def test_tasks_are_found_when_the_xml_does_not_parse():
    broken = fixture("qstat-xml-array-tasks.xml").replace("<JB_name>kk-gaps</JB_name>", "<JB_name>kk<&</JB_name>")
    statuses = parse_qstat_xml(broken, {task(SWEEP, 3), task(SWEEP, 4), task(SWEEP, 10), task(SWEEP, 7)})
    assert {i: s.state for i, s in statuses.items()} == {
        task(SWEEP, 3): State.FAILED,
        task(SWEEP, 4): State.RUNNING,
        task(SWEEP, 10): State.PENDING,
    }


@pytest.mark.parametrize(
    ("tasks", "members"),
    [
        # Printed by the test cluster's qstat (the first four are in the fixtures; "4-10:2" and "4,6,10" were
        # seen by hand after deleting waiting tasks of a 1-10 array).
        ("3", [3]),
        ("2-5:1", [2, 3, 4, 5]),
        ("5,6,8,10", [5, 6, 8, 10]),
        ("2-10:4", [2, 6, 10]),
        ("4-10:2", [4, 6, 8, 10]),
        ("1,4-10:3", [1, 4, 7, 10]),
        ("", []),
        ("x,2", [2]),
    ],
)
def test_task_lists(tasks, members):
    ranges = task_ranges(tasks)
    assert [t for t in range(0, 12) if any(t in r for r in ranges)] == members


def test_a_huge_foreign_array_is_never_expanded():
    (huge,) = task_ranges("1-2000000000:1")
    assert 1999999999 in huge and len(huge) == 2_000_000_000


# qacct-sweep-loop.txt: the same sweep once it ended, asked as final_records asks (one qacct per job number).


def test_each_element_gets_its_own_accounting_record_from_one_qacct_of_the_array():
    b = backend("generic", ok(fixture("qacct-sweep-loop.txt"), fixture("qacct-sweep-loop.stderr")))
    ids = [task(SWEEP, i) for i in range(1, 11)] + ["999999"]
    records = b.final_records(ids)
    assert b.transport.commands == [f'for id in {SWEEP} 999999; do TZ=UTC0 LC_ALL=C qacct -j "$id"; done']
    # 7 was deleted while waiting and 9 while held: neither ever ran, neither has a record.
    assert sorted(records) == sorted(task(SWEEP, i) for i in (1, 2, 3, 4, 5, 6, 8, 10))
    outcome = {i: (records[task(SWEEP, i)].state, records[task(SWEEP, i)].exit_code) for i in (1, 2, 3, 4, 10)}
    assert outcome == {
        1: (State.COMPLETED, 0),
        2: (State.CANCELLED, 137),  # qdel of the running task: `failed 100`, killed
        3: (State.FAILED, None),  # error state: never ran
        4: (State.FAILED, 3),
        10: (State.COMPLETED, 0),
    }
    assert "opening input/output file" in records[task(SWEEP, 3)].reason
    assert records[task(SWEEP, 3)].started_at is None


def test_an_elements_times_are_its_own_not_the_arrays():
    records = parse_qacct(fixture("qacct-sweep-loop.txt"), {task(SWEEP, 1), task(SWEEP, 10), SWEEP})
    first, last, whole = records[task(SWEEP, 1)], records[task(SWEEP, 10)], records[SWEEP]
    assert first.ended_at <= last.started_at  # two tasks at a time: task 10 ran in a later wave
    assert first.elapsed_seconds == int(first.raw["ru_wallclock"].rstrip("s"))
    assert (whole.started_at, whole.ended_at) == (first.started_at, last.ended_at)
    assert first.raw["taskid"] == "1" and last.raw["taskid"] == "10"
    assert first.scheduler_id == task(SWEEP, 1) and first.nodes == 1
    assert whole.state == State.FAILED  # the array as a whole keeps its worst outcome


def test_the_array_and_its_elements_share_one_qacct():
    b = backend("generic", ok(fixture("qacct-sweep-loop.txt")))
    records = b.final_records([SWEEP, task(SWEEP, 4), task(SWEEP, 5)])
    assert b.transport.commands == [f'for id in {SWEEP}; do TZ=UTC0 LC_ALL=C qacct -j "$id"; done']
    assert set(records) == {SWEEP, task(SWEEP, 4), task(SWEEP, 5)}


def test_an_element_of_a_reused_job_number_reports_only_the_latest_submission():
    # An older array under the same number (qacct-array.txt: tasks 1-3, all exit 0), submitted a day earlier.
    old = fixture("qacct-array.txt").replace(f"jobnumber    {IDS['arr']} ", f"jobnumber    {SWEEP} ")
    # The old job ran and ended a day earlier, before the number was used again.
    old = old.replace("Sun Nov 22", "Sat Nov 21")
    assert len(parse_qacct(old, {task(SWEEP, 2)})) == 1
    for text in (old + fixture("qacct-sweep-loop.txt"), fixture("qacct-sweep-loop.txt") + old):
        records = parse_qacct(text, {task(SWEEP, 2), task(SWEEP, 7)})
        assert set(records) == {task(SWEEP, 2)}  # the old array's task 2 is not this one
        assert records[task(SWEEP, 2)].state == State.CANCELLED


def test_cancelling_an_element_deletes_that_task_only():
    b = backend("generic", ok(fixture("qdel-task-running.txt")))
    b.cancel(task(SWEEP, 2))
    assert b.transport.commands == [f"qdel {SWEEP}.2"]
    # Already deleted (the array lives on) or the whole array ended: nothing left to cancel, not an error.
    for gone in ("qdel-task-gone.txt", "qdel-task-of-ended-job.txt"):
        backend("generic", failed(fixture(gone).replace("exit=1\n", ""))).cancel(task(SWEEP, 7))
    with pytest.raises(BackendError):
        backend("generic").cancel(f"{SWEEP}.2 -u bob")


def test_a_lost_submit_reply_finds_the_array_by_its_job_number():
    assert parse_find(f"@@recorded\n{fixture('qsub-terse-sweep.txt')}@@queue\n@@accounting\n") == SWEEP
    # qacct prints the number once per task.
    accounted = "".join(f"{SWEEP}\n" for _ in range(8))
    assert parse_find(f"@@recorded\n@@queue\n@@accounting\n{accounted}") == SWEEP


# ------------------------------------------------------------------------------ other sites' Grid Engines
# Outputs published by sites running Univa/Altair Grid Engine, Open Grid Scheduler and older SGE (see the fixtures
# README for where each comes from). The test cluster runs Son of Grid Engine; these are what it cannot show.


@pytest.mark.parametrize(
    ("sample", "job_id"),
    [
        ("univa-8.6.6-ttu-qstat-xml-j.xml", "748172"),
        ("ogs-ood-qstat-xml-j.xml", "942195"),
        ("univa-8.6.2-ihme-qstat-xml-j.xml", "3091400"),
    ],
)
def test_a_lost_submit_reply_is_found_by_name_on_univa_and_open_grid_scheduler(sample, job_id):
    # Univa 8.6.6 (TTU) and Open Grid Scheduler put JB_job_number straight under <djob_info>; Univa 8.6.2 (IHME)
    # wraps the job in <element> as SoGE does. Both layouts are Univa's, so both are read.
    # (The samples end without a newline; qstat's own output ends with one before the next marker.)
    b = backend("tsubame", ok(f"@@recorded\n@@queue\n{fixture(sample).rstrip()}\n@@accounting\n"))
    assert b.find(spec()) == job_id  # found: the retry records this id instead of submitting a second job


def test_an_unknown_name_answered_with_xml_that_does_not_parse_falls_back_to_accounting():
    # SGE 6's reply for a name it does not know has an element without a name (`<>`): not XML at all.
    unknown = fixture("sge-6-ood-qstat-xml-j-unknown.xml")
    assert "<>" in unknown
    assert parse_find(f"@@recorded\n@@queue\n{unknown}\n@@accounting\n") is None
    assert parse_find(f"@@recorded\n@@queue\n{unknown}\n@@accounting\n4711\n") == "4711"


def test_jobs_listed_inside_each_queue_as_older_sge_prints_them_are_read_too():
    # SGE 6 with -r/-f nests running jobs in <Queue-List> elements; waiting tasks of an array share one entry.
    statuses = parse_qstat_xml(fixture("sge-6-ood-qstat-xml-r.xml"), {"88", "1045", "1046.3", "1046.4", "44"})
    assert {i: s.state for i, s in statuses.items()} == {
        "88": State.RUNNING,
        "1045": State.PENDING,
        "1046.3": State.PENDING,  # tasks 1-10:2 wait; task 4 is not one of them
        "44": State.PENDING,
    }
    assert "held" in statuses["44"].reason


def test_a_univa_listing_of_running_waiting_and_finished_jobs_reads_each_as_it_is():
    # CC-IN2P3's Univa Grid Engine, `qstat -s az -xml -ext`: Univa's own elements (<jclass_name>, the -ext ticket
    # columns) around the usual ones, and an ended job qmaster still keeps, listed as "zombie" with <state>qw.
    text = fixture("univa-in2p3-qstat-xml-s-az-ext.xml")
    assert "<jclass_name>" in text and 'state="zombie"' in text
    statuses = parse_qstat_xml(text, {"392667", "404991", "397513"})
    assert {i: s.state for i, s in statuses.items()} == {"392667": State.RUNNING, "404991": State.PENDING}
    # The ended job is not called waiting (it would wait for ever): it is left to accounting, as any job that
    # has left the queue.
    assert "397513" not in statuses


def test_an_ended_job_is_never_waiting_however_the_listing_is_read():
    # The same listing with one job's name qstat could not escape: the fallback reader skips the zombie too.
    text = fixture("univa-in2p3-qstat-xml-s-az-ext.xml").replace(">ge_script<", ">a<b<")
    statuses = parse_qstat_xml(text, {"392667", "404991", "397513"})
    assert {i: s.state for i, s in statuses.items()} == {"392667": State.RUNNING, "404991": State.PENDING}


def test_a_running_task_of_a_univa_array_is_an_entry_of_its_own_as_on_son_of_grid_engine():
    # The head of a Univa listing posted in a bug report (the rest could not be read; the test closes the
    # elements the head leaves open): one running task of array 179556, task number 35236337.
    head = fixture("univa-qstat-pretty-issue8-head.xml")
    text = head + "  </queue_info>\n  <job_info>\n  </job_info>\n</job_info>\n"
    statuses = parse_qstat_xml(text, {"179556", "179556.35236337", "179556.1"})
    assert {i: s.state for i, s in statuses.items()} == {
        "179556": State.RUNNING,
        "179556.35236337": State.RUNNING,
    }
    # Cut where it is, the head does not parse: the fallback reader finds the same entry.
    assert parse_qstat_xml(head, {"179556.35236337"})["179556.35236337"].state is State.RUNNING


def test_univa_job_lines_with_a_job_class_column_and_other_users_masked_are_counted():
    # ABCI's documentation of its Univa qstat: a `jclass` column before `slots`, and other users' names and job
    # names printed as asterisks. The job lines are laid out as in `qstat -f`, which the load reads.
    load = parse_qstat_load(fixture("univa-abci-qstat-u-all-masked.txt"))
    assert (load.running, load.pending) == (4, 0)


def test_jobs_being_deleted_on_a_host_qmaster_lost_still_run_until_it_says_otherwise():
    # A site's SoGE (`qstat -xml -F`): eleven `dr` jobs on a queue instance in state `auo` (alarm, unknown: its
    # host stopped answering). Deletion is asked for but not confirmed, so they are running, being deleted.
    statuses = parse_qstat_xml(fixture("soge-metrum-qstat-xml-F-dr.xml"), {"680", "692", "4282"})
    assert {i: s.state for i, s in statuses.items()} == {
        "680": State.RUNNING,
        "692": State.RUNNING,
        "4282": State.RUNNING,
    }
    assert statuses["680"].reason == "being deleted"
    assert statuses["4282"].reason == ""


def _with(text: str, key: str, value: str) -> str:
    """A qacct record with one line's value replaced (for variants of a fixture)."""
    new, count = re.subn(rf"^{key}( +).*$", lambda m: f"{key}{m.group(1)}{value}", text, flags=re.MULTILINE)
    assert count == 1, key
    return new


@pytest.mark.parametrize(
    ("sample", "job_id", "started", "elapsed"),
    [
        ("univa-abci-qacct-completed.txt", "12345", datetime(2018, 7, 1, 11, 55, 18, 170000, tzinfo=UTC), 0),
        ("univa-eddie-qacct-completed.txt", "2701173", datetime(2020, 6, 11, 13, 22, 37, 680000, tzinfo=UTC), 314),
    ],
)
def test_a_univa_job_that_exited_0_is_completed_with_its_own_times(sample, job_id, started, elapsed):
    record = parse_qacct(fixture(sample), {job_id})[job_id]
    assert (record.state, record.exit_code, record.reason) == (State.COMPLETED, 0, "")
    assert record.started_at == started and record.ended_at > started  # MM/DD/YYYY with milliseconds
    assert record.elapsed_seconds == elapsed  # ru_wallclock in fractional seconds ("314.272")
    assert record.nodes == 1 and record.raw["deleted_by"] == "NONE" and "category" not in record.raw


@pytest.mark.parametrize(
    ("sample", "job_id"), [("qacct-h_rt.txt", IDS["hrt"]), ("univa-ihme-qacct-h_rt.txt", "11399639")]
)
def test_a_walltime_kill_is_timed_out_on_son_of_grid_engine_and_on_univa(sample, job_id):
    # SoGE: `failed 37` names three limits and the category holds h_rt. Univa/Altair: `failed 44 : execd enforced
    # h_rt limit` and no category line at all.
    record = parse_qacct(fixture(sample), {job_id})[job_id]
    assert record.state == State.TIMED_OUT and record.reason.startswith("walltime exceeded")


def test_univa_says_which_limit_it_enforced_so_its_word_decides_whatever_the_times_say():
    text = fixture("univa-ihme-qacct-h_rt.txt")
    record = parse_qacct(text, {"11399639"})["11399639"]
    assert record.state == State.TIMED_OUT
    assert record.reason == "walltime exceeded (h_rt 1800 s)"  # -l h_rt=00:30:00 in submit_cmd
    assert record.elapsed_seconds == 0  # ru_wallclock 0.812: the record does not bear the limit out, failed 44 does
    # An exit status no shell returns is no exit code; accounting's own value stays with the record.
    assert record.exit_code is None and record.raw["exit_status"] == "1377"
    assert record.raw["failed"].startswith("44")
    # Kakehashi writes h_rt as a `#$` line, which submit_cmd does not show (univa-eddie-qacct-completed.txt's job
    # had `#$ -l h_rt` in its script): without any h_rt in the record the failure alone still says it.
    from_script = parse_qacct(_with(text, "submit_cmd", "qsub -g grp job.sh"), {"11399639"})["11399639"]
    assert (from_script.state, from_script.reason) == (State.TIMED_OUT, "walltime exceeded (execd enforced h_rt limit)")


def test_a_univa_memory_limit_kill_is_failed_with_the_limit_it_names():
    record = parse_qacct(fixture("constructed-univa-qacct-h_vmem.txt"), {"11399639"})["11399639"]
    assert (record.state, record.exit_code) == (State.FAILED, 137)
    assert record.reason == "killed by the scheduler: execd enforced h_vmem limit"


def test_a_univa_job_deleted_while_running_is_cancelled_by_whoever_deleted_it():
    record = parse_qacct(fixture("constructed-univa-qacct-qdel-running.txt"), {"12345"})["12345"]
    assert (record.state, record.exit_code) == (State.CANCELLED, 137)
    assert record.reason == "deleted (qdel by username@es1.abci.local) while running"


def test_a_univa_job_killed_by_a_signal_nobody_sent_with_qdel_is_not_called_cancelled():
    # SoGE keeps no deleted_by, so there `failed 100` with 137 is a qdel (qacct-qdel-running.txt). Univa/Altair
    # write deleted_by NONE: the kill came from elsewhere (the kernel's OOM killer, a ulimit, the walltime).
    text = fixture("constructed-univa-qacct-killed.txt")
    record = parse_qacct(text, {"12345"})["12345"]
    assert (record.state, record.exit_code) == (State.FAILED, 137)
    assert record.reason.startswith("exit code 137 (SIGKILL)")
    # The same kill once the whole h_rt on its command line (-l h_rt=600) was used is the walltime.
    at_limit = parse_qacct(_with(text, "ru_wallclock", "600.020"), {"12345"})["12345"]
    assert (at_limit.state, at_limit.reason) == (State.TIMED_OUT, "walltime exceeded (h_rt 600 s)")


def test_an_exit_status_reads_the_same_on_son_of_grid_engine_and_on_univa():
    soge = _with(fixture("qacct-completed.txt"), "exit_status", "137                  (Killed)")
    univa = _with(fixture("univa-abci-qacct-completed.txt"), "exit_status", "137")
    records = [parse_qacct(soge, {IDS["ok"]})[IDS["ok"]], parse_qacct(univa, {"12345"})["12345"]]
    assert {(r.state, r.exit_code, r.reason) for r in records} == {(State.FAILED, 137, "exit code 137 (SIGKILL)")}
    assert records[0].raw["exit_status"] == "137                  (Killed)"  # accounting's word, kept


ABCI_REFUSALS = [tuple(line.split("\t")) for line in fixture("univa-abci-qsub-refusals.tsv").splitlines()]


@pytest.mark.parametrize(("message", "status"), ABCI_REFUSALS)
def test_abcis_qsub_refusals_are_refusals_in_its_own_words(message, status):
    b = backend("abci", failed(f"{message}\n", status=int(status)))
    with pytest.raises(SubmitRefused) as refused:
        b.submit(spec(resources=Resources(nodes=1, mapping={"resource": "rt_F"})))
    words = message.removeprefix("Unable to run job: ").removeprefix("job rejected: ")
    assert str(refused.value) == words


def test_abcis_qdel_reply_is_a_cancel_that_worked():
    b = backend("abci", ok(fixture("univa-abci-qdel.txt")))
    b.cancel("12345")
    assert b.transport.commands == ["qdel 12345"]


@pytest.mark.parametrize("message", fixture("altair-tsubame4-qsub-refusals.txt").splitlines())
def test_tsubame4s_qsub_refusals_are_refusals_not_failures_to_retry(message):
    # Retried, a refusal would only be refused again, and the researcher would never see why.
    b = backend("tsubame", failed(f"{message}\n"))
    with pytest.raises(SubmitRefused) as refused:
        b.submit(spec())
    assert str(refused.value) == message.removeprefix("Unable to run job: ")
