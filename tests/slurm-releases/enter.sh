#!/bin/bash
# enter.sh RELEASE CMD... — run CMD (as root, in this repository) inside the cached root filesystem of
# Slurm RELEASE (tests/slurm-releases/rootfs.sh builds it), in namespaces of its own:
#   - mount: /proc, /dev, /sys (recursively: slurmd >= 24.11 needs the cgroup2 mount), a fresh /run,
#     this repository at the same path, and the host's ~/.cargo and ~/.rustup (its Rust toolchain);
#   - network: loopback and a veth pair that leads nowhere, so its test cluster's ports (6817-6819,
#     MariaDB) never meet the host's or another release's, and nothing reaches out (cargo runs offline
#     from the host's crate cache). The veth's address is there because slurmdbd >= 24.11 resolves
#     its listening address with AI_ADDRCONFIG, which finds nothing where loopback is all there is;
#   - PID: when CMD ends, every daemon it left behind ends with it.
# Builds go to target/slurm-RELEASE (never mixed with the host's target/). Environment: only PATH,
# HOME, TERM, CI, CARGO_TERM_COLOR, RUST_BACKTRACE and GPUTOKENS_* pass in.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"
REPO=$(cd "$HERE/../.." && pwd)

if [[ ${1:-} != --inside ]]; then
  release=${1:?usage: enter.sh RELEASE CMD...}; shift
  (( $# )) || set -- bash
  root=$(rootfs_of "$release") || die "no root filesystem for Slurm $release (known: ${RELEASES#"$HOST_RELEASE "})"
  [[ -f $root/.gputokens-rootfs ]] || die "$root is not built: run tests/slurm-releases/rootfs.sh $release"
  [[ $(id -u) == 0 ]] || die "must run as root"
  exec unshare --mount --net --pid --fork --propagation private -- bash "$HERE/enter.sh" --inside "$release" "$root" "$@"
fi

# ---- inside the new namespaces, still on the host's filesystem ----
release=$2 root=$3; shift 3
ip link set lo up
ip link add gputokens0 type veth peer name gputokens1
ip addr add 10.254.254.1/24 dev gputokens0
ip link set gputokens0 up
ip link set gputokens1 up
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
bind() { mkdir -p "$root$2"; mount --bind "$1" "$root$2"; }
bind "$REPO" "$REPO"
bind "$HOME/.cargo" /root/.cargo
bind "$HOME/.rustup" /root/.rustup

env=(PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
     TERM="${TERM:-dumb}" CARGO_NET_OFFLINE=true CARGO_TARGET_DIR="$REPO/target/slurm-$release"
     GPUTOKENS_SLURM_RELEASE="$release")
while IFS='=' read -r name _; do
  case $name in CI|CARGO_TERM_COLOR|RUST_BACKTRACE|GPUTOKENS_*) env+=("$name=${!name}") ;; esac
done < <(env)
# shellcheck disable=SC2016
exec chroot "$root" /usr/bin/env -i "${env[@]}" bash -c 'cd "$0" && exec "$@"' "$REPO" "$@"
