#!/bin/bash
# install.sh — install the Debian 12 packages the gputokens tests need (run as root). Idempotent:
# a fast no-op when they are all installed. Daemons are not started by the packages (policy-rc.d),
# tests/cluster/up.sh starts them. `install.sh --list` prints the packages (the Slurm release root
# filesystems of tests/slurm-releases/ are built with them).
set -euo pipefail

PKGS=(slurmctld slurmd slurm-client munge libmunge-dev libslurm-dev slurm-wlm-basic-plugins-dev
      mariadb-server slurmdbd libclang-dev sqlite3 clang prometheus curl
      libc6-dev   # libc.a: sbalance is linked statically
      man-db bash-completion   # the installed packages' man pages and completions (crates/accountd/tests/packages/)
      iproute2                 # ip: tests/slurm-releases/enter.sh sets up the other releases' network
      tcpdump openssl          # what crosses the multi-node lab's bridge; the TLS tests' certificates
      libfaketime)             # a pool made before the 1st (crates/accountd/tests/cluster/accounts.rs): accountd serve's clock set back
if [[ ${1:-} == --list ]]; then printf '%s\n' "${PKGS[@]}"; exit 0; fi
# The status page's browser tests (crates/accountd/tests/browser/) run on the host's release only:
# the other releases' root filesystems (built from --list) stay without a browser.
# So do the RPM tests (crates/accountd/tests/rpms/): rpmbuild and rpmlint.
# So does setfacl (acl): file_trust's unit test of access control lists (crates/gputokens).
if [[ -z ${GPUTOKENS_SLURM_RELEASE:-} || ${GPUTOKENS_SLURM_RELEASE} == 22.05 ]]; then
  PKGS+=(chromium chromium-driver rpm rpmlint acl)
fi

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  # Installed, or installed with its triggers still to run (man-db's, while another apt-get runs
  # beside this one: .ci/run builds the release root filesystems as the host's tests start).
  [[ $st == installed || $st == triggers-pending || $st == triggers-awaited ]] || missing+=("$p")
done
if (( ${#missing[@]} == 0 )); then
  echo "install.sh: all ${#PKGS[@]} packages present"
  exit 0
fi

[[ $(id -u) == 0 ]] || { echo "install.sh: must run as root to install: ${missing[*]}" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
echo "install.sh: installing ${missing[*]}"

# Keep the packages from starting their daemons (on hosts with systemd they otherwise would).
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

# Another apt-get may hold dpkg's lock for a while (the root filesystems' debootstrap install):
# wait for it rather than fail. The lock of the package lists (apt-get update) has no such wait:
# the project's scripts that install take turns on a lock of their own first.
exec 9>/tmp/gputokens-apt.lock
flock -w 1200 9 || echo "install.sh: another install still runs after 20 minutes; going on" >&2
apt_get() { apt-get -o DPkg::Lock::Timeout=900 "$@"; }
updated=0
# apt_get update once: when no package lists exist yet, or when a package has no install candidate
if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
  apt_get update -q; updated=1
else
  for p in "${missing[@]}"; do
    if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]'; then
      apt_get update -q; updated=1; break
    fi
  done
fi
if ! apt_get install -y -q "${missing[@]}"; then
  (( updated )) && exit 1
  apt_get update -q                                  # stale lists (404): refresh once and retry
  apt_get install -y -q "${missing[@]}"
fi
echo "install.sh: done"
