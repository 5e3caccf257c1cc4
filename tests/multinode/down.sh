#!/bin/bash
# down.sh — stop the multi-node test cluster: every host's processes die with its PID namespace, then
# the network namespaces go. Leaves $MN (logs) for reading; up.sh starts anew. Idempotent.
#   down.sh [--all]    --all: the site's MariaDB as well
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"
[[ $(id -u) == 0 ]] || die "must run as root"

for h in "${HOSTS[@]}"; do
  f=$MN/hosts/$h/unshare.pid
  [[ -s $f ]] && kill -9 "$(cat "$f")" 2>/dev/null || true
  rm -f "$f"
done
gone() { for h in "${HOSTS[@]}"; do ! host_up "$h" || return 1; done; }
waitfor 10 gone || die "hosts still up after SIGKILL"
for h in "${HOSTS[@]}"; do
  rm -f "$MN/hosts/$h/init.pid"
  ip netns del "$(netns "$h")" 2>/dev/null || true
done
ip netns del "$SWITCH" 2>/dev/null || true
# --all: the site's MariaDB too (each up.sh keeps it running for the next test).
if [[ ${1:-} == --all ]]; then stop_mn_mariadb; fi
say "multi-node cluster down"
