#!/bin/bash
# Runs every test: unit tests, integration tests of the real binaries as root and as the non-root
# users alice and bob, and the tests against a real one-node Slurm cluster (started and stopped here).
# Run as root on Debian 12: `bash tests/run.sh`. `bash tests/run.sh up` only builds and starts the
# cluster configured as the tests expect (then run single tests with cargo test; stop it with
# tests/cluster/down.sh).
#
# `bash tests/run.sh --slurm RELEASE [up]` does the same against another Slurm release (24.11, 26.05):
# inside that release's Debian root filesystem (built once, cached outside the repo), in namespaces of
# its own (tests/slurm-releases/). `--slurm 22.05` is the host's own Slurm, the default.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LAB=${GPUTOKENS_LAB:-/tmp/gputokens-cluster}
TARGET=${CARGO_TARGET_DIR:-target}

if [[ ${1:-} == --slurm ]]; then
  source tests/slurm-releases/lib.sh
  release=${2:?--slurm needs a release: $RELEASES}
  shift 2
  if [[ $release != "$HOST_RELEASE" ]]; then
    bash tests/cluster/install.sh                     # the host's toolchain builds there: its headers too
    bash tests/slurm-releases/rootfs.sh "$release"
    cargo fetch --locked                              # the root filesystem has no network: the host's crate cache
    exec bash tests/slurm-releases/enter.sh "$release" bash tests/run.sh "$@"
  fi
  installed=$(dpkg-query -W -f '${Version}' slurmctld 2>/dev/null || true)
  [[ -z $installed || $installed == "$release".* ]] || { echo "tests/run.sh: this host has Slurm $installed, not $release" >&2; exit 1; }
fi

bash tests/cluster/install.sh
source tests/slurm-releases/lib.sh
installed=$(dpkg-query -W -f '${Version}' slurmctld 2>/dev/null || true)
# The RPMs for RHEL-family sites, built from a source tarball against this host's Slurm headers
# (--nodeps: Debian has no Slurm RPM) on the host's release only (its rpm and rpmlint; the other
# releases' root filesystems have neither), for crates/accountd/tests/it/rpms.rs (in a target
# directory of their own: target/rpm/target).
if [[ $installed == "$HOST_RELEASE".* ]]; then
  built_rpms=$(bash packaging/build-rpms.sh --profile debug --nodeps)
  GPUTOKENS_RPMS=$(dirname "$(head -n 1 <<<"$built_rpms")")
  export GPUTOKENS_RPMS
fi
cargo build --workspace --locked
# sbalance as the README installs it, linked statically; the tests run it as the users do.
HOST=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked -p accountd --bin sbalance --target "$HOST"
export GPUTOKENS_SBALANCE=$(realpath "$TARGET")/$HOST/debug/sbalance

started=""
stop_cluster() {
  bash tests/cluster/down.sh
  # Every daemon up.sh started must be gone (a zombie waiting for its reaper counts as gone).
  local left=""
  for pid in $started; do
    local state
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    [[ -n $state && $state != Z ]] && left+=" $pid($(tr '\0' ' ' < "/proc/$pid/cmdline"))"
  done
  if [[ -n $left ]]; then echo "down.sh left processes running:$left" >&2; return 1; fi
  echo "down.sh stopped every daemon up.sh started"
}
trap 'stop_cluster || true' EXIT

# The job_submit plugin runs inside the test cluster's slurmctld and reads /etc/slurm/gputokens.toml
# once at start: point it at the snapshot the admission tests write (crates/accountd/tests/it/admission.rs). While
# there is none, on_error = "accept" lets every job through, so the other cluster tests are unaffected.
install -d -m 755 "$LAB/snapshot"
# spank_gputokens.so (sbatch/srun) reads the same file for accountd's socket: the SPANK tests
# (crates/accountd/tests/it/spank.rs) link that path to the socket of an accountd they start; while there is none,
# sbatch shows one "balance unknown" line. Each job's prolog records its GPUs under gpu-jobs/, named
# by UUID through fake-nvml's library in crates/fake-nvml/ (without its state file beside it, which the tests
# write, it answers "driver not loaded" and records carry no UUIDs).
printf '# Written by tests/run.sh for the test cluster: read by job_submit_gputokens.so in slurmctld\n# and spank_gputokens.so in sbatch/srun.\n[paths]\nsnapshot = "%s"\nsocket = "%s"\n' \
  "$LAB/snapshot/balances.snapshot" "$LAB/snapshot/accountd.sock" > /etc/slurm/gputokens.toml
# ===== gputokens packages: the tests run the installed files, not the build tree ==================
# The .debs of the debug build above (no release build: CI time), installed as an admin would;
# --force-confold keeps the test config written above (/etc/slurm/gputokens.toml), --force-confmiss
# restores a plugstack file up.sh removed in its other mode. up.sh loads the packaged plugins and
# writes SPANK_PLUGIN_ARGS into their plugstack file; the tests run /usr/bin/accountd and sbalance.
built_debs=$(bash packaging/build-debs.sh --profile debug)
mapfile -t debs <<<"$built_debs"
dpkg -i --force-confold --force-confmiss "${debs[@]}"
export GPUTOKENS_PLUGINS=installed GPUTOKENS_INSTALLED_BIN_DIR=/usr/bin
# ===== end gputokens packages =======================================================================
install -D -m 755 "$TARGET/debug/libnvidia_ml.so" "$LAB/fake-nvml/libnvidia-ml.so.1"
export SPANK_PLUGIN_ARGS="jobs_dir=$LAB/gpu-jobs nvml_library=$LAB/fake-nvml/libnvidia-ml.so.1"

bash tests/cluster/up.sh
if [[ ${1:-} == up ]]; then trap - EXIT; exit 0; fi
started=$(cat "$LAB"/pids/*.pid 2>/dev/null | tr '\n' ' ')
rc=0
cargo test --workspace --locked --no-fail-fast -- --include-ignored --skip multinode_ || rc=$?

# The multi-node cluster's tests (tests/multinode/: two controllers, three nodes in namespaces, each
# test its own cluster), on the host's Slurm only, where the namespaces are the machine's own:
# GPUTOKENS_MULTINODE=1 runs them on another release too, 0 never.
multinode=${GPUTOKENS_MULTINODE:-auto}
if [[ $multinode == 1 || ( $multinode == auto && $installed == "$HOST_RELEASE".* ) ]]; then
  GPUTOKENS_MN_FAKE_NVML=$(realpath "$TARGET")/debug/libnvidia_ml.so \
    cargo test -p accountd --test multinode --locked --no-fail-fast -- --include-ignored --test-threads=1 || rc=$?
  bash tests/multinode/down.sh || true
fi
trap - EXIT
stop_cluster
exit "$rc"
