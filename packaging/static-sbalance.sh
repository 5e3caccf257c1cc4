#!/bin/bash
# static-sbalance.sh [--release] — link sbalance statically, as the packages install it (users run it
# beside sshare; without the dynamic loader it starts in half the time), from the dependencies the
# workspace's build compiled already: only the final link gets +crt-static (`cargo rustc`), so nothing
# is compiled twice (RUSTFLAGS would rebuild every dependency). Prints the binary's path,
# ${CARGO_TARGET_DIR:-target}/PROFILE/static/sbalance; cargo's output goes to stderr.
set -euo pipefail
profile=debug flag=()
case ${1:-} in
  --release) profile=release flag=(--release) ;;
  "") ;;
  *) echo "usage: static-sbalance.sh [--release]" >&2; exit 2 ;;
esac
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
cargo rustc --locked "${flag[@]}" -p accountd --bin sbalance -- -C target-feature=+crt-static >&2
# The next plain build links target/PROFILE/sbalance again, dynamically: keep this one apart.
install -D -m 755 "$target/$profile/sbalance" "$target/$profile/static/sbalance"
if readelf -d "$target/$profile/static/sbalance" | grep -q '(NEEDED)'; then
  echo "static-sbalance.sh: $target/$profile/static/sbalance needs shared libraries: not linked statically" >&2
  exit 1
fi
echo "$target/$profile/static/sbalance"
