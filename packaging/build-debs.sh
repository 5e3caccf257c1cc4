#!/bin/bash
# build-debs.sh — build gputokens' three Debian packages with dpkg-deb (no debhelper, no cargo-deb):
#
#   gputokens                accountd and sbalance (linked statically) in /usr/bin, the example
#                            config as the conffile /etc/slurm/gputokens.toml, the systemd units, man
#                            pages, bash/zsh/fish completions, examples in /usr/share/doc/gputokens
#   gputokens-agent          the node agent for GPU nodes: /usr/bin/gputokens-agent, its systemd
#                            unit and man page; it reads the site's /etc/slurm/gputokens.toml, which
#                            the site puts on its nodes as it does slurm.conf (no NVML in accountd,
#                            no SQLite or ledger on a node)
#   gputokens-slurm-plugins  job_submit_gputokens.so and spank_gputokens.so in this machine's Slurm
#                            PluginDir and the conffile /etc/slurm/plugstack.conf.d/gputokens.conf;
#                            built for, and depending on exactly, the Slurm installed here
#
#   bash packaging/build-debs.sh [--profile debug|release] [--out DIR] [--binaries TARGET]
#
# --binaries TARGET takes accountd, sbalance and the man/completion generator from a cargo target
# directory where they are built already (its PROFILE/ and PROFILE/static/sbalance) and builds only the
# plugins here, or nothing when TARGET is the build tree itself: the test suite builds everything once
# on the host and packages it, with plugins built for each Slurm release, for each release.
#
# Run it on a machine with the Slurm the plugins are for and its headers (libslurm-dev, plus
# libmunge-dev and libclang-dev); root is not needed (dpkg-deb --root-owner-group). Builds with
# `cargo build --locked` into ${CARGO_TARGET_DIR:-target}; the packages go to DIR (default
# ${CARGO_TARGET_DIR:-target}/debian/slurm-MAJOR.MINOR/). Prints the three .deb paths on stdout,
# everything else on stderr. SLURM_PLUGIN_DIR overrides the detected PluginDir, SLURM_INCLUDE_DIR
# the headers (as for cargo build), DEBFULLNAME and DEBEMAIL the Maintainer field.
set -euo pipefail
umask 022

say() { printf 'build-debs: %s\n' "$*" >&2; }
die() { printf 'build-debs: ERROR: %s\n' "$*" >&2; exit 1; }
USAGE="usage: build-debs.sh [--profile debug|release] [--out DIR] [--binaries TARGET]"

profile=release out="" binaries=""
while (( $# )); do
  case $1 in
    --profile) (( $# >= 2 )) || die "$USAGE"; profile=$2; shift 2 ;;
    --out) (( $# >= 2 )) || die "$USAGE"; out=$2; shift 2 ;;
    --binaries) (( $# >= 2 )) || die "$USAGE"; binaries=$(realpath -m "$2"); shift 2 ;;
    -h|--help) echo "$USAGE"; exit 0 ;;
    *) die "unknown argument '$1'; $USAGE" ;;
  esac
done
case $profile in
  # A debug build's packages are for tests: compressing their debug info with xz takes a minute.
  debug) cargo_profile=() compression=(-Zgzip -z1) ;;
  release) cargo_profile=(--release) compression=(-Zxz) ;;
  *) die "--profile must be debug or release, not '$profile'" ;;
esac

# Relative paths the caller gave are the caller's: resolve them before the cd.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARGO_TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-$ROOT/target}")
export CARGO_TARGET_DIR
[[ -z $out ]] || out=$(realpath -m "$out")
cd "$ROOT"

# ---- the Slurm installed here: the plugins are built against its headers and load only into it ----
# Slurm loads a plugin only when its plugin_version equals its own exactly, and every Debian Slurm
# daemon and client package depends on exactly this package's version.
SLURM_DEB=slurm-wlm-basic-plugins
[[ $(dpkg-query -W -f '${db:Status-Status}' "$SLURM_DEB" 2>/dev/null) == installed ]] \
  || die "$SLURM_DEB is not installed: build on a machine with the Slurm the plugins are for"
