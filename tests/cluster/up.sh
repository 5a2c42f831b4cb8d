#!/bin/bash
# Start the Kakehashi test cluster (sshd login nodes, munge, Slurm + slurmdbd, Son of Grid Engine) without
# systemd, and wait until every part answers. Idempotent: returns at once when everything is already healthy.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$HERE/sge-nodes.sh"
with_lock "$0" "$@"

[[ $EUID -eq 0 ]] || die "run as root"
T0=$SECONDS

# --------------------------------------------------------------------------------------------- health
slurm_nodes_ok() {
    local states
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
    local n
    for n in "${SLURM_NODES[@]}"; do
        grep -qE "^$n (idle|mixed|allocated|completing)\$" <<<"$states" || return 1
    done
}

sge_exec_ok() {
    # The states column of a queue instance is empty when it is usable: all.q@localhost and each node's.
    local want="all.q@localhost ${SGE_NODES[*]/#/$SGE_NODE_QUEUE@}"
    qstat -f 2>/dev/null | awk -v want="$want" '
        BEGIN {n = split(want, w, " "); for (i = 1; i <= n; i++) need[w[i]] = 1}
        ($1 in need) && NF == 5 {ok++} END {exit ok != n}'
}

ssh_ports_open() {
    local p
    for p in "${SSH_PORTS[@]}"; do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || return 1
    done
}

healthy() {
    local d
    for d in "${ALL_DAEMONS[@]}"; do
        [[ $d == mariadbd && ! -f $CLUSTER_DIR/mysql/use-private ]] && continue
        # A munged someone else started is fine too: checked by use below.
        [[ $d == munged ]] && continue
        daemon_alive "$d" || return 1
    done
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || return 1
    scontrol ping 2>/dev/null | grep -q 'is UP' || return 1
    slurm_nodes_ok || return 1
    sge_exec_ok || return 1
    ssh_ports_open || return 1
    [[ -s $KNOWN_HOSTS ]] && grep -q "^\[127.0.0.1\]:$SSH_PORT_SLURM_SLOW " "$KNOWN_HOSTS"
}

need_install() {
    [[ -n $(packages_missing) ]] && return 0
    [[ -x $TORQUE_BIN/qsub && -x $SITE_SGE_BIN/qsub && -f $MODULEFILES/cuda/12.4 && -L $GPU_DEV_DIR/nvidia7 \
           && -x $OPT_DIR/slurm/task_prolog.sh && -f $MODULEFILES/pytorch/2.13 \
           && -f $OPT_DIR/pyenv/.kakehashi-$JOB_PYTHON_STAMP \
           && -f $OPT_DIR/jupyterenv/.kakehashi-$SESSION_PYTHON_STAMP && -f $MODULEFILES/jupyterlab/4.6 && -x $SLOW_BIN/sbatch && -x $SITE_SGE_JSV \
           && -x $APPTAINER_DIR/bin/apptainer && -L /usr/local/bin/apptainer \
           && -f $IMAGES_DIR/.kakehashi-$IMAGES_STAMP-$JOB_PYTHON_STAMP ]] \
        || return 0
    grep -qxF "$MODULEFILES" /etc/environment-modules/modulespath || return 0
    return 1
}

if need_install; then
    "$HERE/install.sh"
fi

# ------------------------------------------------------------------------------------------ node names
setup_node_names() {
    # Multi-node jobs rendezvous on the first host of the allocation by name (torchrun, mpirun), as on a
    # real cluster where compute node names resolve: make node01/node02 resolve to this host.
    local n
    for n in "${SLURM_NODES[@]}"; do
        getent hosts "$n" >/dev/null || echo "127.0.0.1 $n" >>/etc/hosts
    done
    sge_node_names
}

setup_node_names

if healthy; then
    # Group areas came after many clusters were set up: a running one gets them too (cheap, idempotent).
    for g in "${DEFAULT_GROUPS[@]}"; do ensure_group_area "$g"; done
    sge_node_tmpdirs  # came later too
    log "cluster already up and healthy ($((SECONDS - T0))s)"
    exit 0
fi

