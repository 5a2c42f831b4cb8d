# Shared paths and helpers for the Kakehashi test-cluster scripts. Sourced, not run.
# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this

CLUSTER_DIR="${KAKEHASHI_CLUSTER_DIR:-/var/tmp/kakehashi-cluster}"
OPT_DIR=/opt/kakehashi-cluster
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

RUN_DIR="$CLUSTER_DIR/run"       # pid files
LOG_DIR="$CLUSTER_DIR/log"
ETC_DIR="$CLUSTER_DIR/etc"       # our own configs (sshd config, host key)
KNOWN_HOSTS="$CLUSTER_DIR/known_hosts"
KEY_DIR="$CLUSTER_DIR/keys"      # smoke-test client keys

# Torque-dialect wrappers from slurm-wlm-torque, unpacked privately (the .deb conflicts with gridengine-client).
TORQUE_BIN="$OPT_DIR/torque/usr/bin"
SITE_SGE_BIN="$OPT_DIR/sge-site/bin"     # TSUBAME/ABCI-style site qsub (-g GROUP)
SITE_SGE_JSV="$OPT_DIR/sge-site/jsv/whole-nodes.sh"  # client JSV the site qsub adds: f_node=N -> N hosts
MODULEFILES="$OPT_DIR/modulefiles"
GPU_DEV_DIR="$OPT_DIR/dev"               # fake /dev/nvidiaN -> /dev/null for Slurm GRES

SSH_PORT_SLURM=2222
SSH_PORT_PBS=2223
SSH_PORT_SGE_SITE=2224
SSH_PORT_SGE=2225
# A Slurm login node whose sbatch answers only after a delay: lets the tests kill a worker after the job was
# submitted but before the reply arrived (the crash that must never give a second job).
SSH_PORT_SLURM_SLOW=2226
SSH_PORTS=($SSH_PORT_SLURM $SSH_PORT_PBS $SSH_PORT_SGE_SITE $SSH_PORT_SGE $SSH_PORT_SLURM_SLOW)
SLOW_BIN="$OPT_DIR/slow/bin"

SLURM_NODES=(node01 node02)

# Grid Engine compute nodes for whole-node (multi-host) jobs. SGE tells hosts apart by the address a daemon
# connects from, so each node is a network namespace of its own on a bridge, with its own host name (UTS
# namespace) and an sge_execd inside; names resolve through /etc/hosts, as on a cluster's private network.
SGE_NODES=(sgenode01 sgenode02)
declare -A SGE_NODE_ADDR=([sgenode01]=10.77.0.11 [sgenode02]=10.77.0.12)
SGE_BRIDGE=kkbr0
SGE_BRIDGE_ADDR=10.77.0.1
SGE_NET_PREFIX=24
# The name the nodes reach sge_qmaster by (the bridge's address); an alias of "localhost" for SGE itself.
SGE_MASTER_ALIAS=sgemaster
SGE_NODE_QUEUE=node.q
# Whole-node resource types (TSUBAME f_node, ABCI rt_AF) and the slots each node gives a job of that type.
SGE_WHOLE_NODE_TYPES=(f_node rt_AF)
SGE_SLOTS_PER_NODE=16
SGE_NODE_ETC="$CLUSTER_DIR/etc/sge-node"   # act_qmaster and host_aliases as the nodes see them
SLURM_DB=kakehashi_slurm_acct
SLURM_DB_USER=kakehashi_slurm
SLURM_DB_PASS=kakehashi_slurm_pw
# Fallback private MariaDB, used only when the machine's one on 127.0.0.1:3306 does not answer.
PRIVATE_DB_PORT=3307

export SGE_ROOT=/var/lib/gridengine SGE_CELL=default

# Groups = Slurm accounts = SGE projects = TSUBAME/ABCI "-g" groups.
DEFAULT_GROUPS=(kkdemo kkteama kkteamb)
declare -A DEFAULT_MEMBERS=([kkdemo]="alice bob" [kkteama]="alice" [kkteamb]="bob")
DEFAULT_USERS=(alice bob carol)
# Each group's own storage, as a site's group area (TSUBAME /gs/bs/GROUP, ABCI /groups/GROUP): root-owned, the
# group's, setgid, rwx for its members and nothing for others. A project's shared data cache goes inside.
GROUP_AREA_DIR="$CLUSTER_DIR/groups"

# ensure_group_area GROUP: make (or repair) GROUP's area. Idempotent.
ensure_group_area() {
    install -d -o root -g root -m 755 "$GROUP_AREA_DIR"
    install -d -o root -g "$1" -m 2770 "$GROUP_AREA_DIR/$1"
}

log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# PID 1 here reaps orphans late, so a dead daemon lingers as a zombie and `kill -0` still succeeds.
pid_alive() {
    local pid=$1 stat
    [[ -n "$pid" ]] || return 1
    stat=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
    [[ -n "$stat" && "$stat" != Z* ]]
}

# pidfile_alive NAME: the daemon we recorded under NAME is still running.
pidfile_alive() {
    local f="$RUN_DIR/$1.pid"
    [[ -s "$f" ]] && pid_alive "$(<"$f")"
}

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.2 s.
wait_for() {
    local secs=$1 what=$2; shift 2
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            log "timed out after ${secs}s waiting for: $what"
            return 1
        fi
        sleep 0.2
    done
}

