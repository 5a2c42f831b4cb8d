#!/usr/bin/env bash
# Debian packages the test suite needs beyond the test cluster's own (which tests/cluster/install.sh installs).
set -euo pipefail
packages=()
need() { dpkg -s "$1" >/dev/null 2>&1 || packages+=("$1"); }
for p in "$@"; do need "$p"; done
if [ ${#packages[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get -o DPkg::Lock::Timeout=900 -y --no-install-recommends install "${packages[@]}"; }
  apt_install || { apt-get -o DPkg::Lock::Timeout=900 update && apt_install; }
fi
