#!/bin/bash
# End-to-end smoke test of the running test cluster, done the way the portal does it: as the users, over
# ssh to each login node port. Also documents usage: every remote command below is what a backend would run.
#   smoke.sh            run all checks (~85 s; the Slurm TIMEOUT check needs the 1-minute minimum limit)
#   smoke.sh --quick    skip the Slurm TIMEOUT check (~30 s)
# Raw outputs of the scheduler commands are saved in $CLUSTER_DIR/smoke-samples/ for reference.
# Remote commands are single-quoted on purpose (expanded on the login node); JOB_* are read via ${!v}.
# shellcheck disable=SC2016,SC2034
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

quick=0
[[ ${1:-} == --quick ]] && quick=1
T0=$SECONDS
SAMPLES=$CLUSTER_DIR/smoke-samples
rm -rf "$SAMPLES"; mkdir -p "$SAMPLES"
CTL=$(mktemp -d)
trap 'for s in "$CTL"/*; do [[ -S $s ]] && ssh -o ControlPath="$s" -O exit x 2>/dev/null; done; rm -rf "$CTL"' EXIT

SSH_OPTS=(-o BatchMode=yes -o UserKnownHostsFile="$KNOWN_HOSTS" -o StrictHostKeyChecking=yes
          -o ControlMaster=auto -o ControlPath="$CTL/%r@%p" -o ControlPersist=120 -o LogLevel=ERROR)

# r USER PORT 'remote command': run a command on a login node as USER (one multiplexed connection each).
r() {
    local user=$1 port=$2; shift 2
    ssh "${SSH_OPTS[@]}" -i "$KEY_DIR/$user" -p "$port" "$user@127.0.0.1" "$@"
}

npass=0 nfail=0
ok()   { npass=$((npass + 1)); printf '  PASS %s\n' "$1"; }
bad()  { nfail=$((nfail + 1)); printf '  FAIL %s\n' "$1"; [[ -z ${2:-} ]] || printf '%s\n' "$2" | sed 's/^/       | /'; }
# expect NAME HAYSTACK REGEX: REGEX (grep -E) must match some line of HAYSTACK.
expect() { if grep -qE -- "$3" <<<"$2"; then ok "$1"; else bad "$1" "$2"; fi; }
save() { cat >"$SAMPLES/$1"; }

# slurm_wait USER PORT JOBID: wait until accounting shows a final state; prints "State|ExitCode".
slurm_wait() {
    local out i
    for ((i = 0; i < 240; i++)); do
        out=$(r "$1" "$2" "sacct -n -X -P -j $3 -o State,ExitCode" 2>&1 || true)
        case $out in
            '' | PENDING* | RUNNING* | REQUEUED* | COMPLETING* | SUSPENDED*) sleep 0.5 ;;
            *) echo "$out"; return 0 ;;
        esac
    done
    echo "still running: $out"
}

# ranks_per_node < job output: "node01=2 node02=2" from the "rank=R node=N" lines of mpi.sh.
ranks_per_node() {
    awk -F'node=' '/^rank=/ {n[$2]++} END {for (h in n) print h "=" n[h]}' | sort | paste -sd' '
}

# sge_wait USER PORT JOBID: wait for the job's qacct record (it appears ~1 s after the job ends).
sge_wait() {
    local i
    for ((i = 0; i < 120; i++)); do
        r "$1" "$2" "qacct -j $3" 2>/dev/null && return 0
        sleep 0.5
    done
    echo "no qacct record for job $3"
}