mkdir -p "$RUN_DIR" "$LOG_DIR" "$ETC_DIR" "$KEY_DIR" "$STARTED_DIR"
chmod 755 "$CLUSTER_DIR"

# ------------------------------------------------------------------------------------- users, groups
setup_users() {
    local u g
    for g in "${DEFAULT_GROUPS[@]}"; do
        getent group "$g" >/dev/null || groupadd "$g"
    done
    for u in "${DEFAULT_USERS[@]}"; do
        if ! getent passwd "$u" >/dev/null; then
            useradd -m -s /bin/bash "$u"
        fi
        # useradd leaves "!" (locked); with UsePAM no, sshd then refuses even key logins.
        [[ $(getent shadow "$u" | cut -d: -f2) == '*' ]] || usermod -p '*' "$u"
    done
    for g in "${DEFAULT_GROUPS[@]}"; do
        for u in ${DEFAULT_MEMBERS[$g]}; do
            id -nG "$u" | tr ' ' '\n' | grep -qx "$g" || usermod -aG "$g" "$u"
        done
    done
    # Smoke-test client keys, one per user; the portal's own tests may authorize their own with authorize.sh.
    chmod 700 "$KEY_DIR"
    for u in "${DEFAULT_USERS[@]}"; do
        [[ -f $KEY_DIR/$u ]] || ssh-keygen -q -t ed25519 -N '' -C "$u@kakehashi-test" -f "$KEY_DIR/$u"
        "$HERE/authorize.sh" "$u" "$(<"$KEY_DIR/$u.pub")" >/dev/null
    done
}

# ------------------------------------------------------------------------------------------------ sshd
write_sshd_config() {
    [[ -f $ETC_DIR/ssh_host_ed25519_key ]] ||
        ssh-keygen -q -t ed25519 -N '' -C kakehashi-test-cluster -f "$ETC_DIR/ssh_host_ed25519_key"
    local base=/usr/local/bin:/usr/bin:/bin
    cat >"$ETC_DIR/sshd_config" <<EOF
# Kakehashi test cluster: one sshd acting as four login nodes, told apart by port.
Port $SSH_PORT_SLURM
Port $SSH_PORT_PBS
Port $SSH_PORT_SGE_SITE
Port $SSH_PORT_SGE
Port $SSH_PORT_SLURM_SLOW
ListenAddress ${KAKEHASHI_CLUSTER_LISTEN:-127.0.0.1}
# Only one host key type, so clients that pin ed25519 from known_hosts negotiate it.
HostKey $ETC_DIR/ssh_host_ed25519_key
PidFile $RUN_DIR/sshd.pid
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AuthorizedKeysFile .ssh/authorized_keys
StrictModes yes
PrintMotd no
UseDNS no
LogLevel VERBOSE
MaxSessions 50
MaxStartups 100
MaxAuthTries 10
Subsystem sftp internal-sftp

Match LocalPort $SSH_PORT_SLURM
    SetEnv PATH=$base KAKEHASHI_LOGIN_NODE=slurm
Match LocalPort $SSH_PORT_PBS
    SetEnv PATH=$TORQUE_BIN:$base KAKEHASHI_LOGIN_NODE=pbs
Match LocalPort $SSH_PORT_SGE_SITE
    SetEnv PATH=$SITE_SGE_BIN:$base KAKEHASHI_LOGIN_NODE=sge-site
Match LocalPort $SSH_PORT_SGE
    SetEnv PATH=$base KAKEHASHI_LOGIN_NODE=sge
Match LocalPort $SSH_PORT_SLURM_SLOW
    SetEnv PATH=$SLOW_BIN:$base KAKEHASHI_LOGIN_NODE=slurm-slow
EOF
    local key port
    key=$(cut -d' ' -f1-2 "$ETC_DIR/ssh_host_ed25519_key.pub")
    : >"$KNOWN_HOSTS.new"
    for port in "${SSH_PORTS[@]}"; do
        echo "[127.0.0.1]:$port $key" >>"$KNOWN_HOSTS.new"
    done
    chmod 644 "$KNOWN_HOSTS.new"
    mv -f "$KNOWN_HOSTS.new" "$KNOWN_HOSTS"
}

