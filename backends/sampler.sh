#!/bin/sh
# Kakehashi's sampler: what one node of a job really uses, every INTERVAL seconds, appended to
# JOB_DIR/kakehashi-samples/NODE.log (backends/sampling.py reads it; docs/guide/idle-gpus.md).
#
#   sh kakehashi-sampler.sh JOB_DIR INTERVAL NVIDIA_SMI [NODE]
#
# Plain POSIX sh, GNU grep and awk: what every compute node has (python3 is not on every RHEL node). It never makes
# the job fail: the job script starts it in the background with its output thrown away, and it only ever writes
# its own file. A line per fact, each sample written with one append so a reader never sees half of one:
#   # kakehashi-sampler 1 node=N interval=S hz=H page_kb=P nvidia-smi=yes|no start=EPOCH
#   p EPOCH PROCS CPU_TICKS RSS_KB      the job's processes on this node (those with the job's KAKEHASHI_JOB_DIR)
#   g EPOCH <nvidia-smi's CSV line>     one per GPU, exactly as nvidia-smi printed it
#   e EPOCH <words>                     nvidia-smi failed this time (its first line)
# Its own processes must not count as the job's: run without the variable that marks them.
if [ -n "${KAKEHASHI_JOB_DIR+set}" ]; then unset KAKEHASHI_JOB_DIR; exec sh "$0" "$@"; fi
dir=$1
every=${2:-30}
smi=${3:-nvidia-smi}
node=$4
case $every in ''|*[!0-9]*) every=30 ;; esac
[ "$every" -ge 1 ] || every=1
if [ -z "$node" ]; then
    # A per-node launch by mpirun: this rank's host is its line of the job's host list (hosts.txt, rank order).
    if [ -n "${OMPI_COMM_WORLD_RANK:-}" ] && [ -f "$dir/hosts.txt" ]; then
        node=$(sed -n "$((OMPI_COMM_WORLD_RANK + 1))p" "$dir/hosts.txt")
    fi
    node=${node:-${SLURMD_NODENAME:-${AWS_BATCH_JOB_NODE_INDEX:+node$AWS_BATCH_JOB_NODE_INDEX}}}
    node=${node:-$(hostname -s 2>/dev/null || hostname)}
fi
# A node name becomes a file name: keep it to safe characters.
node=$(printf '%s' "$node" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-64)
mkdir -p "$dir/kakehashi-samples" 2>/dev/null || exit 0
out="$dir/kakehashi-samples/$node.log"
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
page_kb=$(( $(getconf PAGESIZE 2>/dev/null || echo 4096) / 1024 ))
if command -v "$smi" >/dev/null 2>&1; then gpu=yes; else gpu=no; fi
echo "# kakehashi-sampler 1 node=$node interval=$every hz=$hz page_kb=$page_kb nvidia-smi=$gpu start=$(date +%s)" >> "$out"
query=timestamp,index,uuid,utilization.gpu,memory.used,memory.total,power.draw
# Asked to stop (the job script's kill, passed on by srun or mpirun): end at once and well. A per-node task that
# ends badly, or is still running when the job ends, is a failed job to Grid Engine's accounting.
trap 'kill "$napping" 2>/dev/null; exit 0' TERM INT HUP
napping=
# What started this: the job script, Slurm's step, mpirun or its daemon on another node. When it is gone the job was
# killed without this hearing of it: Grid Engine's qdel kills Open MPI's daemon, but not the ranks it put in process
# groups of their own, and a sampler left so ran every second for days. No fork: it is asked every second.
# The job script names itself (KAKEHASHI_SAMPLER_LAUNCHER=$$) where it starts this directly: a cancel in the moment
# between its fork and this line leaves this orphaned before $PPID is read, and Slurm's scancel at a job's first
# second once left a sampler that took init for its launcher.
launcher=${KAKEHASHI_SAMPLER_LAUNCHER:-$PPID}
case $launcher in ''|*[!0-9]*) launcher=$PPID ;; esac
launcher_alive() {
    { read -r stat < "/proc/$$/stat"; } 2>/dev/null || return 0
    set -- ${stat##*") "}  # the fields after the command's name: state, then the parent's id
    [ "$2" = "$launcher" ]
}
# Stop with the job: its script writes its exit status when the payload ends (and kills this too); a scheduler's
# kill takes this with the rest of the job, or takes what started it.
while [ ! -e "$dir/kakehashi-exit-status" ] && [ -d "$dir" ] && launcher_alive; do
    now=$(date +%s)
    # The job's processes: those whose environment holds this job's directory (every launcher passes it on).
    # Launchers are left out by name (they pass the variable on).
    procs=$(grep -lzxF "KAKEHASHI_JOB_DIR=$dir" /proc/[0-9]*/environ 2>/dev/null | sed 's,/environ$,/stat,')
    line=$( [ -n "$procs" ] && awk -v now="$now" -v page="$page_kb" '
        { s = $0; comm = s; sub(/^[^(]*\(/, "", comm); sub(/\) [^)]*$/, "", comm)
          if (comm ~ /^(srun|mpirun|mpiexec|orted|prted|slurmstepd)$/) next
          sub(/^.*\) /, "", s); split(s, f, " "); n++; ticks += f[12] + f[13]; rss += f[22] * page }
        END { printf "p %s %d %d %d", now, n, ticks, rss }' $procs 2>/dev/null)
    sample=${line:-"p $now 0 0 0"}
    if [ "$gpu" = yes ]; then
        csv=$(KAKEHASHI_SAMPLER_NODE=$node "$smi" --query-gpu=$query --format=csv,noheader,nounits 2>&1)
        if [ $? -eq 0 ]; then
            sample="$sample
$(printf '%s\n' "$csv" | tr -cd '\11\12\40-\176' | sed "/^\$/d; s/^/g $now /")"
        else
            sample="$sample
e $now $(printf '%s\n' "$csv" | head -n 1 | tr -cd '\11\40-\176' | cut -c1-200)"
        fi
    fi
    printf '%s\n' "$sample" >> "$out"
    # Naps of a second, so the job's end (its exit-status file) stops every node's sampler within one.
    napped=0
    while [ "$napped" -lt "$every" ] && [ ! -e "$dir/kakehashi-exit-status" ] && launcher_alive; do
        sleep 1 &
        napping=$!
        wait "$napping"
        napped=$((napped + 1))
    done
done
exit 0
