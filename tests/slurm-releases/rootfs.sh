#!/bin/bash
# rootfs.sh RELEASE — build (once) the Debian root filesystem that ships Slurm RELEASE (24.11: trixie,
# 26.05: sid) with every package the tests need, cached in $GPUTOKENS_ROOTFS_CACHE (default
# /var/cache/gputokens/rootfs). Run as root; needs debootstrap (installed here if missing) and the
# Debian mirror. A cached one whose package list is out of date gets the missing packages; an
# interrupted build is never taken for a finished one.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

release=${1:?usage: rootfs.sh RELEASE (24.11 or 26.05)}
suite=$(suite_of "$release") || die "no root filesystem for Slurm $release (known: ${RELEASES#"$HOST_RELEASE "})"
root=$(rootfs_of "$release")
[[ $(id -u) == 0 ]] || die "must run as root"

# What the tests need (tests/cluster/install.sh's list), and what the chroot lacks that a Debian 12
# host has: the C toolchain cargo links with, and the tools the tests call.
mapfile -t packages < <(bash "$HERE/../cluster/install.sh" --list)
packages+=(gcc libc6-dev pkg-config binutils ca-certificates procps hostname passwd util-linux perl)
list=$(printf '%s\n' "${packages[@]}" | sort -u)
stamp="$root/.gputokens-rootfs"
want="$(sha256sum <<<"$list" | cut -c1-16)"

# debootstrap writes no /etc/hosts. Without `localhost` there, slurm.conf's and slurmdbd.conf's
# localhost goes to DNS, which the test namespaces cannot reach, and slurmdbd is never reached.
# Every root filesystem gets a complete one; a cached one that lacks a line is repaired here (each
# run calls this script), keeping whatever else it holds.
complete_hosts() {
  local hosts=$1/etc/hosts name tmp
  name=$(hostname)
  has() { grep -Eq "^[[:space:]]*$1[[:space:]]+([^#]*[[:space:]])?$2([[:space:]#]|\$)" "$hosts" 2>/dev/null; }
  has '127\.0\.0\.1' localhost && has '::1' localhost && has '127\.[0-9.]+' "${name//./\\.}" && return 0
  tmp=$(mktemp "$hosts.XXXXXX")
  {
    printf '# Written by tests/slurm-releases/rootfs.sh: the test cluster names localhost and this host.\n'
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    printf 'ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n127.0.1.1\t%s\n' "$name"
    # what else was there (names up.sh added), less the lines written above
    grep -Ev '^[[:space:]]*(#|$)|(^|[[:space:]])(localhost|ip6-localhost|ip6-loopback|ip6-allnodes|ip6-allrouters)([[:space:]]|$)' \
      "$hosts" 2>/dev/null | grep -Ev "^[[:space:]]*127\.0\.1\.1[[:space:]]+$name([[:space:]]|\$)" || true
  } > "$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$hosts"
  say "$hosts: wrote localhost (IPv4 and IPv6) and $name"
}

# One build at a time per root filesystem: CI starts them early, a release's suite may ask meanwhile.
mkdir -p "$ROOTFS_CACHE"
exec 9>"$ROOTFS_CACHE/.$suite.lock"
flock 9

if [[ -f $stamp ]]; then complete_hosts "$root"; fi
[[ -f $stamp && $(<"$stamp") == "$want" ]] && exit 0

# The Debian mirror this host already uses (deb822 sources or sources.list), else the public one.
mirror() {
  local uri
  uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/\?$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  [[ -n $uri ]] || uri=$(sed -n 's/^deb[[:space:]]\+\([^[:space:]]*\/debian\)\/\?[[:space:]].*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n1)
  echo "${uri:-http://deb.debian.org/debian}"
}
# No package may start a daemon inside the chroot (up.sh starts them).
no_daemons() {
  printf '#!/bin/sh\nexit 101\n' > "$1/usr/sbin/policy-rc.d"
  chmod 755 "$1/usr/sbin/policy-rc.d"
}

if [[ -f $stamp ]]; then
  # A cached root filesystem from an older package list: add what is missing. (The registry may serve
  # a dated snapshot of a suite: sid's Release file then looks expired.)
  say "updating $root: package list changed"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  no_daemons "$root"
  # shellcheck disable=SC2086
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    timeout -k 10 1200 sh -c 'apt-get update -q -o Acquire::Check-Valid-Until=false && apt-get install -y -q "$@"' apt $list \
    || die "apt-get in $root failed or took over 20 minutes"
else
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    # In turn with tests/cluster/install.sh (its lock), which may install beside this.
    apt_get() { flock -w 600 /tmp/gputokens-apt.lock timeout -k 10 600 apt-get -o DPkg::Lock::Timeout=600 "$@"; }
    DEBIAN_FRONTEND=noninteractive apt_get install -y -q debootstrap >/dev/null \
      || { apt_get update -q && DEBIAN_FRONTEND=noninteractive apt_get install -y -q debootstrap; } \
      || die "could not install debootstrap within 10 minutes"
  }
  partial="$root.partial"
  rm -rf "$partial"
  say "building $root (Debian $suite, Slurm $release) from $(mirror); about 3 minutes"
  timeout -k 10 1800 debootstrap --variant=minbase --include="$(paste -sd, <<<"$list")" "$suite" "$partial" "$(mirror)" \
    > "$ROOTFS_CACHE/$suite.debootstrap.log" 2>&1 \
    || die "debootstrap failed or took over 30 minutes; see $ROOTFS_CACHE/$suite.debootstrap.log (tail: $(tail -n 5 "$ROOTFS_CACHE/$suite.debootstrap.log"))"
  cp /etc/resolv.conf "$partial/etc/resolv.conf"
  complete_hosts "$partial"
  no_daemons "$partial"
  rm -rf "$root"
  mv "$partial" "$root"
fi
version=$(chroot "$root" dpkg-query -W -f '${Version}' slurmctld)
[[ $version == "$release".* ]] || die "$root has Slurm $version, not $release"
echo "$want" > "$stamp"
say "$root: Debian $suite with Slurm $version"
