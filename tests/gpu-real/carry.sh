#!/bin/bash
# The BIN directory run.sh needs on a GPU machine, from this machine's build: accountd and
# gputokens-agent stripped (a debug build is about 150 MB, what travels is at most 64 MiB) and the
# libmunge.so.2 they link, which a machine without MUNGE lacks (run.sh puts BIN/lib on
# LD_LIBRARY_PATH). No fake NVML: the real one is there.
#   bash tests/gpu-real/carry.sh [target/debug] [target-gpu]
set -eu
src=${1:-target/debug}
dest=${2:-target-gpu}
mkdir -p "$dest/lib"
for program in accountd gputokens-agent; do strip -o "$dest/$program" "$src/$program"; done
munge=$(ldd "$src/accountd" | awk '/libmunge\.so/ {print $3}')
[ -n "$munge" ] && cp -L "$munge" "$dest/lib/"
du -sh "$dest"