slurm_deb_version=$(dpkg-query -W -f '${Version}' "$SLURM_DEB")    # e.g. 22.05.8-4+deb12u3
slurm_version=${slurm_deb_version#*:}                              # without the epoch,
slurm_version=${slurm_version%-*}                                  # and the Debian revision: 22.05.8
slurm_series=$(cut -d. -f1,2 <<<"$slurm_version")                  # 22.05
version_header=${SLURM_INCLUDE_DIR:-/usr/include}/slurm/slurm_version.h
[[ -f $version_header ]] || die "$version_header missing: install libslurm-dev"
number=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$version_header")
[[ $number =~ ^0x[0-9a-fA-F]+$ ]] || die "no SLURM_VERSION_NUMBER in $version_header"
headers_version=$(printf '%d.%02d.%d' $(( number >> 16 & 0xff )) $(( number >> 8 & 0xff )) $(( number & 0xff )))
[[ $headers_version == "$slurm_version" ]] \
  || die "the headers ($version_header) are Slurm $headers_version, but $SLURM_DEB is $slurm_deb_version"

# PluginDir: found as tests/cluster/up.sh finds it, by a plugin every Slurm has.
plugin_dir=${SLURM_PLUGIN_DIR:-}
if [[ -z $plugin_dir ]]; then
  for d in /usr/lib/*/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
    if [[ -e $d/select_cons_tres.so ]]; then plugin_dir=$d; break; fi
  done
fi
[[ -n $plugin_dir && -d $plugin_dir ]] || die "cannot find the Slurm PluginDir (set SLURM_PLUGIN_DIR)"

# ---- what the packages are called and depend on ---------------------------------------------------
# workspace_field KEY: KEY's string value in [workspace.package] of Cargo.toml.
workspace_field() {
  awk -v key="$1" '
    /^\[/ { in_section = ($0 == "[workspace.package]") }
    in_section && $1 == key && match($0, /"[^"]*"/) { print substr($0, RSTART + 1, RLENGTH - 2); exit }' Cargo.toml
}
version=$(workspace_field version)
license=$(workspace_field license)
[[ -n $version ]] || die "no version in [workspace.package] of Cargo.toml"
[[ $license == MIT ]] || die "license '$license' in Cargo.toml: add its text to copyright_file in build-debs.sh"
plugins_version=$version+slurm$slurm_version
arch=$(dpkg --print-architecture)
glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')               # the build's glibc: its minimum
maintainer="${DEBFULLNAME:-gputokens packager} <${DEBEMAIL:-root@localhost}>"
out=${out:-$CARGO_TARGET_DIR/debian/slurm-$slurm_series}

# ---- build ----------------------------------------------------------------------------------------
say "building ($profile) in $CARGO_TARGET_DIR for Slurm $slurm_version, PluginDir $plugin_dir"
built=$CARGO_TARGET_DIR/$profile
if [[ -z $binaries ]]; then
  # The whole workspace, as tests/run.sh builds it: the same features, so neither rebuilds the other's.
  cargo build --locked "${cargo_profile[@]}" --workspace
  # sbalance linked statically, as the README installs it (users run it beside sshare; it starts faster).
  bash packaging/static-sbalance.sh "${cargo_profile[@]}" >/dev/null
  binaries=$CARGO_TARGET_DIR
elif [[ $binaries != "$CARGO_TARGET_DIR" ]]; then
  # Only what depends on this machine's Slurm (in the tree of the binaries, the plugins are built for
  # it already: built again alone, with other features, they would be compiled twice).
  cargo build --locked "${cargo_profile[@]}" -p job-submit-gputokens -p spank-gputokens
fi
for so in libjob_submit_gputokens.so libspank_gputokens.so; do [[ -f $built/$so ]] || die "$built/$so is not built"; done
accountd=$binaries/$profile/accountd
agent=$binaries/$profile/gputokens-agent
sbalance=$binaries/$profile/static/sbalance
dist=$binaries/$profile/gputokens-dist
for file in "$accountd" "$agent" "$sbalance" "$dist"; do [[ -x $file ]] || die "$file is not built"; done
if readelf -d "$sbalance" | grep -q '(NEEDED)'; then die "$sbalance needs shared libraries: not linked statically"; fi
# The Depends of gputokens covers these libraries: one more must be added there.
for program in "$accountd" "$agent"; do
  for lib in $(readelf -d "$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case $lib in
      libc.so.6|libm.so.6|libgcc_s.so.1|ld-linux*.so.*|libmunge.so.2) ;;
      *) die "$program needs $lib, which no package in the Depends of its package provides" ;;
    esac
  done
done

WORK=$(mktemp -d /tmp/gputokens-debs.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# Man pages and completions from the clap definitions the binaries parse with (crates/dist).
# The pages' date: SOURCE_DATE_EPOCH (reproducible builds) or the last commit's, not the build's.
man_date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}" +%F)
"$dist" man --date "$man_date" "$WORK/man"
"$dist" completions "$WORK/completions"

# ---- package trees --------------------------------------------------------------------------------
# put MODE SRC... DIR: install files into DIR of the package tree $tree (directories 0755).
put() {
  local mode=$1 dir=${*: -1}
  install -d -m 755 "$tree/$dir"
  install -m "$mode" "${@:2:$#-2}" "$tree/$dir"
}

# copyright_file: Debian's machine-readable copyright file, with the text of the workspace's license.
copyright_file() {
  cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: gputokens

Files: *
Copyright: the gputokens authors
License: $license
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the "Software"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in
 all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
 SOFTWARE.
EOF
}

# control_files PACKAGE VERSION: DEBIAN/ of $tree. The fields after Version (Depends, ...,
# Description) come on stdin. Every file under /etc is a conffile (as debhelper makes them).
control_files() {
  install -d -m 755 "$tree/DEBIAN"
  {
    echo "Package: $1"
    echo "Version: $2"
    echo "Architecture: $arch"
    echo "Maintainer: $maintainer"
    echo "Installed-Size: $(du -sk --exclude=DEBIAN "$tree" | cut -f1)"
    echo "Section: admin"
    echo "Priority: optional"
    cat
  } > "$tree/DEBIAN/control"
  chmod 644 "$tree/DEBIAN/control"
  if [[ -d $tree/etc ]]; then
    (cd "$tree" && find etc -type f | sed 's|^|/|' | sort) > "$tree/DEBIAN/conffiles"
    chmod 644 "$tree/DEBIAN/conffiles"
  fi
}

# reload_units_scripts: postinst and postrm of $tree, so that systemd re-reads the units the package
# adds, changes or removes (it enables and starts none).
reload_units_scripts() {
  local script
  for script in postinst postrm; do
    printf '#!/bin/sh\nset -e\nif [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n' \
      > "$tree/DEBIAN/$script"
    chmod 755 "$tree/DEBIAN/$script"
  done
}

# -- gputokens
tree=$WORK/gputokens
put 755 "$accountd" "$sbalance" usr/bin
put 644 slurm-conf/gputokens.toml etc/slurm
put 644 slurm-conf/systemd/gputokens-accountd.service slurm-conf/systemd/gputokens-backup.service \
  slurm-conf/systemd/*.timer usr/lib/systemd/system
for unit in "$tree"/usr/lib/systemd/system/*.service; do
  for exe in $(sed -n 's/^Exec[A-Za-z]*=[-@+!:]*\([^ ]*\).*/\1/p' "$unit"); do
    [[ -f $tree$exe ]] || die "$unit runs $exe, which the package does not ship"
  done
done
gzip -9n "$WORK"/man/*.[158]                           # -n: no name or time stamp inside
put 644 "$WORK"/man/*.1.gz usr/share/man/man1
put 644 "$WORK"/man/*.5.gz usr/share/man/man5
put 644 "$WORK"/man/accountd*.8.gz usr/share/man/man8
put 644 "$WORK"/completions/bash/{accountd,sbalance} usr/share/bash-completion/completions
put 644 "$WORK"/completions/zsh/_{accountd,sbalance} usr/share/zsh/vendor-completions
put 644 "$WORK"/completions/fish/{accountd,sbalance}.fish usr/share/fish/vendor_completions.d
put 644 slurm-conf/slurm.conf.gputokens slurm-conf/prometheus/gputokens-alerts.yml slurm-conf/grafana/gputokens.json \
  usr/share/doc/gputokens/examples
put 755 slurm-conf/examples/gpu-submit-backoff.sh usr/share/doc/gputokens/examples
install -d -m 755 "$tree/usr/share/doc/gputokens"
put 644 README.md docs/install.md docs/configuration.md docs/operation.md docs/workflows.md usr/share/doc/gputokens
copyright_file > "$tree/usr/share/doc/gputokens/copyright"
control_files gputokens "$version" <<EOF
Depends: libc6 (>= $glibc), libgcc-s1, libmunge2, munge, slurm-client
Suggests: gputokens-slurm-plugins
Description: per-user GPU token bucket for Slurm: accountd and sbalance
 gputokens charges GPU time per GPU-hour at a price per GPU type against each
 user's token balance, replenished daily; users in debt are deprioritized and,
 at the floor, refused new GPU jobs (by the gputokens-slurm-plugins package).
 .
 This package holds accountd (the daemon on the slurmctld host and the admin
 commands), sbalance (balances, like sshare), the configuration
 /etc/slurm/gputokens.toml and systemd units, which it neither enables nor
 starts: on the controller, systemctl enable --now gputokens-accountd. GPU
 nodes install gputokens-agent.
EOF
reload_units_scripts

# -- gputokens-agent
tree=$WORK/gputokens-agent
put 755 "$agent" usr/bin
put 644 slurm-conf/systemd/gputokens-agent.service usr/lib/systemd/system
grep -qx 'ExecStart=/usr/bin/gputokens-agent' "$tree/usr/lib/systemd/system/gputokens-agent.service" \
  || die "gputokens-agent.service does not run /usr/bin/gputokens-agent"
put 644 "$WORK"/man/gputokens-agent.8.gz usr/share/man/man8
put 644 "$WORK"/completions/bash/gputokens-agent usr/share/bash-completion/completions
put 644 "$WORK"/completions/zsh/_gputokens-agent usr/share/zsh/vendor-completions
put 644 "$WORK"/completions/fish/gputokens-agent.fish usr/share/fish/vendor_completions.d
install -d -m 755 "$tree/usr/share/doc/gputokens-agent"
copyright_file > "$tree/usr/share/doc/gputokens-agent/copyright"
control_files gputokens-agent "$version" <<EOF
Depends: libc6 (>= $glibc), libgcc-s1, libmunge2, munge
Recommends: gputokens-slurm-plugins
Breaks: gputokens (<< 0.2.0)
Replaces: gputokens (<< 0.2.0)
Description: gputokens node agent: GPU use and health of a Slurm node for accountd
 gputokens-agent samples the node's GPUs through NVML (the driver's
 libnvidia-ml.so.1, loaded at run time) every [agent] interval, maps each GPU
 and process to the Slurm job holding it (by the records of
 spank_gputokens.so, package gputokens-slurm-plugins) and posts the sample to
 accountd, signed with MUNGE; it serves its own /metrics.
 .
 It reads /etc/slurm/gputokens.toml, which the site puts on each GPU node as
 it does slurm.conf. The unit gputokens-agent is neither enabled nor started:
 systemctl enable --now gputokens-agent.
EOF
reload_units_scripts

# -- gputokens-slurm-plugins
tree=$WORK/gputokens-slurm-plugins
install -d -m 755 "$tree$plugin_dir"
install -m 644 "$built/libjob_submit_gputokens.so" "$tree$plugin_dir/job_submit_gputokens.so"
install -m 644 "$built/libspank_gputokens.so" "$tree$plugin_dir/spank_gputokens.so"
# slurm-conf's plugstack line, naming the plugin where this package puts it.
spank_conf=$tree/etc/slurm/plugstack.conf.d/gputokens.conf
install -d -m 755 "${spank_conf%/*}"
sed -E "/^[[:space:]]*#/! s|[^[:space:]]*/spank_gputokens\.so|$plugin_dir/spank_gputokens.so|" \
  slurm-conf/plugstack.conf.d/gputokens.conf > "$spank_conf"
chmod 644 "$spank_conf"
awk -v so="$plugin_dir/spank_gputokens.so" '$1 ~ /^(optional|required)$/ && $2 == so { found = 1 }
  END { exit !found }' "$spank_conf" || die "no plugin line for $plugin_dir/spank_gputokens.so in $spank_conf"
install -d -m 755 "$tree/usr/share/doc/gputokens-slurm-plugins"
copyright_file > "$tree/usr/share/doc/gputokens-slurm-plugins/copyright"
control_files gputokens-slurm-plugins "$plugins_version" <<EOF
Depends: $SLURM_DEB (= $slurm_deb_version)
Recommends: gputokens
Description: gputokens job_submit and SPANK plugins for Slurm $slurm_version
 Built for Slurm $slurm_version ($SLURM_DEB $slurm_deb_version), the only
 Slurm that loads them: job_submit_gputokens.so decides GPU jobs at submission
 by the balances accountd (package gputokens) publishes; spank_gputokens.so
 shows the balance at sbatch and records each job's GPUs on the node.
 .
 The package does not edit slurm.conf: add JobSubmitPlugins=gputokens to
 /etc/slurm/slurm.conf and restart slurmctld. The SPANK plugin is listed in
 /etc/slurm/plugstack.conf.d/gputokens.conf, which plugstack.conf must include
 (Debian's default plugstack.conf does); restart slurmd after installing.
EOF

# ---- build and check the .debs ------------------------------------------------------------------
mkdir -p "$out"
rm -f "$out"/gputokens_*_"$arch".deb "$out"/gputokens-slurm-plugins_*_"$arch".deb \
  "$out"/gputokens-agent_*_"$arch".deb   # no stale versions in *.deb
debs=("$out/gputokens_${version}_$arch.deb" "$out/gputokens-slurm-plugins_${plugins_version}_$arch.deb"
  "$out/gputokens-agent_${version}_$arch.deb")
dpkg-deb --root-owner-group "${compression[@]}" --build "$WORK/gputokens" "${debs[0]}" >&2
dpkg-deb --root-owner-group "${compression[@]}" --build "$WORK/gputokens-slurm-plugins" "${debs[1]}" >&2
dpkg-deb --root-owner-group "${compression[@]}" --build "$WORK/gputokens-agent" "${debs[2]}" >&2

# check_deb DEB PATH...: DEB holds each PATH and each of its conffiles, all owned by root.
check_deb() {
  local deb=$1 listing path; shift
  listing=$(dpkg-deb --contents "$deb")
  if awk '$2 != "root/root"' <<<"$listing" | grep -q .; then die "$deb: entries not owned by root"; fi
  for path in "$@" $(dpkg-deb --info "$deb" conffiles 2>/dev/null); do
    awk -v want=".$path" '$NF == want { found = 1 } END { exit !found }' <<<"$listing" || die "$deb lacks $path"
  done
  say "$(dpkg-deb --field "$deb" Package Version Depends | tr '\n' ' ')($(wc -l <<<"$listing") entries)"
}
check_deb "${debs[0]}" /usr/bin/accountd /usr/bin/sbalance /etc/slurm/gputokens.toml \
  /usr/share/man/man1/accountd.1.gz /usr/share/man/man8/accountd-serve.8.gz /usr/share/man/man1/sbalance.1.gz \
  /usr/share/man/man5/gputokens.toml.5.gz /usr/share/bash-completion/completions/sbalance /usr/share/zsh/vendor-completions/_accountd \
  /usr/share/fish/vendor_completions.d/sbalance.fish /usr/lib/systemd/system/gputokens-accountd.service \
  /usr/lib/systemd/system/gputokens-backup.service /usr/lib/systemd/system/gputokens-backup.timer
check_deb "${debs[1]}" "$plugin_dir/job_submit_gputokens.so" "$plugin_dir/spank_gputokens.so" \
  /etc/slurm/plugstack.conf.d/gputokens.conf
check_deb "${debs[2]}" /usr/bin/gputokens-agent /usr/lib/systemd/system/gputokens-agent.service \
  /usr/share/man/man8/gputokens-agent.8.gz
printf '%s\n' "${debs[@]}"