# The apptainer stand-in (bubblewrap) and its images: sandbox directories built offline from this machine's
# Debian packages and the job Python environment (install_container_images). Bump the stamp when they change.
APPTAINER_DIR="$OPT_DIR/apptainer"
IMAGES_DIR="$OPT_DIR/images"
IMAGES_STAMP=1
# The one image: what a job whose software is this NGC image gets on the test cluster.
CONTAINER_IMAGE_REF=docker://nvcr.io/nvidia/pytorch:24.05-py3
CONTAINER_IMAGE=pytorch-24.05

# The job Python environment (install_job_python): bump the stamp when the list changes.
JOB_PYTHON_PACKAGES=(torch==2.13.0 numpy==2.3.5 papermill==2.7.0 ipykernel==7.1.0 PyYAML==6.0.3)
JOB_PYTHON_STAMP=1
# The interactive sessions' environment (install_session_python): JupyterLab and the hub's single-user server, in
# the hub's own versions, and the repository's Lab extension, as a site's `jupyterlab` module would provide them. Its own virtualenv, so adding it
# rebuilds nothing else. Bump the stamp when the list changes.
SESSION_PYTHON_PACKAGES=(jupyterhub==6.1.1 jupyterlab==4.6.6)
SESSION_PYTHON_STAMP=3

# Debian packages this harness needs. mariadb-server is only for the private-DB fallback.
PACKAGES=(openssh-server munge slurmctld slurmd slurm-client slurmdbd mariadb-server
          gridengine-master gridengine-exec gridengine-client environment-modules
          libslurm-perl libslurmdb-perl libswitch-perl python3-venv
          openmpi-bin bubblewrap iproute2)

# One dpkg-query for all packages (dpkg -s per package costs ~50 ms each).
packages_missing() {
    local installed
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null |
                awk '$NF == "installed" {print $1}') || true
    local p
    for p in "${PACKAGES[@]}"; do
        grep -qx "$p" <<<"$installed" || echo "$p"
    done
}

SGE_QMASTER_PIDFILE=/var/spool/gridengine/qmaster/qmaster.pid
SGE_EXECD_SPOOL=/var/spool/gridengine/execd
SGE_EXECD_PIDFILE=$SGE_EXECD_SPOOL/localhost/execd.pid
SGE_ACCOUNTING=$SGE_ROOT/$SGE_CELL/common/accounting

# Where each daemon writes its pid. Daemons that drop privileges get a directory they own.
pidfile_of() {
    case $1 in
        sshd)        echo "$RUN_DIR/sshd.pid" ;;
        munged)      echo "$RUN_DIR/munge/munged.pid" ;;
        mariadbd)    echo "$CLUSTER_DIR/mysql/run/mariadbd.pid" ;;
        slurmdbd)    echo "$RUN_DIR/slurm/slurmdbd.pid" ;;
        slurmctld)   echo "$RUN_DIR/slurm/slurmctld.pid" ;;
        slurmd-*)    echo "$RUN_DIR/slurm/$1.pid" ;;
        sge_qmaster) echo "$SGE_QMASTER_PIDFILE" ;;
        sge_execd)   echo "$SGE_EXECD_PIDFILE" ;;
        sge_execd-*) echo "$SGE_EXECD_SPOOL/${1#sge_execd-}/execd.pid" ;;
        *)           die "unknown daemon $1" ;;
    esac
}

daemon_pid() { local f; f=$(pidfile_of "$1"); [[ -s $f ]] && tr -dc '0-9' <"$f"; }
daemon_alive() { local p; p=$(daemon_pid "$1") && pid_alive "$p"; }

# up.sh marks each daemon it starts itself; down.sh stops only marked ones, so a munged or MariaDB
# that someone else runs is never touched.
STARTED_DIR="$RUN_DIR/started"
mark_started() { mkdir -p "$STARTED_DIR"; touch "$STARTED_DIR/$1"; }

# Order matters for stopping (reverse of this).
ALL_DAEMONS=(sshd munged mariadbd slurmdbd slurmctld slurmd-node01 slurmd-node02 sge_qmaster sge_execd
             "${SGE_NODES[@]/#/sge_execd-}")

mysql_sys() { mysql --connect-timeout=3 -uroot -h127.0.0.1 -P3306 "$@"; }
mysql_private() { mysql --connect-timeout=3 -uroot --socket="$CLUSTER_DIR/mysql/run/mysqld.sock" "$@"; }

# Serialise up/down/install (e.g. several pytest workers calling up.sh at once): re-exec the calling script
# under flock. -o keeps the lock fd out of the script, so daemons it starts never inherit (and hold) the lock.
# Usage, first thing in a script: with_lock "$0" "$@"
with_lock() {
    [[ -n ${KAKEHASHI_CLUSTER_LOCKED:-} ]] && return 0
    mkdir -p "$CLUSTER_DIR"
    KAKEHASHI_CLUSTER_LOCKED=1 exec flock -o -w 900 "$CLUSTER_DIR/.lock" "$@"
}
