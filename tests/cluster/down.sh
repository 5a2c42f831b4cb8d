#!/bin/bash
# Stop what up.sh started (only daemons it marked as its own, found by pid file).
#   down.sh          stop the daemons; jobs, job ids and accounting are kept. Jobs still running keep
#                    running (as on a real cluster whose daemons restart) and are picked up by the next up.sh.
#   down.sh --purge  also cancel every job and wipe scheduler state: Slurm state dir and accounting database,
#                    SGE job sequence number, spooled jobs and accounting file. Job ids then start at 1.
#                    Users, keys, groups and configuration are kept (up.sh recreates the Slurm associations).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
with_lock "$0" "$@"

[[ $EUID -eq 0 ]] || die "run as root"
purge=0
case ${1:-} in
    '') ;;
    --purge) purge=1 ;;
    *) die "usage: $0 [--purge]" ;;
esac
T0=$SECONDS

stop_daemon() {
    local name=$1 pid
    [[ -f $STARTED_DIR/$name ]] || return 0
    if pid=$(daemon_pid "$name") && pid_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        local deadline=$((SECONDS + 20))
        # A stopped daemon lingers as a zombie until PID 1 reaps it; pid_alive treats Z as gone.
        while pid_alive "$pid"; do
            if ((SECONDS >= deadline)); then
                log "$name (pid $pid) ignored SIGTERM for 20s: SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
                break
            fi
            sleep 0.1
        done
    fi
    rm -f "$STARTED_DIR/$name"
    [[ -z ${KAKEHASHI_CLUSTER_DEBUG:-} ]] || log "stopped $name"
}

slurm_idle() { [[ -z $(squeue -h -t pending,running,suspended,completing -o %A 2>/dev/null) ]]; }
sge_idle() { [[ -z $(qstat -u '*' 2>/dev/null) ]]; }

if ((purge)); then
    # Cancel jobs while the schedulers still run and wait for their processes to go, so nothing of an old
    # job writes into the fresh state and no job step is left orphaned.
    if daemon_alive slurmctld; then
        jobs=$(squeue -h -t pending,running,suspended -o %A 2>/dev/null || true)
        # shellcheck disable=SC2086
        [[ -z $jobs ]] || scancel $jobs 2>/dev/null || true
        wait_for 30 "Slurm jobs to end" slurm_idle ||
            log "some Slurm jobs still completing"
    fi
    if daemon_alive sge_qmaster; then
        qdel -f -u '*' >/dev/null 2>&1 || true
        wait_for 30 "SGE jobs to end" sge_idle ||
            log "some SGE jobs still listed"
    fi
fi

# sge_qmaster needs ~8 s to shut down whatever it is told (its threads notice the shutdown only on their
# next timeout), so stop Grid Engine in the background while the rest stops. Otherwise reverse start order.
( for d in sge_execd "${SGE_NODES[@]/#/sge_execd-}"; do stop_daemon "$d"; done; stop_daemon sge_qmaster ) &
sge_stopper=$!
for ((i = ${#ALL_DAEMONS[@]} - 1; i >= 0; i--)); do
    [[ ${ALL_DAEMONS[i]} == sge_* ]] || stop_daemon "${ALL_DAEMONS[i]}"
done
wait "$sge_stopper"

if ((purge)); then
    rm -rf "$CLUSTER_DIR/slurm/state" "$CLUSTER_DIR/slurm/spool"
    # The accounting DB must go with the state dir: job ids restart at 1 and old records would collide.
    rm -rf "$CLUSTER_DIR/mysql"     # private fallback MariaDB (already stopped above), if any
    if mysql_sys -e 'select 1' >/dev/null 2>&1; then
        mysql_sys -e "DROP DATABASE IF EXISTS $SLURM_DB"
    elif [[ -z ${KAKEHASHI_CLUSTER_PRIVATE_DB:-} ]]; then
        log "MariaDB on 127.0.0.1:3306 not reachable: database $SLURM_DB not dropped there"
    fi

    rm -f /var/spool/gridengine/qmaster/jobseqnum
    rm -rf /var/spool/gridengine/qmaster/job_scripts/*
    for host in localhost "${SGE_NODES[@]}"; do
        rm -rf "${SGE_EXECD_SPOOL:?}/$host"/{jobs,active_jobs,job_scripts}/*
    done
    [[ ! -f $SGE_ACCOUNTING ]] || : >"$SGE_ACCOUNTING"
fi

log "cluster down$( ((purge)) && echo ' and purged') in $((SECONDS - T0))s"
