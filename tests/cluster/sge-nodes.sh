# Grid Engine compute nodes for whole-node jobs (TSUBAME f_node, ABCI rt_AF): sourced by up.sh, not run.
# shellcheck shell=bash
#
# sge_qmaster tells hosts apart by the address a daemon connects from and checks it against the name the
# daemon gives, so a second execd cannot simply run beside the first on 127.0.0.1. Each node here is:
#   - a network namespace kk-NODE with a veth into the bridge $SGE_BRIDGE ($SGE_BRIDGE_ADDR on the host side),
#     its own address (SGE_NODE_ADDR) and its own /etc/hosts and resolv.conf (/etc/netns/kk-NODE/: no DNS);
#   - a UTS namespace whose host name is NODE, and a mount namespace in which the cell's act_qmaster says
#     "$SGE_MASTER_ALIAS" (the bridge address: "localhost" there would be the node itself) and host_aliases
#     is the node's own (on the master, $SGE_MASTER_ALIAS is an alias of localhost);
#   - an sge_execd started inside them. Jobs it starts inherit all three, so `hostname`, $PE_HOSTFILE,
#     `qrsh -inherit` between nodes and qstat from a job behave as on a real cluster's compute nodes.
# The nodes are exec and submit hosts of queue $SGE_NODE_QUEUE, which takes only parallel jobs (qtype NONE):
# jobs without a whole-node request keep running on all.q@localhost, as before.

netns_of() { echo "kk-$1"; }

# Host names: the nodes and the master's name on the bridge, in /etc/hosts (seen inside the namespaces too).
sge_node_names() {
    local n
    for n in "${SGE_NODES[@]}"; do
        grep -qE "^${SGE_NODE_ADDR[$n]//./\\.}[[:space:]]+$n\$" /etc/hosts || echo "${SGE_NODE_ADDR[$n]} $n" >>/etc/hosts
    done
    grep -qE "^${SGE_BRIDGE_ADDR//./\\.}[[:space:]]+$SGE_MASTER_ALIAS\$" /etc/hosts ||
        echo "$SGE_BRIDGE_ADDR $SGE_MASTER_ALIAS" >>/etc/hosts
}

sge_node_network() {
    ip link show "$SGE_BRIDGE" >/dev/null 2>&1 || ip link add "$SGE_BRIDGE" type bridge
    [[ $(ip -o addr show dev "$SGE_BRIDGE") == *" $SGE_BRIDGE_ADDR/"* ]] ||
        ip addr add "$SGE_BRIDGE_ADDR/$SGE_NET_PREFIX" dev "$SGE_BRIDGE"
    ip link set "$SGE_BRIDGE" up
    local n ns
    for n in "${SGE_NODES[@]}"; do
        ns=$(netns_of "$n")
        [[ -e /run/netns/$ns ]] || ip netns add "$ns"
        # The host side is named kkv-NODE (interface names have at most 15 characters).
        ip -n "$ns" link show eth0 >/dev/null 2>&1 || ip link add "kkv-$n" type veth peer name eth0 netns "$ns"
        ip link set "kkv-$n" master "$SGE_BRIDGE" up
        [[ $(ip -n "$ns" -o addr show dev eth0) == *" ${SGE_NODE_ADDR[$n]}/"* ]] ||
            ip -n "$ns" addr add "${SGE_NODE_ADDR[$n]}/$SGE_NET_PREFIX" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        ip -n "$ns" route replace default via "$SGE_BRIDGE_ADDR"
        # `ip netns exec` mounts /etc/netns/NS/* over /etc: no name server is reachable from the bridge, so
        # name lookups beyond /etc/hosts fail at once instead of timing out.
        mkdir -p "/etc/netns/$ns"
        printf '# Kakehashi test-cluster node %s: names come from /etc/hosts only\nnameserver 127.0.0.1\n' "$n" \
            >"/etc/netns/$ns/resolv.conf"
        # The node's own /etc/hosts (also mounted by `ip netns exec`). qmaster answers only to the name it gives
        # itself ("localhost") and refuses a client whose name for it differs ("server host resolves destination
        # host sgemaster as localhost"); the master's alias file is not read by the nodes. So on a node
        # "localhost" is the master's bridge address, first on its line, and 127.0.0.1 is the node's loopback.
        {
            printf '# Kakehashi test-cluster node %s\n' "$n"
            printf '%s localhost %s\n' "$SGE_BRIDGE_ADDR" "$SGE_MASTER_ALIAS"
            local m
            for m in "${SGE_NODES[@]}"; do printf '%s %s\n' "${SGE_NODE_ADDR[$m]}" "$m"; done
        } >"/etc/netns/$ns/hosts"
    done
    # The nodes' view of the cell (bind-mounted inside their mount namespaces).
    mkdir -p "$SGE_NODE_ETC"
    echo "$SGE_MASTER_ALIAS" >"$SGE_NODE_ETC/act_qmaster"
    : >"$SGE_NODE_ETC/host_aliases"
}

