//! Versioned schema migrations, tracked in SQLite's `user_version`; [`maria`] makes the same
//! tables on MariaDB.

pub mod maria;

use rusqlite::Connection;

/// Each step moves the schema one version up; never edit a step that has shipped, append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: append-only entries, the users they belong to, and per-job charging progress.
    "CREATE TABLE entries (
        id          INTEGER PRIMARY KEY,
        user        TEXT    NOT NULL,
        kind        TEXT    NOT NULL CHECK (kind IN
                        ('grant','replenish','monthly','charge','refund','adjust','import')),
        amount      INTEGER NOT NULL,            -- micro-tokens, signed
        at          INTEGER NOT NULL,            -- unix seconds
        actor       TEXT    NOT NULL,
        reason      TEXT    NOT NULL,
        key         TEXT    NOT NULL UNIQUE,     -- idempotency key: replaying an entry is a no-op
        job_id      TEXT,
        gpu_type    TEXT,
        gpu_seconds INTEGER
     );
     CREATE INDEX entries_by_user ON entries (user, id);
     CREATE INDEX entries_by_job ON entries (job_id) WHERE job_id IS NOT NULL;
     CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
        BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
     CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries
        BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
     CREATE TABLE users (
        name                TEXT PRIMARY KEY,
        first_seen          INTEGER NOT NULL,
        balance             INTEGER NOT NULL,    -- sum of the user's entries, kept in the same transaction
        replenished_through TEXT    NOT NULL     -- local date (YYYY-MM-DD) of the last replenishment
     ) WITHOUT ROWID;
     CREATE TABLE job_charges (
        job_id        TEXT    NOT NULL,
        segment_start INTEGER NOT NULL,          -- a requeued job has one segment per run
        gpu_type      TEXT    NOT NULL,
        user          TEXT    NOT NULL,
        charged_until INTEGER NOT NULL,          -- seconds of the segment already charged
        charged       INTEGER NOT NULL,          -- micro-tokens charged so far
        PRIMARY KEY (job_id, segment_start, gpu_type)
     ) WITHOUT ROWID;",
    // 2: small named values, e.g. how far sacct has been read.
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;",
    // 3: measured GPU utilization per job (from node agents or Prometheus), for charge_basis = "measured".
    "CREATE TABLE job_utilization (
        job_id   TEXT PRIMARY KEY,
        samples  INTEGER NOT NULL,
        util_sum REAL    NOT NULL,   -- sum of sampled utilization percentages
        last_at  INTEGER NOT NULL
     ) WITHOUT ROWID;",
    // 4: what gputokens did to jobs and nodes (preemptions, drains), for audit.
    "CREATE TABLE actions (
        id      INTEGER PRIMARY KEY,
        at      INTEGER NOT NULL,
        action  TEXT    NOT NULL,   -- requeue, cancel, signal, drain
        target  TEXT    NOT NULL,   -- job ID or node name
        user    TEXT    NOT NULL,
        reason  TEXT    NOT NULL,
        dry_run INTEGER NOT NULL
     );",
    // 5: cheaper charging. A charge entry is kept once by its job_charges row (same transaction), so it
    // needs no idempotency key: keys become optional and only they are indexed. Each entry links to the
    // same user's previous one (`prev_id`, newest in `users.last_entry`), so a user's history is a walk
    // down that chain instead of an index every append writes at a random place. No by-job index either:
    // job_charges answers by job. Rebuilt, as SQLite cannot relax NOT NULL/UNIQUE in place. Usage per
    // user, day and GPU type is summed as charges are made (usage_days).
    // The kind CHECK is spelt with OR: an IN list builds a temporary index on every insert.
    "CREATE TABLE entries_v5 (
        id          INTEGER PRIMARY KEY,
        user        TEXT    NOT NULL,
        kind        TEXT    NOT NULL CHECK (kind = 'grant' OR kind = 'replenish' OR kind = 'monthly'
                        OR kind = 'charge' OR kind = 'refund' OR kind = 'adjust' OR kind = 'import'),
        amount      INTEGER NOT NULL,            -- micro-tokens, signed
        at          INTEGER NOT NULL,            -- unix seconds
        actor       TEXT    NOT NULL,
        reason      TEXT    NOT NULL,
        key         TEXT,                        -- idempotency key: replaying a keyed entry is a no-op
        job_id      TEXT,
        gpu_type    TEXT,
        gpu_seconds INTEGER,
        prev_id     INTEGER                      -- the same user's previous entry
     );
     INSERT INTO entries_v5
        SELECT id, user, kind, amount, at, actor, reason, key, job_id, gpu_type, gpu_seconds,
               LAG(id) OVER (PARTITION BY user ORDER BY id)
        FROM entries ORDER BY id;
     DROP TABLE entries;
     ALTER TABLE entries_v5 RENAME TO entries;
     CREATE UNIQUE INDEX entries_by_key ON entries (key) WHERE key IS NOT NULL;
     CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
        BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
     CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries
        BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
     ALTER TABLE users ADD COLUMN last_entry INTEGER;
     UPDATE users SET last_entry = newest.id
        FROM (SELECT user, MAX(id) AS id FROM entries GROUP BY user) AS newest
        WHERE newest.user = users.name;
     -- What each user was charged per local day and GPU type, kept with the charges: sbalance's
     -- Used30d reads 30 days of it instead of every charge entry of those days.
     CREATE TABLE usage_days (
        user     TEXT    NOT NULL,
        day      TEXT    NOT NULL,               -- local date, YYYY-MM-DD
        gpu_type TEXT    NOT NULL,
        charged  INTEGER NOT NULL,               -- micro-tokens
        PRIMARY KEY (user, day, gpu_type)
     ) WITHOUT ROWID;
     INSERT INTO usage_days
        SELECT user, date(at, 'unixepoch', 'localtime'), gpu_type, -SUM(amount) FROM entries
        WHERE kind = 'charge' AND gpu_type IS NOT NULL GROUP BY 1, 2, 3;",
    // 6: GPU faults a node was drained for, so a restarted accountd does not drain again a node an admin
    // resumed for the same fault (see accountd's health module for when a fault is the same).
    "CREATE TABLE gpu_faults (
        node     TEXT    NOT NULL,
        gpu      TEXT    NOT NULL,   -- the GPU's UUID, 'index N' when it had none
        cause    TEXT    NOT NULL,   -- 'xid 79', 'ecc', 'lost', 'temperature'
        acted_at INTEGER NOT NULL,   -- unix seconds of the drain
        PRIMARY KEY (node, gpu, cause)
     ) WITHOUT ROWID;",
    // 7: GPUs a preemption freed for a waiting job, so that the next cycle (of this or another
    // accountd process) does not preempt again for the same wait before the job had time to start.
    "CREATE TABLE freed_for_waiters (
        waiter   TEXT    NOT NULL,   -- the pending job's ID
        gpu_type TEXT    NOT NULL,
        gpus     INTEGER NOT NULL,   -- GPUs preemptions freed for it
        at       INTEGER NOT NULL,   -- unix seconds of the latest such preemption
        expires  INTEGER NOT NULL,   -- unix seconds: forgotten after, it had its time to start
        PRIMARY KEY (waiter, gpu_type)
     ) WITHOUT ROWID;",
    // 8: notifications ([notify]). The level each user was last notified at, and each notification
    // owed (sent_at NULL) or sent: recorded before the command runs, marked sent after it succeeded,
    // so a restart neither repeats a sent one nor loses an owed one.
    "CREATE TABLE notify_levels (
        user  TEXT    PRIMARY KEY,
        level TEXT    NOT NULL,      -- 'ok', 'warned', 'overdraft', 'floor'
        at    INTEGER NOT NULL       -- unix seconds of the crossing
     ) WITHOUT ROWID;
     CREATE TABLE notifications (
        id         INTEGER PRIMARY KEY,
        user       TEXT    NOT NULL,
        event      TEXT    NOT NULL, -- 'warning', 'overdraft', 'floor', 'recovered', 'preempted'
        key        TEXT    UNIQUE,   -- 'preempted:<actions.id>': one per preemption action
        balance    INTEGER NOT NULL, -- micro-tokens when it was owed
        job_id     TEXT,
        message    TEXT    NOT NULL,
        owed_at    INTEGER NOT NULL,
        sent_at    INTEGER,          -- NULL while owed
        attempts   INTEGER NOT NULL DEFAULT 0,
        last_error TEXT
     );
     CREATE INDEX notifications_owed ON notifications (id) WHERE sent_at IS NULL;",
    // 9: charging progress keyed per run. From Slurm 25.11 every run of a job has its own SLUID (a
    // requeued job keeps its JobId): `run` is the SLUID where sacct/squeue give one, else
    // 'start:<segment_start>', the key before. Rows from before keep that key; the first record of
    // their run that carries a SLUID takes the row over (crates/accountd/src/cycles/charge.rs), so an upgrade of Slurm under
    // running jobs charges nothing twice.
    "CREATE TABLE job_charges_v9 (
        job_id        TEXT    NOT NULL,
        run           TEXT    NOT NULL,          -- the run's SLUID, else 'start:<segment_start>'
        segment_start INTEGER NOT NULL,          -- unix start of the run
        gpu_type      TEXT    NOT NULL,
        user          TEXT    NOT NULL,
        charged_until INTEGER NOT NULL,          -- seconds of the run already charged
        charged       INTEGER NOT NULL,          -- micro-tokens charged so far
        PRIMARY KEY (job_id, run, gpu_type)
     ) WITHOUT ROWID;
     INSERT INTO job_charges_v9
        SELECT job_id, 'start:' || segment_start, segment_start, gpu_type, user, charged_until, charged
        FROM job_charges;
     DROP TABLE job_charges;
     ALTER TABLE job_charges_v9 RENAME TO job_charges;",
    // 10: token pools of Slurm accounts ([accounts]). A pool's balance and entries are those of a row
    // of `users` named 'account <name>' (gputokens::pools::holder: no user name has a space), so
    // replenishment, history, statements and verification treat it like any balance. `pools` holds
    // its rules; a charge to a pool names the member whose job it was; what each member spent of a
    // pool per month is summed as it is charged (the per-user limit reads it).
    "CREATE TABLE pools (
        account    TEXT    PRIMARY KEY,
        initial    INTEGER NOT NULL,             -- micro-tokens, like every amount
        daily      INTEGER NOT NULL,
        monthly    INTEGER NOT NULL,
        cap        INTEGER,                      -- NULL: none
        floor      INTEGER NOT NULL,
        user_limit INTEGER,                      -- what one member may spend per month; NULL: no limit
        created    INTEGER NOT NULL
     ) WITHOUT ROWID;
     ALTER TABLE entries ADD COLUMN member TEXT;
     CREATE TABLE pool_member_months (
        account TEXT    NOT NULL,
        user    TEXT    NOT NULL,
        month   TEXT    NOT NULL,                -- local YYYY-MM
        charged INTEGER NOT NULL,                -- micro-tokens
        PRIMARY KEY (account, month, user)
     ) WITHOUT ROWID;
     -- What each balance (user or pool) paid for a job a pool paid for, so a refund goes back to
     -- whoever paid; a job without rows here was paid by its user alone (job_charges).
     CREATE TABLE job_payments (
        job_id  TEXT    NOT NULL,
        holder  TEXT    NOT NULL,                -- users.name: a user or 'account <name>'
        charged INTEGER NOT NULL,                -- micro-tokens
        PRIMARY KEY (job_id, holder)
     ) WITHOUT ROWID;",
    // 11: grants with an end date (`accountd admin grant ... --expires`). `unused` is what charges
    // have not drawn of it (they draw from a balance's open grants first, the soonest-ending first);
    // when it ends that much expires, as an adjustment entry named by `expired_entry` (0: nothing was
    // left). An open grant's user is warned once, some time before (`warned_at`).
    "CREATE TABLE grant_expiries (
        entry_id      INTEGER PRIMARY KEY,       -- the grant's entry
        user          TEXT    NOT NULL,          -- users.name: a user or a pool's holder
        amount        INTEGER NOT NULL,          -- micro-tokens granted
        unused        INTEGER NOT NULL,          -- micro-tokens no charge has drawn yet
        expires_at    INTEGER NOT NULL,          -- unix seconds
        warned_at     INTEGER,
        expired_entry INTEGER
     );
     CREATE INDEX grant_expiries_open ON grant_expiries (user, expires_at) WHERE expired_entry IS NULL;",
    // 12: idle GPUs in tokens. Of a job's utilization samples, how many fell in a stretch below
    // `[usage] idle_threshold_percent` that lasted `idle_window`: that share of its charges was spent
    // on idle GPUs (statements, the status page, notifications).
    // Refunds look up gputokens' fault actions on a job (`fault-requeue`, `fault-cancel`) for each
    // requeued or cancelled run a charge cycle reads: by job, not by scanning the audit trail.
    "ALTER TABLE job_utilization ADD COLUMN idle_samples INTEGER NOT NULL DEFAULT 0;
     CREATE INDEX actions_by_target ON actions (target, at);",
    // 13: runs charged under a SLUID, indexed apart (an index that stays empty on a site before Slurm
    // 25.11): a charge cycle asks once whether there are any, and where there are none and its
    // records carry no SLUID either, it expects each run without a charge row to be new instead of
    // looking its job up first (a run found charged already makes it read the job's rows after all).
    "CREATE INDEX job_charges_by_sluid ON job_charges (job_id) WHERE run < 'start:' OR run >= 'start;';",
    // 14: admins' changes not in the admin journal file yet, marked in the transaction that records
    // them (`journal.rs`): `what` is the JSON of `Journaled`, what the line says beyond the entry.
    "CREATE TABLE journal_outbox (
        entry_id INTEGER PRIMARY KEY,           -- entries.id
        what     TEXT    NOT NULL
     );",
    // 15: what each balance paid kept per run of a job (its start), so a refund of one run goes back
    // to whoever paid for that run: a job ID Slurm used again (MaxJobId wrapped, its state reset)
    // no longer shares a refund with the old job's payers (the audit's L2). Rows from before keep
    // what they summed for all runs of their job, under run_start -1.
    "CREATE TABLE job_payments_v15 (
        job_id    TEXT    NOT NULL,
        run_start INTEGER NOT NULL,              -- job_charges.segment_start; -1: every run before
        holder    TEXT    NOT NULL,
        charged   INTEGER NOT NULL,
        PRIMARY KEY (job_id, run_start, holder)
     ) WITHOUT ROWID;
     INSERT INTO job_payments_v15 SELECT job_id, -1, holder, charged FROM job_payments;
     DROP TABLE job_payments;
     ALTER TABLE job_payments_v15 RENAME TO job_payments;",
    // 16: GPU energy per job run, from NVML's energy counters in node agents' reports (accountd's
    // `utilization::energy` splits each GPU's energy between its jobs). A run is a stretch of one
    // node's reports that all carry the job, `since` the first of them (a requeued job, or a job ID
    // Slurm used again, begins another); its energy is summed per local day, so a month's statement
    // takes the days of its month.
    "CREATE TABLE job_energy (
        job_id  TEXT    NOT NULL,
        since   INTEGER NOT NULL,               -- unix seconds: the run's first report on this node
        node    TEXT    NOT NULL,
        day     TEXT    NOT NULL,               -- local date, YYYY-MM-DD
        joules  INTEGER NOT NULL,
        last_at INTEGER NOT NULL,               -- unix seconds of the latest report counted
        PRIMARY KEY (job_id, since, node, day)
     ) WITHOUT ROWID;
     CREATE INDEX job_energy_by_day ON job_energy (day);",
    // 17: which run of a job a hold action was on (squeue's restart_cnt). A requeued run's
    // submit_time is set only when its epilog ends, so a hold taken before that is older than the
    // run's submit_time: keyed by the run, it is still this run's after an admin's release.
    "ALTER TABLE actions ADD COLUMN run INTEGER;  -- NULL: not on one run of a job (or before 17)",
    // 18: GPU energy priced (`[prices] per_kwh`). How many of a job_energy row's joules were
    // charged (or passed over while energy was not priced: every row from before 18 is); what a
    // run's energy cost, kept beside what its GPU time cost (job_charges.charged), so refunds,
    // payments and `admin verify` count both. Rows with joules left to charge are indexed apart.
    "ALTER TABLE job_energy ADD COLUMN charged_joules INTEGER NOT NULL DEFAULT 0;
     UPDATE job_energy SET charged_joules = joules;
     CREATE INDEX job_energy_uncharged ON job_energy (job_id) WHERE joules > charged_joules;
     ALTER TABLE job_charges ADD COLUMN energy_charged INTEGER NOT NULL DEFAULT 0;  -- micro-tokens",
    // 19: utilization samples per run of a job (`since`: when accountd first saw the run in a
    // report), so a requeued job's idle first run does not dilute its second; rows from before 19
    // belong to no run (0) and weigh no run's charge (it pays its allocation, never less).
    "CREATE TABLE job_utilization_v19 (
        job_id       TEXT    NOT NULL,
        since        INTEGER NOT NULL,           -- unix seconds: the run's first sample
        samples      INTEGER NOT NULL,
        util_sum     REAL    NOT NULL,
        last_at      INTEGER NOT NULL,
        idle_samples INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (job_id, since)
     ) WITHOUT ROWID;
     INSERT INTO job_utilization_v19 SELECT job_id, 0, samples, util_sum, last_at, idle_samples FROM job_utilization;
     DROP TABLE job_utilization;
     ALTER TABLE job_utilization_v19 RENAME TO job_utilization;",
    // 20: nested pools. A pool may draw on a parent pool (its charges count there too, and the
    // parent's floor and limits hold for its jobs); a parent may lend to the pools drawing on it; a
    // dated sub-allocation is a pool open from `starts` until `ends`.
    "ALTER TABLE pools ADD COLUMN parent TEXT;          -- the account whose pool it draws on
     ALTER TABLE pools ADD COLUMN lends INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE pools ADD COLUMN starts INTEGER;       -- unix seconds; NULL: always open
     ALTER TABLE pools ADD COLUMN ends INTEGER;",
    // 21: runs of GPU jobs whose payer was in debt when they started ([lending]): idle GPUs lent,
    // requeued when a user in credit waits, free when reclaimed. A run judged once, either way.
    "CREATE TABLE IF NOT EXISTS borrowed_runs (
        job_id        TEXT    NOT NULL,
        run_start     INTEGER NOT NULL,
        borrowed      INTEGER NOT NULL,          -- 0: its payer was not in debt when it started
        payer         TEXT    NOT NULL,          -- the balance in debt (a user, or `account <name>`)
        judged_at     INTEGER NOT NULL,
        reclaimed_for TEXT,                      -- the waiting jobs it was requeued for
        reclaimed_at  INTEGER,
        PRIMARY KEY (job_id, run_start)
     ) WITHOUT ROWID;
     CREATE INDEX IF NOT EXISTS borrowed_runs_by_payer ON borrowed_runs (payer, judged_at);",
    // 22: whether any run is keyed by a SLUID is a flag (`sluid_runs` in meta), set in the
    // transaction that first charges one: a charge cycle asks it once, and keeps no index of the
    // runs' keys for it (on a site whose Slurm gives SLUIDs every run's row was in that index, an
    // insert more per charge; on MariaDB, where an index cannot leave rows out, on every site).
    "INSERT OR IGNORE INTO meta (key, value)
        SELECT 'sluid_runs', '1'
        WHERE EXISTS (SELECT 1 FROM job_charges INDEXED BY job_charges_by_sluid WHERE run < 'start:' OR run >= 'start;');
     DROP INDEX IF EXISTS job_charges_by_sluid;",
    // 23: the entries' idempotency keys are read through `entry_keys (key, entry_id)` on both
    // backends (`entry_keys.rs`): here a view of the partial index; MariaDB, which cannot leave
    // the unkeyed entries out of an index, keeps a table of the keys instead.
    "CREATE VIEW IF NOT EXISTS entry_keys AS SELECT key, id AS entry_id FROM entries WHERE key IS NOT NULL;",
];

pub const VERSION: i64 = MIGRATIONS.len() as i64;

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("ledger schema version {found} is newer than this gputokens understands ({VERSION}); upgrade gputokens")]
    TooNew { found: i64 },
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Db(#[from] crate::db::Error),
}

/// Brings the schema to [`VERSION`], one transaction per step.
pub fn migrate(conn: &mut Connection) -> Result<(), SchemaError> {
    migrate_to(conn, VERSION)
}

/// Brings the schema to `target` (tests build older ledgers with it).
pub(super) fn migrate_to(conn: &mut Connection, target: i64) -> Result<(), SchemaError> {
    let current: i64 = conn.query_row("PRAGMA user_version", (), |r| r.get(0))?;
    if current > VERSION {
        return Err(SchemaError::TooNew { found: current });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().take(target as usize).skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index as i64 + 1)?;
        tx.commit()?;
    }
    Ok(())
}
