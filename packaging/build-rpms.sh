#!/bin/bash
# build-rpms.sh — build gputokens' two RPMs for RHEL-family sites (Rocky, Alma, RHEL 8/9) the way
# such sites build Slurm itself: a source tarball, then `rpmbuild -ta` on it.
#
#   gputokens                accountd and sbalance (linked statically) in /usr/bin, the example
#                            config as %config(noreplace) /etc/slurm/gputokens.toml, the systemd units,
#                            man pages, bash/zsh/fish completions, examples
#   gputokens-slurm-plugins  job_submit_gputokens.so and spank_gputokens.so in Slurm's PluginDir of
#                            its own RPMs (%{_libdir}/slurm) and %config(noreplace)
#                            /etc/slurm/plugstack.conf.d/gputokens.conf; requires exactly the Slurm
#                            whose headers it was built against
#
#   bash packaging/build-rpms.sh [--profile debug|release] [--out DIR] [--nodeps]
#
# Run it on the host with the Slurm the plugins are for: its slurm and slurm-devel RPMs (Slurm's own
# slurm.spec), Rust, clang-devel, munge-devel, glibc-static, rpm-build. It refuses headers of
# another Slurm than the installed one. --nodeps is for a host whose Slurm is not an RPM (Debian, in
# the tests): the installed Slurm is then Debian's slurm-wlm-basic-plugins, and rpmbuild does not
# check the BuildRequires (no Debian package provides them). Root is not needed.
#
# Writes DIR/gputokens-VERSION.tar.gz (this working tree's files as git sees them, tracked and
# untracked but not ignored, with gputokens.spec at the top) and the three .rpm files into DIR
# (default ${CARGO_TARGET_DIR:-target}/rpm/slurm-MAJOR.MINOR/); prints the four paths on stdout,
# everything else on stderr. cargo builds into ${CARGO_TARGET_DIR:-target}/rpm/target.
set -euo pipefail
umask 022

say() { printf 'build-rpms: %s\n' "$*" >&2; }
die() { printf 'build-rpms: ERROR: %s\n' "$*" >&2; exit 1; }
USAGE="usage: build-rpms.sh [--profile debug|release] [--out DIR] [--nodeps]"

profile=release out="" nodeps=0
while (( $# )); do
  case $1 in
    --profile) (( $# >= 2 )) || die "$USAGE"; profile=$2; shift 2 ;;
    --out) (( $# >= 2 )) || die "$USAGE"; out=$2; shift 2 ;;
    --nodeps) nodeps=1; shift ;;
    -h|--help) echo "$USAGE"; exit 0 ;;
    *) die "unknown argument '$1'; $USAGE" ;;
  esac
done
[[ $profile == debug || $profile == release ]] || die "--profile must be debug or release, not '$profile'"
command -v rpmbuild >/dev/null || die "rpmbuild is missing: install rpm-build (Debian: rpm)"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARGO_TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-$ROOT/target}")
# rpmbuild's cargo builds the tarball's copy of the sources in a target directory of its own: cargo
# names a workspace's artifacts by their path inside the workspace, so in the tree's own directory
# the copy and the tree would take each other's artifacts for their own.
RPM_TARGET_DIR=$CARGO_TARGET_DIR/rpm/target
[[ -z $out ]] || out=$(realpath -m "$out")
cd "$ROOT"

# ---- the Slurm installed here, and its headers: the same release, or no build ----------------------
if rpm -q slurm >/dev/null 2>&1; then
  slurm_version=$(rpm -q --qf '%{VERSION}' slurm)
  slurm_from="the slurm RPM $(rpm -q slurm)"
