#!/bin/bash
# authorize.sh USER "PUBLIC KEY LINE": let USER log in to every test login node with that key.
# Idempotent: a key already present (same type and blob) is not added again.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

(($# == 2)) || die "usage: $0 USER 'ssh-ed25519 AAAA... comment'"
user=$1 key=$2
[[ $EUID -eq 0 ]] || die "run as root"
getent passwd "$user" >/dev/null || die "no such user: $user"
[[ $key != *$'\n'* ]] || die "one key line only"
# Reject anything ssh itself would not accept rather than corrupt authorized_keys.
ssh-keygen -l -f - <<<"$key" >/dev/null 2>&1 || die "not a valid public key line"

home=$(getent passwd "$user" | cut -d: -f6)
group=$(id -gn "$user")
# StrictModes: home and ~/.ssh must not be writable by others, or sshd ignores the keys.
chmod go-w "$home"
install -d -m 700 -o "$user" -g "$group" "$home/.ssh"
ak=$home/.ssh/authorized_keys
[[ -f $ak ]] || install -m 600 -o "$user" -g "$group" /dev/null "$ak"

read -r ktype kblob _ <<<"$key"
if awk -v t="$ktype" -v b="$kblob" '$1 == t && $2 == b {found = 1} END {exit !found}' "$ak"; then
    echo "already authorized for $user"
else
    # A file that does not end in a newline would glue the new key onto its last line.
    [[ ! -s $ak || $(tail -c1 "$ak" | od -An -c | tr -d ' ') == '\n' ]] || echo >>"$ak"
    printf '%s\n' "$key" >>"$ak"
    echo "authorized for $user"
fi
chown "$user:$group" "$ak"
chmod 600 "$ak"
