#!/bin/bash
# Install the Debian packages and the static files of the Kakehashi test cluster.
# Idempotent: when everything is present it only checks and returns (well under a second).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$HERE/images.sh"
with_lock "$0" "$@"

[[ $EUID -eq 0 ]] || die "run as root"

export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -o DPkg::Lock::Timeout=900 -y --no-install-recommends)

preseed_gridengine() {
    # Without these answers gridengine's postinst leaves SGE unconfigured (no cell "default").
    local pkg
    for pkg in gridengine-common gridengine-master gridengine-exec gridengine-client; do
        debconf-set-selections <<EOT
$pkg shared/gridengineconfig boolean true
$pkg shared/gridenginecell string default
$pkg shared/gridenginemaster string localhost
EOT
    done
}

install_packages() {
    local missing
    mapfile -t missing < <(packages_missing)
    ((${#missing[@]})) || return 0
    log "installing: ${missing[*]}"
    preseed_gridengine
    local out
    if ! out=$("${APT[@]}" install "${missing[@]}" 2>&1); then
        # Stale or absent package lists are the usual cause on a fresh machine; refresh once.
        if grep -qE 'Unable to locate package|has no installation candidate|404 +Not Found|Failed to fetch' <<<"$out"; then
            log "package lists look stale: apt-get update and retry"
            apt-get -o DPkg::Lock::Timeout=900 update -q >/dev/null
            "${APT[@]}" install "${missing[@]}"
        else
            printf '%s\n' "$out" >&2
            die "apt-get install failed"
        fi
    fi
    # The image's policy-rc.d keeps postinsts from starting daemons, but be sure none of ours is running
    # unmanaged (a stray munged/slurmd would hold the ports up.sh wants).
}

install_torque_wrappers() {
    [[ -x "$TORQUE_BIN/qsub" && -L "$TORQUE_BIN/sbatch" ]] && return 0
    log "unpacking slurm-wlm-torque into $OPT_DIR/torque"
    local tmp
    tmp=$(mktemp -d)
    # slurm-wlm-torque conflicts with gridengine-client (both ship qsub/qstat/qdel): never dpkg -i it.
    if ! (cd "$tmp" && apt-get -o DPkg::Lock::Timeout=900 download -q slurm-wlm-torque >/dev/null 2>&1); then
        apt-get -o DPkg::Lock::Timeout=900 update -q >/dev/null
        (cd "$tmp" && apt-get -o DPkg::Lock::Timeout=900 download -q slurm-wlm-torque >/dev/null)
    fi
    rm -rf "$OPT_DIR/torque"
    mkdir -p "$OPT_DIR/torque"
    dpkg-deb -x "$tmp"/slurm-wlm-torque_*.deb "$OPT_DIR/torque"
    rm -rf "$tmp"
    # The Perl wrappers exec "$FindBin::Bin/sbatch" etc., i.e. tools beside themselves.
    local t
    for t in sbatch salloc srun scontrol squeue scancel sinfo sacct; do
        ln -sfn "/usr/bin/$t" "$TORQUE_BIN/$t"
    done
}

install_site_qsub() {
    mkdir -p "$SITE_SGE_BIN"
    cat >"$SITE_SGE_BIN/qsub.new" <<'WRAP'
#!/bin/bash
# TSUBAME/ABCI-style site qsub: "-g GROUP" (the centres' billing group) becomes "-P GROUP -A GROUP" for
# Son of Grid Engine; every other argument is passed through unchanged, in order, without re-splitting.
# Only -g on the command line is translated; a "#$ -g" line inside the script reaches SGE as-is and is
# rejected there, as it would be by plain SGE.
set -euo pipefail
args=()
# SGE qsub options that take a value: their value must not be mistaken for the script.
takes_value=" -a -A -ac -ar -b -c -ckpt -C -dc -display -dl -e -hold_jid -hold_jid_ad -i -j -js -jsv -l -m -M -masterq -N -now -o -ot -p -P -pe -q -r -R -sc -shell -S -sync -t -tc -u -v -w -wd -@ "
while (($#)); do
    case $1 in
        -g)
            (($# >= 2)) || { echo "qsub: option -g requires a group argument" >&2; exit 2; }
            args+=(-P "$2" -A "$2"); shift 2 ;;
        -g?*)
            g=${1#-g}; args+=(-P "$g" -A "$g"); shift ;;
        --)
            args+=("$@"); break ;;
        -*)
            if [[ $takes_value == *" $1 "* && $# -ge 2 ]]; then
                args+=("$1" "$2"); shift 2
            else
                args+=("$1"); shift
            fi ;;
        *)
            # First non-option is the script (or command with -b y): stop translating from here on,
            # so the job's own arguments (even a literal "-g") are left alone.
            args+=("$@"); break ;;
    esac
done
# The site's job verifier turns whole-node requests (-l f_node=N) into N hosts, as on TSUBAME/ABCI.
exec /usr/bin/qsub -jsv @JSV@ "${args[@]}"
WRAP
    sed -i "s|@JSV@|$SITE_SGE_JSV|" "$SITE_SGE_BIN/qsub.new"
    chmod 755 "$SITE_SGE_BIN/qsub.new"
    mv -f "$SITE_SGE_BIN/qsub.new" "$SITE_SGE_BIN/qsub"
    mkdir -p "${SITE_SGE_JSV%/*}"
    sed -e "s|@TYPES@|${SGE_WHOLE_NODE_TYPES[*]}|" -e "s|@SLOTS@|$SGE_SLOTS_PER_NODE|g" \
        -e "s|@QUEUE@|$SGE_NODE_QUEUE|" "$HERE/sge-site.jsv" >"$SITE_SGE_JSV.new"
    chmod 755 "$SITE_SGE_JSV.new"
    mv -f "$SITE_SGE_JSV.new" "$SITE_SGE_JSV"
}

install_modulefiles() {
    local d=$MODULEFILES
    mkdir -p "$d/cuda" "$d/python" "$d/openmpi"
    local v
    for v in 12.4 12.1; do
        mkdir -p "$OPT_DIR/sw/cuda-$v/bin"
        cat >"$OPT_DIR/sw/cuda-$v/bin/nvcc" <<NVCC
#!/bin/sh
echo "nvcc: fake CUDA $v compiler (Kakehashi test cluster)"
NVCC
        chmod 755 "$OPT_DIR/sw/cuda-$v/bin/nvcc"
        cat >"$d/cuda/$v" <<MOD
#%Module1.0
## Fake CUDA $v for the Kakehashi test cluster (no real toolkit behind it).
module-whatis "CUDA toolkit $v (test stub)"
conflict cuda
setenv       CUDA_HOME    $OPT_DIR/sw/cuda-$v
setenv       CUDA_VERSION $v
prepend-path PATH         $OPT_DIR/sw/cuda-$v/bin
MOD
    done
    cat >"$d/cuda/.version" <<'MOD'
#%Module1.0
set ModulesVersion "12.4"
MOD
    cat >"$d/python/3.11" <<MOD
#%Module1.0
## Points at the system python3 (3.11 on Debian 12).
module-whatis "Python 3.11 (system python3)"
conflict python
setenv PYTHON_VERSION 3.11
setenv KK_PYTHON /usr/bin/python3
MOD
    mkdir -p "$d/jupyterlab"
    cat >"$d/jupyterlab/4.6" <<MOD
#%Module1.0
## JupyterLab 4.6 and jupyterhub-singleuser 6.1 (interactive sessions).
module-whatis "JupyterLab 4.6 for interactive sessions"
conflict jupyterlab
prepend-path PATH $OPT_DIR/jupyterenv/bin
MOD
    mkdir -p "$d/pytorch"
    cat >"$d/pytorch/2.13" <<MOD
#%Module1.0
## PyTorch 2.13 (CPU build on the test cluster), papermill and ipykernel in one virtualenv.
module-whatis "PyTorch 2.13 with papermill"
conflict pytorch
prepend-path PATH $OPT_DIR/pyenv/bin
setenv KAKEHASHI_TORCH_ENV $OPT_DIR/pyenv
MOD
    local ompi_version
    ompi_version=$(dpkg-query -W -f='${Version}' openmpi-bin 2>/dev/null | sed -E 's/-.*//')
    cat >"$d/openmpi/4.1" <<MOD
#%Module1.0
## Debian's Open MPI (mpirun, mpiexec in /usr/bin; Slurm and Grid Engine support built in).
module-whatis "Open MPI ${ompi_version:-4.1}"
conflict openmpi
setenv MPI_HOME /usr/lib/x86_64-linux-gnu/openmpi
setenv OMPI_VERSION ${ompi_version:-4.1}
MOD
    local mp=/etc/environment-modules/modulespath
    [[ -f $mp ]] || die "$mp missing: environment-modules not installed?"
    grep -qxF "$d" "$mp" || echo "$d" >>"$mp"
    [[ -r /etc/profile.d/modules.sh ]] || die "/etc/profile.d/modules.sh missing after install"
}

install_fake_gpus() {
    # Slurm 22.05 drops GPUs that have no File= ("Removing file-less GPU") and drains the node.
    mkdir -p "$GPU_DEV_DIR"
    local i
    for i in 0 1 2 3 4 5 6 7; do
        ln -sfn /dev/null "$GPU_DEV_DIR/nvidia$i"
    done
}

install_slurm_hooks() {
    mkdir -p "$OPT_DIR/slurm"
    # Torque gives every job a $PBS_NODEFILE; Slurm's spank_pbs does not. For jobs submitted from the
    # PBS login node (their PATH starts with the Torque wrappers) write one, one line per allocated CPU.
    cat >"$OPT_DIR/slurm/task_prolog.sh" <<'HOOK'
#!/bin/bash
# Slurm TaskProlog (runs as the job user; "export X=Y" lines on stdout enter the task's environment).
case ${PATH:-} in @TORQUE_BIN@:*) ;; *) exit 0 ;; esac
[[ -n ${SLURM_JOB_ID:-} && -n ${SLURM_JOB_NODELIST:-} ]] || exit 0
f=/tmp/kakehashi-pbs-nodefile.$SLURM_JOB_ID
if [[ ! -s $f ]]; then
    mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    # SLURM_JOB_CPUS_PER_NODE looks like "2(x2),1": CPUs per node, run-length encoded.
    counts=()
    IFS=, read -ra parts <<<"${SLURM_JOB_CPUS_PER_NODE:-1}"
    for p in "${parts[@]}"; do
        if [[ $p =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
            for ((i = 0; i < BASH_REMATCH[2]; i++)); do counts+=("${BASH_REMATCH[1]}"); done
        else
            counts+=("$p")
        fi
    done
    tmp=$(mktemp "$f.XXXXXX")
    for i in "${!hosts[@]}"; do
        for ((c = 0; c < ${counts[i]:-1}; c++)); do echo "${hosts[i]}"; done
    done >"$tmp"
    mv -f "$tmp" "$f"
fi
echo "export PBS_NODEFILE=$f"
HOOK
    sed -i "s|@TORQUE_BIN@|$TORQUE_BIN|" "$OPT_DIR/slurm/task_prolog.sh"
    cat >"$OPT_DIR/slurm/epilog.sh" <<'HOOK'
#!/bin/bash
# Slurm Epilog (root, on each node at job end): drop the PBS_NODEFILE written by task_prolog.sh.
rm -f "/tmp/kakehashi-pbs-nodefile.${SLURM_JOB_ID:-none}"
exit 0
HOOK
    chmod 755 "$OPT_DIR/slurm/task_prolog.sh" "$OPT_DIR/slurm/epilog.sh"
}

install_job_python() {
    # The compute nodes' Python for ML jobs: PyTorch (CPU build here: no GPUs), papermill for notebook jobs.
    # Debian's python3 so every user can run it (root's pyenv is not readable by alice and bob).
    local env=$OPT_DIR/pyenv marker=$OPT_DIR/pyenv/.kakehashi-$JOB_PYTHON_STAMP
    [[ -f $marker ]] && return 0
    log "creating the job Python environment in $env (torch, papermill)"
    rm -rf "$env"
    /usr/bin/python3 -m venv "$env"
    # torch==2.13.0 is on this machine kind's disk (CPU build); elsewhere pip fetches it from PyPI.
    "$env/bin/pip" install -q --disable-pip-version-check "${JOB_PYTHON_PACKAGES[@]}" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    "$env/bin/python" -c "import torch, papermill, ipykernel" || die "job Python environment is broken"
    chmod -R a+rX "$env"
    touch "$marker"
}

install_session_python() {
    # What an interactive session runs on a compute node (portal/sessions): jupyterhub-singleuser and JupyterLab,
    # behind the module jupyterlab/4.6. Lab's news and update pop-ups off, as a site would set them.
    local env=$OPT_DIR/jupyterenv marker=$OPT_DIR/jupyterenv/.kakehashi-$SESSION_PYTHON_STAMP
    [[ -f $marker ]] && return 0
    log "creating the session Python environment in $env (jupyterhub-singleuser, JupyterLab)"
    rm -rf "$env"
    /usr/bin/python3 -m venv "$env"
    "$env/bin/pip" install -q --disable-pip-version-check "${SESSION_PYTHON_PACKAGES[@]}" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    # The repository's Lab extension, as a site installs it beside JupyterLab: its status bar shows a session's
    # time left, cost so far and budget left (bump SESSION_PYTHON_STAMP when the extension changes).
    "$env/bin/pip" install -q --disable-pip-version-check "$HERE/../../jupyterhub/kakehashi-lab" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    "$env/bin/jupyterhub-singleuser" --version >/dev/null || die "session Python environment is broken"
    mkdir -p "$env/share/jupyter/lab/settings"
    printf '%s\n' '{"@jupyterlab/apputils-extension:notification": {"checkForUpdates": false, "fetchNews": "false"}}' \
        >"$env/share/jupyter/lab/settings/overrides.json"
    chmod -R a+rX "$env"
    touch "$marker"
}

install_slow_sbatch() {
    mkdir -p "$SLOW_BIN"
    cat >"$SLOW_BIN/sbatch" <<'WRAP'
#!/bin/bash
# Test cluster only (login port 2226): submit at once, answer late. A worker killed while waiting leaves a
# job on the scheduler whose id it never recorded: the portal must find it instead of submitting it again.
out=$(/usr/bin/sbatch "$@")
rc=$?
sleep 6
printf '%s\n' "$out"
exit $rc
WRAP
    chmod 755 "$SLOW_BIN/sbatch"
}

install_apptainer() {
    # The stand-in itself, on every node's PATH (/usr/local/bin, where a site's own build would go).
    mkdir -p "$APPTAINER_DIR/bin" "$IMAGES_DIR"
    sed -e "s|@APPTAINER_DIR@|$APPTAINER_DIR|" -e "s|@IMAGES_DIR@|$IMAGES_DIR|" "$HERE/apptainer" \
        >"$APPTAINER_DIR/bin/apptainer.new"
    chmod 755 "$APPTAINER_DIR/bin/apptainer.new"
    mv -f "$APPTAINER_DIR/bin/apptainer.new" "$APPTAINER_DIR/bin/apptainer"
    ln -sfn "$APPTAINER_DIR/bin/apptainer" /usr/local/bin/apptainer
    cat >"$APPTAINER_DIR/images.conf" <<CONF
# docker:// reference -> sandbox image in $IMAGES_DIR (built offline by tests/cluster/images.sh: no registry)
$CONTAINER_IMAGE_REF $CONTAINER_IMAGE
CONF
    local stamp=$IMAGES_DIR/.kakehashi-$IMAGES_STAMP-$JOB_PYTHON_STAMP
    [[ -f $stamp && -d $IMAGES_DIR/$CONTAINER_IMAGE ]] && return 0
    log "building the container image $CONTAINER_IMAGE (a sandbox directory, offline)"
    build_image "$CONTAINER_IMAGE" "$CONTAINER_IMAGE_REF"
    # Apptainer takes a directory as a sandbox image whatever its name: a ".sif path" that works here.
    ln -sfn "$CONTAINER_IMAGE" "$IMAGES_DIR/$CONTAINER_IMAGE.sif"
    rm -f "$IMAGES_DIR"/.kakehashi-*
    touch "$stamp"
}

install_packages
install_slow_sbatch
install_job_python
install_session_python
install_apptainer
install_slurm_hooks
install_torque_wrappers
install_site_qsub
install_modulefiles
install_fake_gpus
log "install: ok"
