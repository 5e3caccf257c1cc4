# lib.sh — the Slurm releases the tests run against, and where their root filesystems live
# (sourced by rootfs.sh and enter.sh, never executed).
# shellcheck shell=bash

# The host's own Slurm (Debian 12) needs no root filesystem; the others come from Debian's registry.
HOST_RELEASE=22.05
# suite_of RELEASE: the Debian suite that ships that Slurm release.
suite_of() {
  case $1 in
    24.11) echo trixie ;;          # Debian 13: Slurm 24.11.5
    26.05) echo sid ;;             # Debian unstable: Slurm 26.05.5
    *) return 1 ;;
  esac
}
RELEASES="$HOST_RELEASE 24.11 26.05"

# Cached outside the repo (a clone never carries them); reused by every run until the package list
# changes.
ROOTFS_CACHE=${GPUTOKENS_ROOTFS_CACHE:-/var/cache/gputokens/rootfs}
rootfs_of() { echo "$ROOTFS_CACHE/$(suite_of "$1")"; }

die() { echo "${0##*/}: ERROR: $*" >&2; exit 1; }
say() { echo "${0##*/}: $*" >&2; }
