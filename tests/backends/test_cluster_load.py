"""How busy a cluster is (Backend.load), asked of the real schedulers of the test cluster as a researcher."""

from __future__ import annotations

import pytest

from backends.pbs_parse import parse_pbs_load
from backends.sge_parse import parse_qstat_load, task_count
from backends.slurm import parse_slurm_load
from tests.backends.test_scheduler_contract import PROFILES

# `qstat -f -u '*'` on the test cluster's Son of Grid Engine 8.1.9 (2026-11-23), with a second host in alarm and
# an array's waiting tasks added as SGE prints them.
SGE_QSTAT_F = """\
queuename                      qtype resv/used/tot. load_avg arch          states
---------------------------------------------------------------------------------
all.q@localhost                BIP   0/4/16         0.98     lx-amd64
      5 0.75000 loadt      alice        r     11/23/2026 22:29:31     1 1
      5 0.75000 loadt      alice        r     11/23/2026 22:29:31     1 2
---------------------------------------------------------------------------------
node.q@sgenode01               P     0/0/64         0.98     lx-amd64
---------------------------------------------------------------------------------
node.q@sgenode02               P     0/0/64         -NA-     lx-amd64      au

############################################################################
 - PENDING JOBS - PENDING JOBS - PENDING JOBS - PENDING JOBS - PENDING JOBS
############################################################################
      1 0.50000 kh-eqw     alice        Eqw   11/23/2026 22:28:42     1
      6 0.25000 loadt2     alice        qw    11/23/2026 22:29:32     1
      7 0.25000 loadt3     alice        qw    11/23/2026 22:29:32     1 3-10:1
"""


def test_grid_engine_counts_each_waiting_array_task_and_only_hosts_with_nothing_running_and_no_alarm_as_free():
    load = parse_qstat_load(SGE_QSTAT_F)
    assert (load.pending, load.running, load.free_nodes, load.total_nodes) == (9, 2, 1, 3)  # Eqw is not waiting
    assert [task_count(t) for t in ("4", "5,6,8", "3-10:1", "1-9:2", None)] == [1, 3, 8, 5, 1]


def test_grid_engine_counts_only_the_hosts_of_the_queues_whole_node_jobs_run_in_when_the_site_names_them():
    """TSUBAME-style whole nodes run on the two compute nodes (node.q), not the login host's all.q: "1 of 2 nodes
    free", never "of 3" (issue 25)."""
    load = parse_qstat_load(SGE_QSTAT_F, node_queues=["node.q"])
    assert (load.pending, load.running, load.free_nodes, load.total_nodes) == (9, 2, 1, 2)


def test_slurm_counts_waiting_jobs_by_partition_idle_nodes_once_and_the_latest_expected_start():
    load = parse_slurm_load("@@jobs\nPENDING|gpu\nPENDING|cpu\nRUNNING|gpu\n@@nodes\nnode01|idle\nnode01|idle\n"
                            "node02|mixed\n@@start\n1795480000\nN/A\n1795470000\n")
    assert (load.pending, load.running, load.free_nodes, load.total_nodes) == (2, 1, 1, 2)
    assert dict(load.per_queue) == {"gpu": 1, "cpu": 1} and load.expected_start.timestamp() == 1795480000


def test_pbs_counts_queued_and_held_jobs_and_free_nodes_and_says_nothing_of_nodes_when_pbsnodes_fails():
    table = ("Job id  Name  Username  Time Use S Queue\n------- ---- -------- -------- - -----\n"
             "12  a  alice  00:00:00 R gpu\n13  b  alice  0 Q gpu\n14  c  bob  0 H gpu\n15  d  bob  0 C gpu\n")
    load = parse_pbs_load(table + "@@nodes 0\nnode01\n    state = free\nnode02\n    state = job-exclusive\n")
    assert (load.pending, load.running, load.free_nodes, load.total_nodes) == (2, 1, 1, 2)
    assert parse_pbs_load(table + "@@nodes 127\npbsnodes: command not found\n").free_nodes is None


@pytest.mark.cluster
@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_a_held_job_shows_as_waiting_and_the_nodes_are_counted_on_the_real_scheduler(profile, backend, make_spec):
    spec = make_spec("echo never\n", group=profile.group)
    script = backend.render(spec).replace("\n", f"\n{profile.hold_directive}\n", 1)
    job_id = backend.submit(spec, script=script)
    try:
        load = backend.load()
        assert load.pending >= 1  # at least our held job (other tests share the cluster)
        assert load.total_nodes >= 2 and 0 <= load.free_nodes <= load.total_nodes
    finally:
        backend.cancel(job_id)