elif (( nodeps )); then
  deb_version=$(dpkg-query -W -f '${Version}' slurm-wlm-basic-plugins 2>/dev/null) \
    || die "--nodeps: neither a slurm RPM nor Debian's slurm-wlm-basic-plugins is installed"
  slurm_version=${deb_version#*:}
  slurm_version=${slurm_version%-*}
  slurm_from="Debian's slurm-wlm-basic-plugins $deb_version (--nodeps)"
else
  die "no slurm RPM is installed (rpm -q slurm): build on the host with the Slurm the plugins are for" \
    "(or, on a host whose Slurm is not an RPM, with --nodeps)"
fi
version_header=/usr/include/slurm/slurm_version.h
[[ -f $version_header ]] || die "$version_header missing: install slurm-devel"
number=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$version_header")
[[ $number =~ ^0x[0-9a-fA-F]+$ ]] || die "no SLURM_VERSION_NUMBER in $version_header"
headers_version=$(printf '%d.%02d.%d' $(( number >> 16 & 0xff )) $(( number >> 8 & 0xff )) $(( number & 0xff )))
[[ $headers_version == "$slurm_version" ]] \
  || die "the headers ($version_header) are Slurm $headers_version, but the installed Slurm is $slurm_version ($slurm_from)"
slurm_series=$(cut -d. -f1,2 <<<"$slurm_version")

version=$(awk '/^\[/ { s = ($0 == "[workspace.package]") } s && $1 == "version" && match($0, /"[^"]*"/) {
  print substr($0, RSTART + 1, RLENGTH - 2); exit }' Cargo.toml)
[[ -n $version ]] || die "no version in [workspace.package] of Cargo.toml"
out=${out:-$CARGO_TARGET_DIR/rpm/slurm-$slurm_series}

# ---- the source tarball ---------------------------------------------------------------------------
WORK=$(mktemp -d /tmp/gputokens-rpms.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
name=gputokens-$version
stage=$WORK/$name
mkdir -p "$stage" "$out"
git rev-parse --show-toplevel >/dev/null 2>&1 || die "$ROOT is not a git checkout: the tarball lists git's files"
# Tracked and untracked-but-not-ignored files that exist (a deleted tracked file is left out).
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$stage"
# The spec at the top (where rpmbuild -ta looks), its version and changelog date filled in; dated
# by the last commit, so the same tree makes the same tarball.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
sed -e "s/@VERSION@/$version/g" -e "s/@DATE@/$(LC_ALL=C date -u -d "@$epoch" '+%a %b %d %Y')/" \
  packaging/gputokens.spec.in > "$stage/gputokens.spec"
grep -q '@[A-Z]*@' "$stage/gputokens.spec" && die "packaging/gputokens.spec.in has a placeholder build-rpms.sh does not fill"
tarball=$out/$name.tar.gz
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$WORK" -czf "$tarball" "$name"
say "$tarball ($(du -h "$tarball" | cut -f1)) for Slurm $slurm_version ($slurm_from)"

# ---- rpmbuild -ta ---------------------------------------------------------------------------------
rpmbuild_args=(-ta "$tarball" --define "_topdir $WORK/rpmbuild" --define "gputokens_profile $profile")
(( nodeps )) && rpmbuild_args+=(--nodeps)
say "rpmbuild ${rpmbuild_args[*]} (cargo builds in $RPM_TARGET_DIR)"
CARGO_TARGET_DIR=$RPM_TARGET_DIR rpmbuild "${rpmbuild_args[@]}" >&2
rm -f "$out"/gputokens-*.rpm      # no stale versions beside the new ones
mapfile -t rpms < <(find "$WORK/rpmbuild/RPMS" -name 'gputokens-*.rpm' | sort)
(( ${#rpms[@]} == 3 )) || die "rpmbuild made ${#rpms[@]} packages, not 3: ${rpms[*]}"
cp "${rpms[@]}" "$out/"

# ---- check what was built -------------------------------------------------------------------------
main=$(ls "$out"/gputokens-"$version"-*.rpm)
agent=$(ls "$out"/gputokens-agent-"$version"-*.rpm)
plugins=$(ls "$out"/gputokens-slurm-plugins-"$version"-*.rpm)
# Listings read whole before they are searched: `rpm ... | grep -q` fails under pipefail when grep
# stops reading at its match and rpm gets SIGPIPE.
requires=$(rpm -qp --requires "$plugins" 2>/dev/null)
grep -qxE "slurm(\([^)]*\))? = ${slurm_version//./\\.}" <<<"$requires" || die "$plugins does not require exactly slurm $slurm_version"
listing=$(rpm -qlp "$plugins" 2>/dev/null)
for file in /usr/lib64/slurm/job_submit_gputokens.so /usr/lib64/slurm/spank_gputokens.so; do
  grep -qx "$file" <<<"$listing" || die "$plugins lacks $file"
done
listing=$(rpm -qlp "$main" 2>/dev/null)
for file in /usr/bin/accountd /usr/bin/sbalance /etc/slurm/gputokens.toml /usr/lib/systemd/system/gputokens-accountd.service; do
  grep -qx "$file" <<<"$listing" || die "$main lacks $file"
done
listing=$(rpm -qlp "$agent" 2>/dev/null)
for file in /usr/bin/gputokens-agent /usr/lib/systemd/system/gputokens-agent.service; do
  grep -qx "$file" <<<"$listing" || die "$agent lacks $file"
done
printf '%s\n' "$tarball" "$main" "$plugins" "$agent"
