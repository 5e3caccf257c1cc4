#!/bin/bash
# The BIN directory run.sh needs on a GPU machine, from this machine's build: accountd stripped (a
# debug build is about 150 MB, what travels is at most 64 MiB) and the libmunge.so.2 it links, which a
# machine without MUNGE lacks (run.sh puts BIN/lib on LD_LIBRARY_PATH). No fake NVML: the real one is there.
#   bash tests/gpu-real/carry.sh [target/debug/accountd] [target-gpu]
set -eu
src=${1:-target/debug/accountd}
dest=${2:-target-gpu}
mkdir -p "$dest/lib"
strip -o "$dest/accountd" "$src"
munge=$(ldd "$src" | awk '/libmunge\.so/ {print $3}')
[ -n "$munge" ] && cp -L "$munge" "$dest/lib/"
du -sh "$dest"