start_sshd() {
    write_sshd_config
    if daemon_alive sshd; then
        # Config may have changed (e.g. new port map): SIGHUP makes sshd re-exec with it.
        kill -HUP "$(daemon_pid sshd)"
    else
        mkdir -p /run/sshd
        /usr/sbin/sshd -t -f "$ETC_DIR/sshd_config" || die "sshd config invalid"
        /usr/sbin/sshd -f "$ETC_DIR/sshd_config" -E "$LOG_DIR/sshd.log"
        mark_started sshd
    fi
    wait_for 10 "sshd ports" ssh_ports_open || die "sshd did not come up (see $LOG_DIR/sshd.log)"
}

# ----------------------------------------------------------------------------------------------- munge
munge_ok() { munge -n | unmunge >/dev/null; }

start_munge() {
    if munge_ok 2>/dev/null; then return 0; fi
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o munge -g munge -m 755 "$RUN_DIR/munge"
    [[ -s /etc/munge/munge.key ]] || {
        # Normally created by the package's postinst.
        dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
        chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
    }
    # munged insists on owning its log file and pid directory.
    install -d -o munge -g munge -m 755 "$LOG_DIR/munge"
    # --force: a stale socket left by a killed munged would otherwise stop it.
    runuser -u munge -- /usr/sbin/munged --force --pid-file="$(pidfile_of munged)" \
        --log-file="$LOG_DIR/munge/munged.log" || die "munged failed to start (see $LOG_DIR/munge/munged.log)"
    mark_started munged
    wait_for 10 "munge" munge_ok || die "munged did not come up (see $LOG_DIR/munge/munged.log)"
}

# ------------------------------------------------------------------------------------- MariaDB for slurmdbd
# Prefer the machine's running MariaDB; only without it start a private one (own datadir/port/socket).
DB_HOST=127.0.0.1
DB_PORT=3306

