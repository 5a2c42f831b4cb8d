#!/bin/bash
# add-group.sh GROUP USER...: create or extend a group on every scheduler of the test cluster:
#   unix group GROUP (users become members) and its group area $GROUP_AREA_DIR/GROUP (root:GROUP, 2770),
#   Slurm account GROUP with one association per user,
#   SGE access list GROUP_acl and SGE project GROUP whose ACL is that list.
# Idempotent. The cluster must be up (sacctmgr and qconf talk to the running daemons).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

(($# >= 1)) || die "usage: $0 GROUP [USER...]"
[[ $EUID -eq 0 ]] || die "run as root"
group=$1; shift
[[ $group =~ ^[a-z][a-z0-9_]{0,30}$ ]] || die "group name must be lower-case letters, digits, _ (got '$group')"
users=("$@")
for u in "${users[@]}"; do
    getent passwd "$u" >/dev/null || die "no such user: $u"
done

# Unix group: TSUBAME/ABCI groups are unix groups too.
getent group "$group" >/dev/null || groupadd "$group"
for u in "${users[@]}"; do
    id -nG "$u" | tr ' ' '\n' | grep -qx "$group" || usermod -aG "$group" "$u"
done
# The group's area (a TSUBAME/ABCI group disk): $GROUP_AREA_DIR/GROUP, for its members only.
ensure_group_area "$group"

# Slurm: account + user associations (AccountingStorageEnforce=associations refuses anything else).
assocs=$(sacctmgr -nP show assoc format=account,user) || die "sacctmgr failed: is the cluster up?"
if ! grep -qx "$group|" <<<"$assocs"; then
    sacctmgr -i add account "$group" Description="kakehashi test group $group" Organization=kakehashi >/dev/null
fi
for u in "${users[@]}"; do
    grep -qx "$group|$u" <<<"$assocs" && continue
    # The first account a user gets becomes the user's DefaultAccount.
    sacctmgr -i add user "$u" Account="$group" >/dev/null
done

# SGE: access list GROUP_acl, project GROUP.
# qconf -au creates the access list if needed but fails on members already in it: add only new ones.
acl_entries=$(qconf -su "${group}_acl" 2>/dev/null | awk '$1 == "entries" {print $2}' | tr ',' '\n') || true
new_members=()
for u in "${users[@]}"; do
    grep -qx "$u" <<<"$acl_entries" || new_members+=("$u")
done
if ((${#new_members[@]})); then
    out=$(IFS=,; qconf -au "${new_members[*]}" "${group}_acl" 2>&1) || die "qconf -au failed: $out"
elif ((${#users[@]} == 0)) && ! { qconf -sul 2>/dev/null || true; } | grep -qx "${group}_acl"; then
    # An empty ACL cannot be created with -au; an ACL naming no real user admits nobody but keeps the project valid.
    tmp=$(mktemp)
    printf 'name %s_acl\ntype ACL\nfshare 0\noticket 0\nentries NONE\n' "$group" >"$tmp"
    qconf -Au "$tmp" >/dev/null 2>&1 || die "qconf -Au failed"; rm -f "$tmp"
fi
# qconf -s*l exits 1 on an empty list.
if ! { qconf -sprjl 2>/dev/null || true; } | grep -qx "$group"; then
    tmp=$(mktemp)
    printf 'name %s\noticket 0\nfshare 0\nacl %s_acl\nxacl NONE\n' "$group" "$group" >"$tmp"
    out=$(qconf -Aprj "$tmp" 2>&1) || die "qconf -Aprj failed: $out"; rm -f "$tmp"
fi
echo "group $group: ${users[*]:-(no users)}"
