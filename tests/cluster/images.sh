# Container images for the apptainer stand-in: sandbox directories built offline from this machine's own
# Debian packages and the job Python environment. Sourced by install.sh, not run.
# shellcheck shell=bash
#
# An image is a directory holding a small Debian 12 root file system (the files of a few packages and what
# they depend on, hard-linked from the host, so it costs no disk space), the job Python environment (PyTorch,
# papermill, ipykernel) at the same path as on the nodes, Apptainer's metadata (/.singularity.d/env sets PATH),
# and a marker, /etc/kakehashi-image, naming the image: a job can tell from the inside that it runs in it.

# Packages whose files (with their dependencies) make the root file system: a shell, the usual tools, Python.
IMAGE_BASE_PACKAGES=(base-files bash dash coreutils grep sed mawk findutils hostname procps util-linux
                     python3 python3-minimal libstdc++6 libgcc-s1 tzdata)

# image_packages PKG...: the packages and everything they depend on (first installed alternative of each
# "a | b"), among the installed ones.
image_packages() {
    dpkg-query -W -f='${Package}\t${Status}\t${Pre-Depends}, ${Depends}\n' |
        awk -F'\t' -v want="$*" '
            $2 ~ / installed$/ { deps[$1] = $3; installed[$1] = 1 }
            END {
                n = split(want, queue, " ")
                for (i = 1; i <= n; i++) seen[queue[i]] = 1
                for (i = 1; i <= n; i++) {
                    p = queue[i]
                    if (!(p in installed)) { print "image: package " p " is not installed" > "/dev/stderr"; exit 1 }
                    m = split(deps[p], groups, ",")
                    for (j = 1; j <= m; j++) {
                        k = split(groups[j], alts, "|")
                        for (a = 1; a <= k; a++) {
                            d = alts[a]; sub(/\(.*/, "", d); gsub(/[ \t]/, "", d); sub(/:.*/, "", d)
                            if (d == "" ) continue
                            if (d in installed) { if (!(d in seen)) { seen[d] = 1; queue[++n] = d }; break }
                        }
                    }
                }
                for (p in seen) print p
            }' | sort
}

# build_image NAME REFERENCE: (re)build $IMAGES_DIR/NAME, the sandbox image that REFERENCE (docker://...) names.
build_image() {
    local name=$1 ref=$2 root=$IMAGES_DIR/$1.new
    rm -rf "$root"
    mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,opt,proc,sys,dev,tmp,var/tmp,home,run,root}
    # Debian 12 is merged-/usr: /bin, /lib... are links into /usr, and packages list files under either.
    local d
    for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
    chmod 1777 "$root/tmp" "$root/var/tmp"

    local packages
    packages=$(image_packages "${IMAGE_BASE_PACKAGES[@]}") || die "cannot list the packages of image $name"
    # Every regular file and symlink the packages own, by its /usr path, hard-linked (same file system).
    # shellcheck disable=SC2086
    dpkg -L $packages 2>/dev/null |
        sed -E 's#^/(bin|sbin|lib|lib64)/#/usr/\1/#' | sort -u |
        while IFS= read -r f; do
            [[ -L $f || -f $f ]] && printf '%s\0' "$f"
        done |
        xargs -0 -r cp -P -l --parents --no-clobber -t "$root" 2>/dev/null || true
    # Alternatives (awk -> mawk, ...) are links made by maintainer scripts, not listed by dpkg.
    mkdir -p "$root/etc/alternatives"
    local link target
    for link in /etc/alternatives/*; do
        target=$(readlink "$link") || continue
        [[ -e $root$target && ! -e $root$link && ! -L $root$link ]] && cp -P "$link" "$root$link"
    done
    for link in /usr/bin/* /usr/sbin/*; do
        [[ -L $link && ! -e $root$link && $(readlink "$link") == /etc/alternatives/* ]] || continue
        [[ -L $root$(readlink "$link") ]] && cp -P "$link" "$root$link"
    done

    # The host may point awk at gawk, which the image does not have: Debian's required awk is mawk.
    [[ -e $root/usr/bin/awk ]] || ln -s mawk "$root/usr/bin/awk"

    # The job Python environment at the path its scripts name (venvs are not relocatable).
    mkdir -p "$root$OPT_DIR"
    cp -al "$OPT_DIR/pyenv" "$root$OPT_DIR/pyenv"

    # /etc: what apptainer binds from the host must exist as files in the image (bind targets).
    printf 'root:x:0:0:root:/root:/bin/bash\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    : >"$root/etc/hosts"; : >"$root/etc/resolv.conf"; : >"$root/etc/localtime"
    mkdir -p "$root/etc/ld.so.conf.d"
    local f
    for f in /etc/ld.so.conf /etc/ld.so.conf.d/*; do
        [[ -f $f && ! -e $root$f ]] && cp "$f" "$root$f"
    done
    ldconfig -r "$root" 2>/dev/null || die "ldconfig failed for image $name"
    printf '%s\n' "$ref" >"$root/etc/kakehashi-image"

    # Apptainer's metadata: the environment scripts its action scripts source before the command runs.
    mkdir -p "$root/.singularity.d/env" "$root/.singularity.d/libs"
    cat >"$root/.singularity.d/env/10-docker2singularity.sh" <<EOF
#!/bin/sh
export PATH="$OPT_DIR/pyenv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EOF
    cat >"$root/.singularity.d/labels.json" <<EOF
{
  "org.label-schema.usage": "Kakehashi test-cluster stand-in for $ref: Debian 12 with PyTorch (CPU), papermill, ipykernel",
  "org.label-schema.schema-version": "1.0"
}
EOF
    # Directories only: the files are the host's own (hard links), already readable, and stay as they are.
    find "$root" -type d -exec chmod a+rx {} +
    [[ -x $root$OPT_DIR/pyenv/bin/python && -x $root/usr/bin/bash && -x $root/usr/bin/sh ]] ||
        die "image $name is incomplete"
    rm -rf "${IMAGES_DIR:?}/$name"
    mv "$root" "$IMAGES_DIR/$name"
}