start_private_mariadb() {
    local d=$CLUSTER_DIR/mysql
    # mariadbd runs as mysql and dies silently if it cannot write its log or socket: give it its own dirs.
    install -d -o mysql -g mysql "$d" "$d/data" "$d/run" "$d/log"
    if [[ ! -d $d/data/mysql ]]; then
        log "initialising private MariaDB datadir"
        mariadb-install-db --no-defaults --user=mysql --datadir="$d/data" --auth-root-authentication-method=normal \
            --skip-test-db >"$LOG_DIR/mariadb-install.log" 2>&1 || die "mariadb-install-db failed ($LOG_DIR/mariadb-install.log)"
    fi
    if ! daemon_alive mariadbd; then
        (cd "$d" && setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$d/data" \
            --port=$PRIVATE_DB_PORT --bind-address=127.0.0.1 --socket="$d/run/mysqld.sock" \
            --pid-file="$(pidfile_of mariadbd)" --log-error="$d/log/error.log" \
            --skip-log-bin --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &)
        mark_started mariadbd
    fi
    wait_for 30 "private MariaDB" mysql_private -e 'select 1' || die "private MariaDB did not start ($d/log/error.log)"
    DB_PORT=$PRIVATE_DB_PORT
}

setup_db() {
    local sql="CREATE DATABASE IF NOT EXISTS $SLURM_DB;
        CREATE USER IF NOT EXISTS '$SLURM_DB_USER'@'localhost' IDENTIFIED BY '$SLURM_DB_PASS';
        CREATE USER IF NOT EXISTS '$SLURM_DB_USER'@'127.0.0.1' IDENTIFIED BY '$SLURM_DB_PASS';
        GRANT ALL ON $SLURM_DB.* TO '$SLURM_DB_USER'@'localhost';
        GRANT ALL ON $SLURM_DB.* TO '$SLURM_DB_USER'@'127.0.0.1';"
    if [[ -z ${KAKEHASHI_CLUSTER_PRIVATE_DB:-} ]] && mysql_sys -e 'select 1' >/dev/null 2>&1; then
        rm -f "$CLUSTER_DIR/mysql/use-private"
        mysql_sys -e "$sql"
    else
        log "MariaDB on 127.0.0.1:3306 not usable: starting a private one on port $PRIVATE_DB_PORT"
        mkdir -p "$CLUSTER_DIR/mysql"; touch "$CLUSTER_DIR/mysql/use-private"
        start_private_mariadb
        mysql_private -e "$sql"
    fi
}

# ----------------------------------------------------------------------------------------------- Slurm
write_slurm_configs() {
    local host
    host=$(hostname -s)
    install -d -o slurm -g slurm "$CLUSTER_DIR/slurm" "$CLUSTER_DIR/slurm/state" "$CLUSTER_DIR/slurm/spool" \
        "$RUN_DIR/slurm" "$LOG_DIR/slurm"
    local n
    for n in "${SLURM_NODES[@]}"; do
        install -d -o root -g root "$CLUSTER_DIR/slurm/spool/$n"
    done

    cat >/etc/slurm/slurm.conf.new <<EOF
# Written by Kakehashi tests/cluster/up.sh; rewritten on every start.
ClusterName=kakehashi
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$CLUSTER_DIR/slurm/state
SlurmdSpoolDir=$CLUSTER_DIR/slurm/spool/%n
SlurmctldPidFile=$RUN_DIR/slurm/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurm/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurm/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in this sandbox.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
# The nodes declare more CPUs/memory than this 2-core box has.
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5
# Keep finished jobs visible in squeue/scontrol for an hour (default 300 s).
MinJobAge=3600
KillWait=5
InactiveLimit=0
OverTimeLimit=0
MessageTimeout=20
SlurmdTimeout=300
SlurmctldTimeout=120
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations
# Both accounting sources a centre may have: slurmdbd (sacct) and the job-completion log (sacct -c).
JobCompType=jobcomp/filetxt
JobCompLoc=$CLUSTER_DIR/slurm/jobcomp.log
GresTypes=gpu
# PBS_NODEFILE for jobs from the PBS login node (see install.sh).
TaskProlog=$OPT_DIR/slurm/task_prolog.sh
Epilog=$OPT_DIR/slurm/epilog.sh
# Torque's nodes=N:ppn=P per node for jobs from the PBS login node (/etc/slurm/job_submit.lua).
JobSubmitPlugins=lua
EOF
    local port=6821
    for n in "${SLURM_NODES[@]}"; do
        # Each node gets its own slurmd port; NodeHostname must differ per node in a build without
        # --enable-multiple-slurmd, NodeAddr is loopback for all.
        local nh=$host
        [[ $n == node01 ]] || nh=$n
        echo "NodeName=$n NodeHostname=$nh NodeAddr=127.0.0.1 Port=$port CPUs=16 RealMemory=256000 Gres=gpu:a100:8 State=UNKNOWN" \
            >>/etc/slurm/slurm.conf.new
        port=$((port + 1))
    done
    local nodes
    nodes=$(IFS=,; echo "${SLURM_NODES[*]}")
    echo "PartitionName=gpu Nodes=$nodes Default=YES MaxTime=24:00:00 DefaultTime=01:00:00 State=UP" \
        >>/etc/slurm/slurm.conf.new
    mv -f /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf

    cat >/etc/slurm/job_submit.lua <<'EOF'
-- Written by Kakehashi tests/cluster/up.sh. Torque's "#PBS -l nodes=N:ppn=P" means P processors on each of N
-- nodes; sbatch reads it as N nodes and N*P tasks, which Slurm may spread unevenly (3 + 1 for nodes=2:ppn=2),
-- so mpirun -npernode P would find too few slots on a node. Give such jobs P tasks per node, as Torque does.
function slurm_job_submit(job_desc, part_list, submit_uid)
   local script = job_desc.script
   if script ~= nil and job_desc.ntasks_per_node == slurm.NO_VAL16 then
      local ppn = string.match(script, "\n#PBS%s+%-l%s+nodes=%d+:ppn=(%d+)")
      if ppn ~= nil then
         job_desc.ntasks_per_node = tonumber(ppn)
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end
EOF

    {
        echo "# Fake GPUs: slurmd 22.05 drops GPUs without File=, so point them at /dev/null symlinks."
        echo "AutoDetect=off"
        for n in "${SLURM_NODES[@]}"; do
            echo "NodeName=$n Name=gpu Type=a100 File=$GPU_DEV_DIR/nvidia[0-7]"
        done
    } >/etc/slurm/gres.conf

    # PBS_JOBID / PBS_O_WORKDIR / PBS_NODEFILE... inside jobs, for the Torque-dialect login node.
    mkdir -p /etc/slurm/plugstack.conf.d
    echo "optional /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pbs.so" >/etc/slurm/plugstack.conf.d/kakehashi-pbs.conf

    local dbf=/etc/slurm/slurmdbd.conf
    cat >"$dbf.new" <<EOF
# Written by Kakehashi tests/cluster/up.sh.
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
PidFile=$RUN_DIR/slurm/slurmdbd.pid
LogFile=$LOG_DIR/slurm/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=$DB_HOST
StoragePort=$DB_PORT
StorageUser=$SLURM_DB_USER
StoragePass=$SLURM_DB_PASS
StorageLoc=$SLURM_DB
EOF
    # slurmdbd refuses a config readable by others.
    chown slurm:slurm "$dbf.new"; chmod 600 "$dbf.new"
    mv -f "$dbf.new" "$dbf"
}

start_slurmdbd() {
    if ! daemon_alive slurmdbd; then
        /usr/sbin/slurmdbd
        mark_started slurmdbd
    fi
    wait_for 30 "slurmdbd" sacctmgr -n show cluster ||
        die "slurmdbd did not answer (see $LOG_DIR/slurm/slurmdbd.log)"
    # slurmctld only records into a cluster the database knows.
    sacctmgr -nP show cluster format=cluster | grep -qx kakehashi || sacctmgr -i add cluster kakehashi >/dev/null
}

start_slurmctld() {
    if ! daemon_alive slurmctld; then
        /usr/sbin/slurmctld
        mark_started slurmctld
    fi
    wait_for 30 "slurmctld" bash -c 'scontrol ping | grep -q "is UP"' ||
        die "slurmctld did not come up (see $LOG_DIR/slurm/slurmctld.log)"
    # sacct -c opens the completion log for append even to read it; slurmctld leaves it 0644.
    touch "$CLUSTER_DIR/slurm/jobcomp.log"
    chmod 666 "$CLUSTER_DIR/slurm/jobcomp.log"
}

start_slurmds() {
    local n
    for n in "${SLURM_NODES[@]}"; do
        if ! daemon_alive "slurmd-$n"; then
            /usr/sbin/slurmd -N "$n"
            mark_started "slurmd-$n"
        fi
    done
    local deadline=$((SECONDS + 30))
    until slurm_nodes_ok; do
        # DRAIN/DOWN survive restarts (e.g. after a GRES config fix): clear them once the slurmd answers.
        for n in "${SLURM_NODES[@]}"; do
            if sinfo -h -n "$n" -o '%T' 2>/dev/null | grep -qE 'drain|down|inval'; then
                scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
            fi
        done
        if ((SECONDS >= deadline)); then
            sinfo -N -o '%N %T %E' >&2 || true
            die "Slurm nodes not idle (see $LOG_DIR/slurm/slurmd-*.log)"
        fi
        sleep 0.3
    done
}

# ----------------------------------------------------------------------------------- Son of Grid Engine
qmaster_ok() { qstat >/dev/null 2>&1; }

sge_fix_hostname() {
    # qmaster resolves 127.0.0.1 to "localhost" while clients call themselves $(hostname): without the alias
    # every client gets "access denied (client IP resolved to host name localhost ...)".
    local common=$SGE_ROOT/$SGE_CELL/common
    echo "localhost $(hostname) $(hostname -s) $SGE_MASTER_ALIAS" | awk '{delete s; o=""; for (i=1;i<=NF;i++) if (!s[$i]++) o=o (o?" ":"") $i; print o}' \
        >"$common/host_aliases"
    echo localhost >"$common/act_qmaster"
}

start_qmaster() {
    install -d -o sgeadmin -g sgeadmin /var/run/gridengine
    sge_fix_hostname
    if ! daemon_alive sge_qmaster; then
        /usr/sbin/sge_qmaster
        mark_started sge_qmaster
    fi
    wait_for 30 "sge_qmaster" qmaster_ok || die "sge_qmaster did not come up (see /var/spool/gridengine/qmaster/messages)"
}

# qconf_put KIND NAME FILE: add (-A*) or modify (-M*) an SGE object from FILE, whichever applies.
qconf_put() {
    local kind=$1 name=$2 file=$3 list
    case $kind in
        # The -s*l listings exit 1 when the list is empty.
        q)   list=$(qconf -sql 2>/dev/null || true) ;;
        e)   list=$(qconf -sel 2>/dev/null || true) ;;
        p)   list=$(qconf -spl 2>/dev/null || true) ;;
        u)   list=$(qconf -sul 2>/dev/null || true) ;;
        prj) list=$(qconf -sprjl 2>/dev/null || true) ;;
    esac
    if grep -qxF "$name" <<<"$list"; then
        qq "-M$kind" "$file"
    else
        qq "-A$kind" "$file"
    fi
}