# ---------------------------------------------------------------------------------------- job scripts
JOB_OK='#!/bin/bash
id -un
. /etc/profile.d/modules.sh
module load cuda/12.4
echo "CUDA_HOME=$CUDA_HOME"
exit 0'
JOB_EXIT3='#!/bin/bash
echo "about to exit 3"
exit 3'
JOB_ENV='#!/bin/bash
id -un
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}"
echo "NODELIST=${SLURM_JOB_NODELIST:-}"
echo "PBS_JOBID=${PBS_JOBID:-} PBS_O_WORKDIR=${PBS_O_WORKDIR:-} PBS_NODEFILE=${PBS_NODEFILE:-}"
[[ -z ${PBS_NODEFILE:-} ]] || echo "nodefile: $(tr "\n" " " <"$PBS_NODEFILE")"
echo "JOB_ID=${JOB_ID:-} NSLOTS=${NSLOTS:-} PE=${PE:-}"
for a in "$@"; do echo "arg=[$a]"; done
exit 0'
JOB_SLEEP='#!/bin/bash
sleep 300'
# Two MPI ranks on every node of the allocation (Open MPI finds the nodes through Slurm or the SGE PE), started
# the way TSUBAME's guide does it: NP from the number of hosts, mpiexec -npernode PPN -n NP.
JOB_MPI='#!/bin/bash
echo "host=$(hostname) NHOSTS=${NHOSTS:-} NSLOTS=${NSLOTS:-} PE=${PE:-}"
if [[ -n ${PE_HOSTFILE:-} ]]; then cut -d" " -f1 "$PE_HOSTFILE" | sed "s/^/pe_host=/"; fi
PPN=2
NP=$(expr $PPN \* ${NHOSTS:-$SLURM_NNODES})
mpiexec -npernode $PPN -n $NP bash -c '"'"'echo "rank=$OMPI_COMM_WORLD_RANK node=${SLURMD_NODENAME:-$(hostname)}"'"'"'
'

for u in alice bob; do
    r "$u" $SSH_PORT_SLURM 'rm -rf ~/kk-smoke && mkdir ~/kk-smoke'
    for s in OK EXIT3 ENV SLEEP MPI; do
        v=JOB_$s
        r "$u" $SSH_PORT_SLURM "cat > ~/kk-smoke/${s,,}.sh && chmod +x ~/kk-smoke/${s,,}.sh" <<<"${!v}"
    done
done

# ================================================================================ Slurm (port 2222)
echo "== Slurm login node (ssh -p $SSH_PORT_SLURM)"
P=$SSH_PORT_SLURM
if ((!quick)); then
    # Submitted first because it needs the 1-minute minimum time limit plus slurmctld's ~30 s check.
    timeout_id=$(r alice $P 'cd ~/kk-smoke && sbatch --parsable -t 1 -J kk-timeout -o timeout.out sleep.sh')
