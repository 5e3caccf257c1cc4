#!/bin/bash
# enter.sh RELEASE CMD... — run CMD (as root, in this repository) inside the cached root filesystem of
# Slurm RELEASE (tests/slurm-releases/rootfs.sh builds it), in namespaces of its own:
#   - mount: /proc, /dev, /sys (recursively: slurmd >= 24.11 needs the cgroup2 mount), a fresh /run,
#     this repository at the same path, and the host's ~/.cargo and ~/.rustup (its Rust toolchain);
#   - network: loopback and a veth pair that leads nowhere, so its test cluster's ports (6817-6819,
#     MariaDB) never meet the host's or another release's, and nothing reaches out (cargo runs offline
#     from the host's crate cache). The veth's address is there because slurmdbd >= 24.11 resolves
#     its listening address with AI_ADDRCONFIG, which finds nothing where loopback is all there is;
#   - PID: when CMD ends, every daemon it left behind ends with it;
#   - cgroup: a cgroup2 hierarchy of its own (a cgroup namespace rooted at a fresh cgroup, mounted at
#     /sys/fs/cgroup), so its slurmd runs Slurm's cgroup/v2 plugin with proctrack/cgroup as sites do,
#     job cgroups named as that release names them. This machine's kernel also has cgroup v1
#     hierarchies, which slurmd must not see: it runs with cgroup-v2-only.so preloaded (see there).
#     Where no cgroup2 can be mounted, the cluster falls back to proctrack/linuxproc and says so.
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
  enter=(unshare --mount --net --pid --fork --propagation private -- bash "$HERE/enter.sh" --inside "$release" "$root")
  # The cgroup this run's namespace is rooted at, in a cgroup2 mount of the host's made for the
  # purpose; removed (with what Slurm made in it) when CMD ends, as is any a killed run left.
  hierarchy=$(mktemp -d /tmp/gputokens-cgroup2.XXXXXX)
  remove_cgroups() { find "$1" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true; }
  shim=$REPO/target/slurm-$release/cgroup-v2-only.so
  if mount -t cgroup2 cgroup2 "$hierarchy" 2>/dev/null \
     && mkdir -p "${shim%/*}" && gcc -shared -fPIC -O2 -o "$shim" "$HERE/cgroup-v2-only.c" -ldl; then
    for stale in "$hierarchy"/gputokens-"$release"-*; do
      # (a run still going has processes somewhere below its cgroup)
      if [[ -d $stale && -z $(find "$stale" -name cgroup.procs -exec cat {} + 2>/dev/null) ]]; then
        remove_cgroups "$stale"; rmdir "$stale" 2>/dev/null || true
      fi
    done
    cgroup=$hierarchy/gputokens-$release-$$
    mkdir "$cgroup"
    # Also when this script is stopped (the next run removes a cgroup whose processes were still ending).
    cleanup() {
      remove_cgroups "$cgroup"; rmdir "$cgroup" 2>/dev/null || say "cgroup $cgroup still has processes; left in place"
      umount "$hierarchy"; rmdir "$hierarchy"
    }
    trap cleanup EXIT
    trap 'exit 143' TERM INT HUP
    # shellcheck disable=SC2016
    bash -c 'echo $$ > "$1/cgroup.procs" && exec "${@:2}"' _ "$cgroup" \
      unshare --cgroup -- env GPUTOKENS_CGROUP=v2 GPUTOKENS_CGROUP_SHIM="$shim" "${enter[@]}" "$@"
    exit
  fi
  umount "$hierarchy" 2>/dev/null || true; rmdir "$hierarchy"
  say "no cgroup2 hierarchy could be made here: the cluster runs without cgroups (proctrack/linuxproc)"
  exec "${enter[@]}" "$@"
fi

# ---- inside the new namespaces, still on the host's filesystem ----
release=$2 root=$3; shift 3
# The root filesystem a mount of its own, so that / is a mount point after the chroot (the multi-node
# cluster's hosts make their mounts slaves of it: `mount --make-rslave /`).
mount --bind "$root" "$root"
ip link set lo up
ip link add gputokens0 type veth peer name gputokens1
ip addr add 10.254.254.1/24 dev gputokens0
ip link set gputokens0 up
ip link set gputokens1 up
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
if [[ ${GPUTOKENS_CGROUP:-} == v2 ]]; then
  # This namespace's cgroup2 in place of the host's v1 mounts; this shell (and so the test cluster's
  # daemons, until Slurm moves them) in a leaf of it, as cgroup v2 wants processes only in leaves.
  mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
  mkdir -p "$root/sys/fs/cgroup/init.scope"
  echo $$ > "$root/sys/fs/cgroup/init.scope/cgroup.procs"
fi
mount -t tmpfs -o mode=755 tmpfs "$root/run"
bind() { mkdir -p "$root$2"; mount --bind "$1" "$root$2"; }
bind "$REPO" "$REPO"
# A build tree kept outside the checkout (.ci/run links target/ to its cache): at its own path too.
target=$(realpath -m "$REPO/target")
if [[ -d $target && $target != "$REPO"/* ]]; then bind "$target" "$target"; fi
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