# qconf reports success on stderr too; show its output only when it fails.
qq() {
    local out
    out=$(qconf "$@" 2>&1) || { printf '%s\n' "$out" >&2; die "qconf $* failed"; }
}

configure_sge() {
    local t
    t=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$t'" RETURN

    { qconf -ss 2>/dev/null || true; } | grep -qx localhost || qq -as localhost

    # Global configuration: -Mconf wants a file literally named "global".
    qconf -sconf global |
        sed -E -e 's/^(shell_start_mode[[:space:]]+).*/\1unix_behavior/' \
               -e 's/^(finished_jobs[[:space:]]+).*/\1100/' \
               -e 's/^(load_report_time[[:space:]]+).*/\100:00:10/' |
        awk '/^reporting_params/ {print "reporting_params             accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00"; skip = /\\$/; next}
             skip {skip = /\\$/; next} {print}' >"$t/global"
    (cd "$t" && qq -Mconf global)

    qconf -ssconf |
        sed -E -e 's/^(schedule_interval[[:space:]]+).*/\10:0:1/' \
               -e 's/^(job_load_adjustments[[:space:]]+).*/\1NONE/' \
               -e 's/^(load_adjustment_decay_time[[:space:]]+).*/\10:0:0/' \
               -e 's/^(flush_submit_sec[[:space:]]+).*/\11/' \
               -e 's/^(flush_finish_sec[[:space:]]+).*/\11/' >"$t/sched"
    qq -Msconf "$t/sched"

    # Consumables: generic "gpu", TSUBAME-like node fractions, ABCI-like resource type. Per job (JOB),
    # so "-l f_node=2" means two nodes' worth regardless of slots.
    {
        qconf -sc | grep -vE '^(gpu|f_node|h_node|q_node|s_gpu|rt_AF)[[:space:]]'
        echo "gpu     gpu     INT <= YES JOB 0 0"
        echo "f_node  f_node  INT <= YES JOB 0 0"
        echo "h_node  h_node  INT <= YES JOB 0 0"
        echo "q_node  q_node  INT <= YES JOB 0 0"
        echo "s_gpu   s_gpu   INT <= YES JOB 0 0"
        echo "rt_AF   rt_AF   INT <= YES JOB 0 0"
    } >"$t/complex"
    qq -Mc "$t/complex"

    exec_host_conf localhost gpu=8,f_node=4,h_node=8,q_node=16,s_gpu=32,rt_AF=4 >"$t/host"
    qconf_put e localhost "$t/host"

    local us
    for us in arusers deadlineusers defaultdepartment; do
        { qconf -sul 2>/dev/null || true; } | grep -qx "$us" ||
            qq -Au "/usr/share/gridengine/util/resources/usersets/$us"
    done

    local pe rule
    for pe in smp mpi; do
        # shellcheck disable=SC2016  # literal SGE keywords
        if [[ $pe == smp ]]; then rule='$pe_slots'; else rule='$fill_up'; fi
        cat >"$t/pe_$pe" <<EOF
pe_name            $pe
slots              999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $rule
control_slaves     TRUE
job_is_first_task  TRUE
urgency_slots      min
accounting_summary TRUE
qsort_args         NONE
EOF
        qconf_put p "$pe" "$t/pe_$pe"
    done

    queue_conf all.q localhost "BATCH INTERACTIVE" "smp mpi" 16 >"$t/queue"
    qconf_put q all.q "$t/queue"
    sge_node_config "$t"
}