fi
out=$(r alice $P 'cd ~/kk-smoke && sbatch -J kk-ok -o ok-%j.out ok.sh'); echo "$out" | save sbatch.txt
expect "sbatch prints 'Submitted batch job N'" "$out" '^Submitted batch job [0-9]+$'
id_ok=${out##* }
id_3=$(r alice $P 'cd ~/kk-smoke && sbatch --parsable -J kk-exit3 -o exit3.out exit3.sh')
id_gpu=$(r alice $P 'cd ~/kk-smoke && sbatch --parsable -J kk-gpu --gres=gpu:a100:8 -o gpu.out env.sh')
id_2n=$(r alice $P 'cd ~/kk-smoke && sbatch --parsable -J kk-2node -N 2 --gres=gpu:a100:8 -o 2node.out env.sh')
id_mpi=$(r alice $P 'cd ~/kk-smoke && sbatch --parsable -J kk-mpi -N 2 --ntasks-per-node=2 -o mpi.out mpi.sh')
id_bob=$(r bob $P 'cd ~/kk-smoke && sbatch --parsable -J kk-bob -o bob.out ok.sh')
id_cancel=$(r alice $P 'cd ~/kk-smoke && sbatch --parsable -J kk-cancel -o cancel.out sleep.sh')
r alice $P "squeue -h -t all -o '%i|%j|%u|%a|%T|%M|%l|%D|%R' -j $id_ok,$id_3,$id_gpu,$id_2n,$id_cancel" 2>&1 | save squeue.txt

out=$(slurm_wait alice $P "$id_ok");   expect "ok job COMPLETED 0:0 in sacct" "$out" '^COMPLETED\|0:0$'
out=$(r alice $P "cat ~/kk-smoke/ok-$id_ok.out" 2>&1)
expect "ok job ran as alice" "$out" '^alice$'
expect "ok job: module load cuda/12.4 set CUDA_HOME" "$out" "^CUDA_HOME=$OPT_DIR/sw/cuda-12.4\$"
out=$(slurm_wait alice $P "$id_3");    expect "exit 3 job FAILED 3:0 in sacct" "$out" '^FAILED\|3:0$'
out=$(slurm_wait alice $P "$id_gpu");  expect "gpu job COMPLETED" "$out" '^COMPLETED'
out=$(r alice $P 'cat ~/kk-smoke/gpu.out')
expect "--gres=gpu:a100:8 gives CUDA_VISIBLE_DEVICES=0..7" "$out" 'CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7$'
out=$(slurm_wait alice $P "$id_2n");   expect "2-node job COMPLETED" "$out" '^COMPLETED'
out=$(r alice $P 'cat ~/kk-smoke/2node.out')
expect "2-node x 8 GPU job ran on node[01-02]" "$out" 'NODELIST=node\[01-02\]'
out=$(slurm_wait alice $P "$id_mpi");  expect "2-node mpiexec job COMPLETED" "$out" '^COMPLETED\|0:0$'
out=$(r alice $P 'cat ~/kk-smoke/mpi.out' | ranks_per_node)
expect "mpiexec -npernode 2 -n 4 in a 2-node allocation: 2 ranks on node01, 2 on node02" "$out" '^node01=2 node02=2$'
out=$(r alice $P 'apptainer exec docker://nvcr.io/nvidia/pytorch:24.05-py3 sh -c "cat /etc/kakehashi-image; test -e /etc/slurm || echo no-host-files; python -c \"import torch; print(torch.__version__)\""' 2>&1)
echo "$out" | save apptainer-exec.txt
expect "apptainer (stand-in) runs a command in the image" "$out" '^docker://nvcr.io/nvidia/pytorch:24.05-py3$'
expect "apptainer (stand-in): the host's files are not in the container" "$out" '^no-host-files$'
expect "apptainer (stand-in): the image's Python has torch" "$out" '^2\.13\.0'
out=$(slurm_wait bob $P "$id_bob");    expect "bob's job COMPLETED" "$out" '^COMPLETED'
out=$(r bob $P 'cat ~/kk-smoke/bob.out'); expect "bob's job runs as bob" "$out" '^bob$'
out=$(r alice $P "sacct -P -j $id_ok,$id_3,$id_gpu,$id_2n -o JobID,JobName,User,Account,Partition,State,ExitCode,Start,End,Elapsed,NNodes,NodeList,AllocTRES")
expect "sacct AllocTRES shows gres/gpu=8" "$out" "^$id_gpu\|.*gres/gpu=8"
expect "sacct AllocTRES of the 2-node job shows gres/gpu=16,node=2" "$out" "^$id_2n\|.*gres/gpu=16.*node=2"
# JobName/Partition of a job that ends within a second may read "allocation"/"" for a few seconds (the
# job-start record reaches slurmdbd after the step records); User/Account/ExitCode are right at once.
expect "sacct shows account kkdemo (alice's default)" "$out" "^$id_ok\|[^|]*\|alice\|kkdemo\|"
r alice $P "sacct --json -j $id_ok" 2>&1 | head -c 20000 | save sacct-json.txt || true

# cancel a running job
for ((i = 0; i < 40; i++)); do
    [[ $(r alice $P "squeue -h -j $id_cancel -o %T") == RUNNING ]] && break; sleep 0.5
done
r alice $P "scontrol show job $id_cancel" | save scontrol-show-job-running.txt
r alice $P "scancel $id_cancel"
out=$(slurm_wait alice $P "$id_cancel"); expect "scancel'd job: 'CANCELLED by UID', ExitCode 0:0" "$out" '^CANCELLED by [0-9]+\|0:0$'
out=$(r alice $P "sacct -P -j $id_cancel -o JobID,State,ExitCode"); echo "$out" | save sacct-cancelled.txt
expect "scancel'd job: its batch step CANCELLED 0:15" "$out" "^$id_cancel\.batch\|CANCELLED\|0:15\$"

out=$(r alice $P 'cd ~/kk-smoke && sbatch --gres=gpu:a100:9 ok.sh' 2>&1 || true); echo "$out" | save sbatch-gpu9.txt
expect "gpu:a100:9 refused at once" "$out" 'Requested node configuration is not available'
out=$(r alice $P 'cd ~/kk-smoke && sbatch -A nosuch ok.sh' 2>&1 || true); echo "$out" | save sbatch-badaccount.txt
expect "-A nosuch refused by association enforcement" "$out" 'Invalid account or account/partition combination specified'
out=$(r alice $P 'cd ~/kk-smoke && sbatch -A kkteamb ok.sh' 2>&1 || true)
expect "alice cannot charge bob's group kkteamb" "$out" 'Invalid account or account/partition combination specified'
# carol is in none of the research groups (a test may give her a group of her own, e.g. a site account).
out=$(r carol $P 'sbatch -A kkdemo --wrap true' 2>&1 || true)
expect "carol (not in kkdemo) cannot charge kkdemo" "$out" 'Invalid account or account/partition combination specified'
out=$(r alice $P '. /etc/profile.d/modules.sh; module load cuda/12.4; module load cuda/12.1' 2>&1 || true)
echo "$out" | save module-conflict.txt
expect "module load cuda/12.1 after cuda/12.4 fails with the conflict message" "$out" 'Module cannot be loaded due to a conflict'
out=$(r alice $P 'type module 2>&1 || true')
expect "plain ssh exec shell has no 'module' (jobs must source modules.sh)" "$out" 'not found'
out=$(sftp -b - "${SSH_OPTS[@]}" -i "$KEY_DIR/alice" -P $P alice@127.0.0.1 <<<"get kk-smoke/ok-$id_ok.out $CTL/sftp.out" 2>&1 &&
      cat "$CTL/sftp.out")
expect "output file readable over SFTP" "$out" 'CUDA_HOME='

# ========================================================================== PBS/Torque (port 2223)
echo "== PBS/Torque-dialect login node (ssh -p $SSH_PORT_PBS)"
P=$SSH_PORT_PBS
out=$(r alice $P 'command -v qsub qstat qdel sbatch')
expect "qsub/qstat/qdel are the Torque wrappers" "$out" "^$TORQUE_BIN/qsub"
out=$(r alice $P 'cd ~/kk-smoke && qsub -l nodes=1:ppn=2,walltime=00:01:00 -N kkpbs -o $HOME/kk-smoke/pbs.out -e $HOME/kk-smoke/pbs.err ok.sh')
echo "$out" | save qsub-torque.txt
expect "qsub prints the bare job id" "$out" '^[0-9]+$'
id_pbs=$out
r alice $P "qstat -f $id_pbs" | save qstat-f-torque-queued.txt
out=$(slurm_wait alice $P "$id_pbs");  expect "PBS job COMPLETED 0:0 in sacct" "$out" '^COMPLETED\|0:0$'
out=$(r alice $P "qstat -f $id_pbs"); echo "$out" | save qstat-f-torque-done.txt
expect "qstat -f: job_state = C, ncpus 2, walltime" "$out" 'job_state = C'
expect "qstat -f: Resource_List.ncpus = 2" "$out" 'Resource_List.ncpus = 2'
out=$(r alice $P 'cat ~/kk-smoke/pbs.out')
expect "PBS job output: alice + CUDA_HOME" "$out" "CUDA_HOME=$OPT_DIR/sw/cuda-12.4"
# The brief's two-option form: accepted, but the wrapper keeps only the LAST -l (see README).
out=$(r alice $P 'cd ~/kk-smoke && qsub -l nodes=1:ppn=2 -l walltime=00:01:00 -N kkpbs2 -o $HOME/kk-smoke/pbs2.out -e $HOME/kk-smoke/pbs2.err env.sh')
id_pbs2=$out
out=$(slurm_wait alice $P "$id_pbs2"); expect "qsub with two -l options runs" "$out" '^COMPLETED\|0:0$'
out=$(r alice $P 'cat ~/kk-smoke/pbs2.out')
expect "PBS_JOBID/PBS_O_WORKDIR/PBS_NODEFILE set in job" "$out" "PBS_JOBID=$id_pbs2 PBS_O_WORKDIR=/home/alice/kk-smoke PBS_NODEFILE=/tmp/"
id=$(r alice $P 'cd ~/kk-smoke && qsub -N kkpbs3 -o $HOME/kk-smoke/pbs3.out -e $HOME/kk-smoke/pbs3.err exit3.sh')
out=$(slurm_wait alice $P "$id");      expect "PBS exit 3 job: FAILED 3:0" "$out" '^FAILED\|3:0$'
id=$(r alice $P 'cd ~/kk-smoke && qsub -N kkpbsdel -o /dev/null -e /dev/null sleep.sh')
for ((i = 0; i < 40; i++)); do
    [[ $(r alice $P "qstat $id" | awk 'NR > 2 {print $5}') == R ]] && break; sleep 0.5
done
r alice $P "qstat; qstat -f $id" | save qstat-torque-running.txt
r alice $P "qdel $id"
out=$(slurm_wait alice $P "$id");      expect "qdel'd job: CANCELLED" "$out" '^CANCELLED'
out=$(r alice $P "qstat -f 999999; echo rc=\$?" 2>&1); expect "qstat -f unknown id: exit 153" "$out" 'rc=153'
out=$(r bob $P 'cd ~/kk-smoke && id=$(qsub -o $HOME/kk-smoke/pbsbob.out -e /dev/null ok.sh) && echo $id')
out=$(slurm_wait bob $P "$out");      expect "bob's PBS job COMPLETED" "$out" '^COMPLETED'
out=$(r bob $P 'cat ~/kk-smoke/pbsbob.out'); expect "bob's PBS job runs as bob" "$out" '^bob$'

# =================================================================== SGE, TSUBAME/ABCI style (port 2224)
echo "== Grid Engine login node with site qsub -g (ssh -p $SSH_PORT_SGE_SITE)"
P=$SSH_PORT_SGE_SITE
out=$(r alice $P 'command -v qsub qstat qacct')
expect "qsub is the site wrapper" "$out" "^$SITE_SGE_BIN/qsub\$"
expect "qstat is the real SGE one" "$out" '^/usr/bin/qstat$'
out=$(r alice $P 'cd ~/kk-smoke && qsub -g kkdemo -l f_node=2 -l h_rt=0:10:00 -cwd -N kk-site -o ok.sge.out -j y ok.sh')
echo "$out" | save qsub-sge.txt
expect "qsub prints 'Your job N (\"name\") has been submitted'" "$out" '^Your job [0-9]+ \("kk-site"\) has been submitted$'
id_site=$(sed -E 's/^Your job ([0-9]+) .*/\1/' <<<"$out")
id_sleep=$(r alice $P 'cd ~/kk-smoke && qsub -terse -g kkteama -l gpu=8 -pe smp 4 -cwd -N kk-sleep -o /dev/null -j y sleep.sh')
id_fnode=$(r alice $P 'cd ~/kk-smoke && qsub -terse -g kkdemo -l f_node=2 -l h_rt=0:10:00 -cwd -N kk-fnode -o fnode.out -j y mpi.sh')
id_hrt=$(r alice $P 'cd ~/kk-smoke && qsub -terse -g kkdemo -l h_rt=0:0:5 -cwd -N kk-hrt -o /dev/null -j y sleep.sh')
id_args=$(r alice $P "cd ~/kk-smoke && qsub -terse -g kkdemo -cwd -N kk-args -o args.out -j y env.sh -g 'two words' '\$HOME'")
for ((i = 0; i < 40; i++)); do
    r alice $P "qstat -u alice" | grep -qE "^ *$id_sleep .* r " && break; sleep 0.5
done
r alice $P 'qstat -u "*"' | save qstat-sge.txt
r alice $P 'qstat -xml -u "*"' | save qstat-xml-sge.txt
r alice $P "qstat -j $id_sleep" | save qstat-j-sge.txt
out=$(sge_wait alice $P "$id_site"); echo "$out" | save qacct-sge.txt
expect "qacct: exit_status 0" "$out" '^exit_status +0 *$'
expect "qacct: project kkdemo (from -g kkdemo)" "$out" '^project +kkdemo *$'
expect "qacct: account kkdemo" "$out" '^account +kkdemo *$'
expect "qacct: category shows f_node=2" "$out" '^category .*f_node=2'
out=$(r alice $P 'cat ~/kk-smoke/ok.sge.out')
expect "SGE job output: alice + module load cuda/12.4" "$out" "CUDA_HOME=$OPT_DIR/sw/cuda-12.4"
out=$(sge_wait alice $P "$id_args"); out=$(r alice $P 'cat ~/kk-smoke/args.out' | tr '\n' ' ')
expect "site qsub leaves script arguments alone (-g, spaces, \$HOME)" "$out" 'arg=\[-g\] arg=\[two words\] arg=\[\$HOME\]'
out=$(sge_wait alice $P "$id_hrt"); echo "$out" | save qacct-sge-hrt.txt
expect "job past h_rt: qacct failed 37" "$out" '^failed +37'
r alice $P "qdel $id_sleep" | save qdel-sge.txt
out=$(sge_wait alice $P "$id_sleep"); echo "$out" | save qacct-sge-qdel.txt
expect "qdel'd running job: failed 100, exit_status 137" "$out" '^failed +100'
expect "qdel'd job used PE smp with 4 slots, gpu in category" "$out" '^granted_pe +smp'
out=$(sge_wait alice $P "$id_fnode"); echo "$out" | save qacct-sge-f_node.txt
expect "f_node=2: the site JSV added PE f_node with 2 x 16 slots" "$out" '^category .*-pe f_node 32'
out=$(r alice $P 'cat ~/kk-smoke/fnode.out')
expect "f_node=2 job sees NHOSTS=2, PE f_node" "$out" 'NHOSTS=2 NSLOTS=32 PE=f_node$'
expect "f_node=2 job: sgenode01 in \$PE_HOSTFILE" "$out" '^pe_host=sgenode01$'
expect "f_node=2 job: sgenode02 in \$PE_HOSTFILE" "$out" '^pe_host=sgenode02$'
out=$(ranks_per_node <<<"$out")
expect "mpiexec -npernode 2 -n \$((2 * NHOSTS)) over qrsh -inherit: 2 ranks on each node" "$out" '^sgenode01=2 sgenode02=2$'
out=$(r alice $P 'cd ~/kk-smoke && qsub -g kkdemo -w e -l f_node=3 ok.sh' 2>&1 || true)
expect "f_node=3 (the test cluster has 2 nodes) refused" "$out" 'no suitable queues'
out=$(r alice $P 'cd ~/kk-smoke && qsub -g kkdemo -l f_node=1 -pe smp 2 ok.sh' 2>&1 || true)
expect "f_node with an explicit -pe refused by the site JSV" "$out" 'do not request a parallel environment'
id=$(r alice $P 'cd ~/kk-smoke && qsub -terse -g kkdemo -cwd -o /dev/null -j y exit3.sh')
out=$(sge_wait alice $P "$id"); expect "exit 3 job: failed 0, exit_status 3" "$out" '^exit_status +3 *$'
out=$(r alice $P 'cd ~/kk-smoke && qsub -g kkteamb ok.sh' 2>&1 || true); echo "$out" | save qsub-sge-noaccess.txt
expect "alice refused on kkteamb" "$out" 'no access to project "kkteamb" for user "alice"'
out=$(r alice $P 'cd ~/kk-smoke && qsub -g nosuch ok.sh' 2>&1 || true); echo "$out" | save qsub-sge-noproject.txt
expect "unknown group refused" "$out" 'project "nosuch" does not exist'
out=$(r alice $P 'cd ~/kk-smoke && qsub -w e -l gpu=9 ok.sh' 2>&1 || true); echo "$out" | save qsub-sge-gpu9.txt
expect "-l gpu=9 with -w e refused" "$out" 'no suitable queues'
out=$(r alice $P "qstat -j 999999; echo rc=\$?" 2>&1); expect "qstat -j unknown: exit 1" "$out" 'rc=1'
out=$(r bob $P 'cd ~/kk-smoke && qsub -terse -g kkteamb -cwd -o bob.sge.out -j y ok.sh')
sge_wait bob $P "$out" >/dev/null
out=$(r bob $P 'cat ~/kk-smoke/bob.sge.out'); expect "bob's SGE job runs as bob" "$out" '^bob$'

# =========================================================================== plain SGE (port 2225)
echo "== plain Grid Engine login node (ssh -p $SSH_PORT_SGE)"
P=$SSH_PORT_SGE
out=$(r alice $P 'qsub -g kkdemo ~/kk-smoke/ok.sh' 2>&1 || true)
expect "real SGE qsub rejects -g" "$out" 'invalid option argument "-g"'
id=$(r alice $P 'cd ~/kk-smoke && qsub -terse -P kkdemo -l gpu=8 -pe mpi 2 -cwd -N kk-plain -o plain.out -j y env.sh')
out=$(sge_wait alice $P "$id")
expect "plain SGE job with -P kkdemo: exit 0, project kkdemo" "$out" '^project +kkdemo'
expect "plain SGE job: PE mpi, 2 slots" "$out" '^slots +2 *$'
out=$(r alice $P 'cat ~/kk-smoke/plain.out')
expect "SGE job env: NSLOTS=2 PE=mpi" "$out" 'NSLOTS=2 PE=mpi'
id=$(r bob $P 'cd ~/kk-smoke && qsub -terse -cwd -o bob.plain.out -j y ok.sh')
out=$(sge_wait bob $P "$id"); expect "bob's plain SGE job: exit 0, owner bob" "$out" '^owner +bob'

r carol $P 'rm -rf ~/kk-smoke && mkdir ~/kk-smoke && printf "#!/bin/bash\nid -un\n" >~/kk-smoke/ok.sh'
id=$(r carol $P 'cd ~/kk-smoke && qsub -terse -cwd -o carol.out -j y ok.sh')
sge_wait carol $P "$id" >/dev/null
out=$(r carol $P 'cat ~/kk-smoke/carol.out'); expect "carol (no group) can run an SGE job without -P" "$out" '^carol$'
out=$(r carol $P 'cd ~/kk-smoke && qsub -P kkdemo ok.sh' 2>&1 || true)
expect "carol refused on project kkdemo" "$out" 'no access to project "kkdemo" for user "carol"'

# ================================================================================ Slurm TIMEOUT (late)
if ((!quick)); then
    echo "== Slurm time limit"
    out=$(slurm_wait alice $SSH_PORT_SLURM "$timeout_id"); echo "$out" | save sacct-timeout.txt
    expect "job past its time limit ends TIMEOUT" "$out" '^TIMEOUT\|'
    r alice $SSH_PORT_SLURM "sacct -P -j $timeout_id -o JobID,State,ExitCode,Elapsed,Timelimit" | save sacct-timeout-steps.txt
fi

# Saved last so that the records are final (see the JobName note above).
r alice $SSH_PORT_SLURM "sacct -P -j $id_ok,$id_3,$id_gpu,$id_2n,$id_cancel -o JobID,JobName,User,Account,Partition,State,ExitCode,Start,End,Elapsed,NNodes,NodeList,AllocTRES" |
    save sacct.txt
echo "== $npass passed, $nfail failed in $((SECONDS - T0))s (samples in $SAMPLES)"
((nfail == 0))
