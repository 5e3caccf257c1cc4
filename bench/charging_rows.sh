#!/bin/bash
# charging_rows.sh — what the databases' own work costs for the row layouts a charge could be
# written in, against the raw INSERT of `cargo bench -p ledger --bench charging` (issue 47's 0.5×):
# no gputokens code, only the sqlite3 shell (and MariaDB's client), each layout filled by one
# INSERT ... SELECT from the same prepared source rows (so reading them costs every layout the
# same), in one transaction, timed with its COMMIT (on SQLite: WAL, synchronous=NORMAL, a 64 MiB
# cache, the ledger's settings).
#
#   bash bench/charging_rows.sh                  # 1,000,000 rows, 3 rounds
#   ROWS=200000 ROUNDS=5 bash bench/charging_rows.sh
#   MARIADB_SOCKET=/run/mysqld/mysqld.sock bash bench/charging_rows.sh   # on that MariaDB too (as root)
#
# On MariaDB the same layouts are InnoDB tables as the ledger makes them there (no partial index: the
# one-row layout indexes every entry's job), in a database of their own (gputokens_bench_rows,
# dropped after), each filled from a table of the source rows by one INSERT ... SELECT.
#
# Layouts:
#   raw       the six sacct columns, one unindexed table (the benchmark's raw INSERT)
#   ledger    a charge entry (its reason text) and its run's job_charges row: what the ledger writes
#   one-row   the entry carries its run's start and progress, found by an index on its job
#   columns   the entry's reason left empty, its GPU count and price kept as two integers instead
#             (a reason rendered from them when shown), with its job_charges row
#   both      one-row and columns together
set -euo pipefail
ROWS=${ROWS:-1000000}
ROUNDS=${ROUNDS:-3}
command -v sqlite3 >/dev/null || { echo "charging_rows.sh: needs the sqlite3 shell (apt-get install sqlite3)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/gputokens-charging-rows.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

entry_columns="id INTEGER PRIMARY KEY, user TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind = 'grant' OR
  kind = 'replenish' OR kind = 'monthly' OR kind = 'charge' OR kind = 'refund' OR kind = 'adjust' OR
  kind = 'import'), amount INTEGER NOT NULL, at INTEGER NOT NULL, actor TEXT NOT NULL, reason TEXT NOT
  NULL, key TEXT, job_id TEXT, gpu_type TEXT, gpu_seconds INTEGER, prev_id INTEGER, member TEXT"
sqlite3 "$DIR/source.db" <<EOF >/dev/null
PRAGMA journal_mode=WAL;
CREATE TABLE src AS WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < $ROWS - 1)
  SELECT i, CAST(100000 + i AS TEXT) AS job, 'user' || (i % 2000) AS user,
         60 + (i * 7919) % 86400 AS elapsed, 1 + i % 4 AS gpus,
         (1 + i % 4) || ' × a6000 for ' || (60 + (i * 7919) % 86400) || 's at 4/GPU-hour' AS reason,
         'billing=' || (1 + i % 4) || ',cpu=' || (1 + i % 4) || ',gres/gpu:a6000=' || (1 + i % 4)
           || ',gres/gpu=' || (1 + i % 4) || ',node=1' AS tres
  FROM c;
CREATE TABLE rows (job_id TEXT, user TEXT, alloc_tres TEXT, elapsed INTEGER, start TEXT, state TEXT);
CREATE TABLE entries ($entry_columns);
CREATE UNIQUE INDEX entries_by_key ON entries (key) WHERE key IS NOT NULL;
CREATE TABLE entries_runs ($entry_columns, gpu_milli INTEGER, price INTEGER, run_start INTEGER, charged_until INTEGER);
CREATE UNIQUE INDEX entries_runs_by_key ON entries_runs (key) WHERE key IS NOT NULL;
CREATE INDEX entries_runs_by_job ON entries_runs (job_id) WHERE run_start IS NOT NULL;
CREATE TABLE entries_cols ($entry_columns, gpu_milli INTEGER, price INTEGER);
CREATE UNIQUE INDEX entries_cols_by_key ON entries_cols (key) WHERE key IS NOT NULL;
CREATE TABLE job_charges (job_id TEXT NOT NULL, run TEXT NOT NULL, segment_start INTEGER NOT NULL,
  gpu_type TEXT NOT NULL, user TEXT NOT NULL, charged_until INTEGER NOT NULL, charged INTEGER NOT NULL,
  energy_charged INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job_id, run, gpu_type)) WITHOUT ROWID;
EOF

entry_values() { # $1: the reason's expression
  echo "i + 1, user, 'charge', -1000000 * gpus, 1796600000, 'gputokens', $1, NULL, job, 'a6000',
        gpus * elapsed, CASE WHEN i >= 2000 THEN i - 1999 END, NULL"
}
run_row="INSERT INTO job_charges SELECT job, 'start:1796590000', 1796590000, 'a6000', user, elapsed, 1000000 * gpus, 0 FROM src;"
declare -A SQL=(
  [raw]="INSERT INTO rows SELECT job, user, tres, elapsed, '2026-11-30T08:00:00', 'COMPLETED' FROM src;"
  [ledger]="INSERT INTO entries SELECT $(entry_values reason) FROM src; $run_row"
  [one-row]="INSERT INTO entries_runs SELECT $(entry_values reason), NULL, NULL, 1796590000, elapsed FROM src;"
  [columns]="INSERT INTO entries_cols SELECT $(entry_values "''"), gpus * 1000, 4000000 FROM src; $run_row"
  [both]="INSERT INTO entries_runs SELECT $(entry_values "''"), gpus * 1000, 4000000, 1796590000, elapsed FROM src;"
)
LAYOUTS=(raw ledger one-row columns both)