# sge_node_config TMPDIR: exec hosts, submit hosts, one parallel environment per whole-node type, the queue.
sge_node_config() {
    local t=$1 n type i=0
    for n in "${SGE_NODES[@]}"; do
        # An execd tells its jobs' processes apart by a supplementary group id from gid_range, and kills every
        # process holding it when a job ends. All execds here share one kernel, so each needs ids of its own
        # (the global range, 65400-65500, stays localhost's): else one job's end kills another's processes.
        i=$((i + 1))
        printf 'gid_range %d-%d\n' $((65500 + 100 * i)) $((65599 + 100 * i)) >"$t/$n"
        if qconf -sconf "$n" >/dev/null 2>&1; then (cd "$t" && qq -Mconf "$n"); else (cd "$t" && qq -Aconf "$n"); fi
        exec_host_conf "$n" f_node=4,rt_AF=4 >"$t/host_$n"
        qconf_put e "$n" "$t/host_$n"
        # Jobs on the nodes may ask qmaster about themselves (qstat -j $JOB_ID).
        grep -qx "$n" <<<"$(qconf -ss 2>/dev/null || true)" || qq -as "$n"
    done
    for type in "${SGE_WHOLE_NODE_TYPES[@]}"; do
        cat >"$t/pe_$type" <<EOF
pe_name            $type
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $SGE_SLOTS_PER_NODE
control_slaves     TRUE
job_is_first_task  TRUE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
        qconf_put p "$type" "$t/pe_$type"
    done
    # Four whole-node jobs at a time per node: the test cluster shares its nodes, as Slurm's here do.
    queue_conf "$SGE_NODE_QUEUE" "${SGE_NODES[*]}" NONE "${SGE_WHOLE_NODE_TYPES[*]}" $((4 * SGE_SLOTS_PER_NODE)) \
        >"$t/queue_node"
    qconf_put q "$SGE_NODE_QUEUE" "$t/queue_node"
    sge_node_tmpdirs
}

# Each node its own TMPDIR base, as real nodes each have their own /tmp. The nodes here share one /tmp, so a job's
# TMPDIR (/tmp/<job>.<task>.node.q) would be one directory for all its nodes, which each node's execd removes when
# its part of the job ends: under Open MPI's daemons still starting in it on the other node ("orte_session_dir
# failed", seen once in a two-node mpirun test). Idempotent; a running cluster gets it too (up.sh).
sge_node_tmpdirs() {
    local n
    for n in "${SGE_NODES[@]}"; do
        mkdir -p "/tmp/kk-$n" && chmod 1777 "/tmp/kk-$n"
        qconf -sq "$SGE_NODE_QUEUE" | tr -d '\\ \n' | grep -qF "[$n=/tmp/kk-$n]" ||
            qconf -mattr queue tmpdir "/tmp/kk-$n" "$SGE_NODE_QUEUE@$n" >/dev/null
    done
}

start_sge_node_execds() {
    local n ns
    for n in "${SGE_NODES[@]}"; do
        daemon_alive "sge_execd-$n" && continue
        ns=$(netns_of "$n")
        # shellcheck disable=SC2016  # expanded by the inner shell
        ip netns exec "$ns" unshare --uts --mount --propagation private sh -c '
            hostname "$1"
            mount --bind "$2/act_qmaster" "$SGE_ROOT/$SGE_CELL/common/act_qmaster"
            mount --bind "$2/host_aliases" "$SGE_ROOT/$SGE_CELL/common/host_aliases"
            exec /usr/sbin/sge_execd' sge-node "$n" "$SGE_NODE_ETC" ||
            die "sge_execd on $n did not start (see $SGE_EXECD_SPOOL/$n/messages)"
        mark_started "sge_execd-$n"
    done
}
