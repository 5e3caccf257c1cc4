#!/bin/bash
# The status page with USERS (10,000) users in the ledger: how long headless chromium takes from
# the start of the navigation until the page is drawn with its data (the admins' view lists every
# user; the user's view is one user's). A release `accountd serve` on a private site; the browser is
# driven through chromedriver's WebDriver HTTP API with curl. Needs chromium and chromium-driver
# (tests/cluster/install.sh installs them). `bash bench/web.sh`   USERS=… RUNS=5
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
USERS=${USERS:-10000} RUNS=${RUNS:-5}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -q -p accountd --bin accountd --bin sbalance
ACCOUNTD=$(realpath "$TARGET/release/accountd") SBALANCE=$(realpath "$TARGET/release/sbalance")
work=$(mktemp -d /tmp/gputokens-web.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http_port=$(free_port) driver_port=$(free_port)
cat > "$work/gputokens.toml" <<TOML
[prices]
rtx2080 = 0.5
rtx3090 = 1
a6000 = 4
[intervals]
charge = "1h"
check = "1h"
[slurm]
bin_dir = "$work/no-slurm"
[http]
listen = "127.0.0.1:$http_port"
[web]
allow_http = true
[paths]
ledger = "$work/lib/ledger.sqlite"
snapshot = "$work/lib/balances.snapshot"
socket = "$work/run/accountd.sock"
TOML
export GPUTOKENS_CONF=$work/gputokens.toml
"$ACCOUNTD" serve 2> "$work/serve.log" & pids+=($!)
for _ in $(seq 100); do [[ -S $work/run/accountd.sock ]] && break; sleep 0.1; done
python3 -c "import json,sys; json.dump({f'user{i:05d}': (i % 250) - 20 for i in range($USERS)}, open(sys.argv[1], 'w'))" "$work/import.json"
"$ACCOUNTD" admin import "$work/import.json" > /dev/null
# root's own history, so its view has entries and a chart too
python3 -c "
rows = ['JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State']
rows += [f'{9000+i}|root|gres/gpu:a6000=1|{600 + i}|2026-11-20T08:00:00|COMPLETED' for i in range(200)]
open('$work/root.sacct', 'w').write('\n'.join(rows) + '\n')"
"$ACCOUNTD" charge --sacct-file "$work/root.sacct" > /dev/null
echo "ledger: $("$SBALANCE" -a -n -P -o User | wc -l) users"

chromedriver --port="$driver_port" > /dev/null 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$driver_port/status" > /dev/null && break; sleep 0.1; done
wd() { curl -sf -X POST -H 'Content-Type: application/json' -d "$2" "http://127.0.0.1:$driver_port$1"; }
session=$(wd /session '{"capabilities":{"alwaysMatch":{"goog:chromeOptions":{"binary":"/usr/bin/chromium","args":["--headless=new","--no-sandbox","--disable-gpu","--disable-dev-shm-usage","--user-data-dir='"$work"'/chromium"]}}}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["value"]["sessionId"])')
script() { wd "/session/$session/execute/sync" "{\"script\": \"$1\", \"args\": []}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["value"])'; }
link=$("$SBALANCE" --web | grep -o 'http://[^ ]*')
wd "/session/$session/url" "{\"url\": \"$link\"}" > /dev/null
measure() { # label, url
  local times=()
  for _ in $(seq "$RUNS"); do
    wd "/session/$session/url" "{\"url\": \"about:blank\"}" > /dev/null
    wd "/session/$session/url" "{\"url\": \"$2\"}" > /dev/null
    for _ in $(seq 200); do [[ $(script 'return document.body.dataset.loaded || \"\"') == true ]] && break; sleep 0.05; done
    times+=("$(script 'return document.body.dataset.loadedMs')")
  done
  printf '%-28s %s ms (runs: %s)\n' "$1" "$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")" "${times[*]}"
}
measure "admin view, $USERS users" "http://127.0.0.1:$http_port/web/#admin"
echo "rows drawn: $(script 'return document.querySelectorAll(\"#users tbody tr\").length')"
measure "user view (200 jobs)" "http://127.0.0.1:$http_port/web/"
curl -sf -X DELETE "http://127.0.0.1:$driver_port/session/$session" > /dev/null || true