# Seconds one layout's transaction took, its COMMIT included.
timed() {
  cp "$DIR/source.db" "$DIR/t.db"
  local start end
  start=$(date +%s.%N)
  sqlite3 "$DIR/t.db" "PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536; BEGIN; ${SQL[$1]} COMMIT;" >/dev/null
  end=$(date +%s.%N)
  rm -f "$DIR"/t.db*
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}

median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# measure NAME TIMER: ROUNDS rounds of every layout timed by TIMER, then the medians.
measure() {
  local name=$1 timer=$2 round layout t line raw
  declare -A times
  for round in $(seq "$ROUNDS"); do
    line="$name round $round:"
    for layout in "${LAYOUTS[@]}"; do
      t=$("$timer" "$layout")
      times[$layout]+="$t "
      line+="  $layout $t s"
    done
    echo "$line"
  done
  raw=$(median "${times[raw]}")
  printf '\n%s: %-8s %10s %8s   (%s rows, median of %s rounds)\n' "$name" layout seconds "raw/it" "$ROWS" "$ROUNDS"
  for layout in "${LAYOUTS[@]}"; do
    t=$(median "${times[$layout]}")
    printf '%s: %-8s %10s %8s\n' "$name" "$layout" "$t" "$(awk -v r="$raw" -v t="$t" 'BEGIN { printf "%.2f", r / t }')"
  done
  echo
}
measure SQLite timed
[[ -n ${MARIADB_SOCKET:-} ]] || exit 0

# ---- MariaDB --------------------------------------------------------------------------------------
maria() { mariadb --socket="$MARIADB_SOCKET" -u root "$@"; }
DB=gputokens_bench_rows
trap 'maria -e "DROP DATABASE IF EXISTS $DB" || true; rm -rf "$DIR"' EXIT
maria_entry="id BIGINT NOT NULL PRIMARY KEY, user VARCHAR(255) NOT NULL, kind VARCHAR(16) NOT NULL CHECK (kind IN
  ('grant','replenish','monthly','charge','refund','adjust','import')), amount BIGINT NOT NULL, at BIGINT NOT NULL,
  actor VARCHAR(255) NOT NULL, reason TEXT NOT NULL, \`key\` VARCHAR(768), job_id VARCHAR(128), gpu_type VARCHAR(128),
  gpu_seconds BIGINT, prev_id BIGINT, member VARCHAR(255)"
maria -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB; USE $DB;
CREATE TABLE src (i BIGINT PRIMARY KEY, job VARCHAR(128), user VARCHAR(255), elapsed BIGINT, gpus BIGINT, reason TEXT, tres TEXT);
INSERT INTO src SELECT seq, CAST(100000 + seq AS CHAR), CONCAT('user', seq % 2000), 60 + (seq * 7919) % 86400, 1 + seq % 4,
  CONCAT(1 + seq % 4, ' × a6000 for ', 60 + (seq * 7919) % 86400, 's at 4/GPU-hour'),
  CONCAT('billing=', 1 + seq % 4, ',cpu=', 1 + seq % 4, ',gres/gpu:a6000=', 1 + seq % 4, ',gres/gpu=', 1 + seq % 4, ',node=1')
  FROM seq_0_to_$((ROWS - 1));"
declare -A MARIA_TABLES=(
  [raw]="CREATE TABLE \`rows\` (job_id VARCHAR(128), user VARCHAR(255), alloc_tres TEXT, elapsed BIGINT, start VARCHAR(32), state VARCHAR(32));"
  [entries]="CREATE TABLE entries ($maria_entry);"
  [entries_runs]="CREATE TABLE entries_runs ($maria_entry, gpu_milli BIGINT, price BIGINT, run_start BIGINT, charged_until BIGINT, KEY entries_runs_by_job (job_id));"
  [entries_cols]="CREATE TABLE entries_cols ($maria_entry, gpu_milli BIGINT, price BIGINT);"
  [job_charges]="CREATE TABLE job_charges (job_id VARCHAR(128) NOT NULL, run VARCHAR(128) NOT NULL, segment_start BIGINT NOT NULL,
    gpu_type VARCHAR(128) NOT NULL, user VARCHAR(255) NOT NULL, charged_until BIGINT NOT NULL, charged BIGINT NOT NULL,
    energy_charged BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (job_id, run, gpu_type));"
)
# Seconds one layout's transaction took on MariaDB, its COMMIT included (its tables made fresh before).
maria_timed() {
  local tables start end t
  tables="DROP TABLE IF EXISTS \`rows\`, entries, entries_runs, entries_cols, job_charges;"
  for t in "${!MARIA_TABLES[@]}"; do tables+=" ${MARIA_TABLES[$t]}"; done
  maria "$DB" -e "$tables"
  start=$(date +%s.%N)
  maria "$DB" -e "BEGIN; ${SQL[$1]//rows/\`rows\`} COMMIT;"
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
measure MariaDB maria_timed