# exec_host_conf HOST COMPLEX_VALUES: an exec host's configuration, on stdout.
exec_host_conf() {
    cat <<EOF
hostname              $1
load_scaling          NONE
complex_values        $2
user_lists            NONE
xuser_lists           NONE
projects              NONE
xprojects             NONE
usage_scaling         NONE
report_variables      NONE
EOF
}

# queue_conf NAME HOSTS QTYPE PE_LIST SLOTS: a cluster queue's configuration, on stdout.
queue_conf() {
    {
        cat <<EOF
qname                 $1
hostlist              $2
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 $3
ckpt_list             NONE
pe_list               $4
rerun                 FALSE
slots                 $5
tmpdir                /tmp
shell                 /bin/bash
prolog                NONE
epilog                NONE
shell_start_mode      unix_behavior
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
EOF
        local lim
        for lim in s_rt h_rt s_cpu h_cpu s_fsize h_fsize s_data h_data s_stack h_stack s_core h_core \
                   s_rss h_rss s_vmem h_vmem; do
            printf '%-21s INFINITY\n' "$lim"
        done
    }
}

start_execd() {
    if ! daemon_alive sge_execd; then
        /usr/sbin/sge_execd
        mark_started sge_execd
    fi
    start_sge_node_execds
    local deadline=$((SECONDS + 90)) restart_at=$((SECONDS + 25)) n
    until sge_exec_ok; do
        # An error state (E) survives restarts; clear it once.
        qmod -c 'all.q@localhost' "${SGE_NODES[@]/#/$SGE_NODE_QUEUE@}" >/dev/null 2>&1 || true
        # A node execd that has not reported yet shows "u". On a loaded CI machine one stayed so for the whole
        # wait (sgenode02, CI of stop 30) while its messages said only "starting up": start it once more.
        if ((SECONDS >= restart_at)); then
            restart_at=$((SECONDS + 25))
            for n in "${SGE_NODES[@]}"; do
                qstat -f 2>/dev/null | awk -v q="$SGE_NODE_QUEUE@$n" '$1 == q && NF == 6 && $6 ~ /u/ {f = 1} END {exit !f}' ||
                    continue
                log "sge_execd on $n has not reported to qmaster: starting it again"
                kill "$(daemon_pid "sge_execd-$n")" 2>/dev/null || true
                sleep 1
                start_sge_node_execds
            done
        fi
        if ((SECONDS >= deadline)); then
            qstat -f >&2 || true
            for n in localhost "${SGE_NODES[@]}"; do tail -n 5 "$SGE_EXECD_SPOOL/$n/messages" >&2 2>/dev/null || true; done
            die "a Grid Engine queue instance is not usable (see $SGE_EXECD_SPOOL/*/messages)"
        fi
        sleep 0.3
    done
}

# -------------------------------------------------------------------------------------------------- run
setup_users
start_sshd
start_munge
setup_db
write_slurm_configs
# The nodes' names must resolve before qmaster starts: it reads host_aliases (which names sgemaster) once, at
# start, and an alias it could not resolve then makes it refuse every node execd ("local host name error").
sge_node_network
start_qmaster          # SGE and Slurm are independent; qmaster starts while slurmdbd connects
start_slurmdbd
start_slurmctld
start_slurmds
configure_sge
start_execd

for g in "${DEFAULT_GROUPS[@]}"; do
    # shellcheck disable=SC2086
    "$HERE/add-group.sh" "$g" ${DEFAULT_MEMBERS[$g]} >/dev/null
done

healthy || die "started, but the health check still fails"
log "cluster up in $((SECONDS - T0))s: ssh 127.0.0.1 ports $SSH_PORT_SLURM (slurm) $SSH_PORT_PBS (pbs) $SSH_PORT_SGE_SITE (sge-site) $SSH_PORT_SGE (sge) $SSH_PORT_SLURM_SLOW (slurm, slow sbatch); state in $CLUSTER_DIR"
