//! The ledger's tables on MariaDB: the schema SQLite reaches through its migrations
//! ([`super::MIGRATIONS`]), made at once at version [`MADE_AT`], then brought up by [`UPGRADES`]. A
//! later migration is written for both: appended there, and here to [`UPGRADES`]. The version is kept
//! in `ledger_schema`; MariaDB's writers take turns on the `write_turn` row, and only on the version
//! they write ([`crate::db`]).
//!
//! Names are compared byte for byte (utf8mb4_bin), as SQLite does. Text a key is made of has a
//! length (VARCHAR); MariaDB refuses a longer value rather than cutting it (strict mode).
//! SQLite's partial indexes are whole indexes here (MariaDB indexes NULLs), or, where that costs every
//! insert, a table of their own (`entry_keys`).

use crate::db::{Connection, Result};

/// Each table as SQLite's schema of version [`MADE_AT`] has it.
const TABLES: &str = "
CREATE TABLE entries (
    id          BIGINT       NOT NULL PRIMARY KEY,
    user        VARCHAR(255) NOT NULL,
    kind        VARCHAR(16)  NOT NULL CHECK (kind IN ('grant','replenish','monthly','charge','refund','adjust','import')),
    amount      BIGINT       NOT NULL,
    at          BIGINT       NOT NULL,
    actor       VARCHAR(255) NOT NULL,
    reason      TEXT         NOT NULL,
    key         VARCHAR(768),
    job_id      VARCHAR(128),
    gpu_type    VARCHAR(128),
    gpu_seconds BIGINT,
    prev_id     BIGINT,
    member      VARCHAR(255),
    UNIQUE KEY entries_by_key (key)
);
CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledger entries are append-only';
CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledger entries are append-only';
CREATE TABLE users (
    name                VARCHAR(255) NOT NULL PRIMARY KEY,
    first_seen          BIGINT       NOT NULL,
    balance             BIGINT       NOT NULL,
    replenished_through VARCHAR(10)  NOT NULL,
    last_entry          BIGINT
);
CREATE TABLE job_charges (
    job_id         VARCHAR(128) NOT NULL,
    run            VARCHAR(128) NOT NULL,
    segment_start  BIGINT       NOT NULL,
    gpu_type       VARCHAR(128) NOT NULL,
    user           VARCHAR(255) NOT NULL,
    charged_until  BIGINT       NOT NULL,
    charged        BIGINT       NOT NULL,
    energy_charged BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, run, gpu_type),
    KEY job_charges_by_run (run)
);
CREATE TABLE meta (
    key   VARCHAR(255) NOT NULL PRIMARY KEY,
    value TEXT         NOT NULL
);
CREATE TABLE job_utilization (
    job_id       VARCHAR(128) NOT NULL,
    since        BIGINT       NOT NULL,
    samples      BIGINT       NOT NULL,
    util_sum     DOUBLE       NOT NULL,
    last_at      BIGINT       NOT NULL,
    idle_samples BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, since)
);
CREATE TABLE actions (
    id      BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at      BIGINT       NOT NULL,
    action  VARCHAR(64)  NOT NULL,
    target  VARCHAR(255) NOT NULL,
    user    VARCHAR(255) NOT NULL,
    reason  TEXT         NOT NULL,
    dry_run BIGINT       NOT NULL,
    run     BIGINT,
    KEY actions_by_target (target, at)
);
CREATE TABLE usage_days (
    user     VARCHAR(255) NOT NULL,
    day      VARCHAR(10)  NOT NULL,
    gpu_type VARCHAR(128) NOT NULL,
    charged  BIGINT       NOT NULL,
    PRIMARY KEY (user, day, gpu_type)
);
CREATE TABLE gpu_faults (
    node     VARCHAR(255) NOT NULL,
    gpu      VARCHAR(128) NOT NULL,
    cause    VARCHAR(64)  NOT NULL,
    acted_at BIGINT       NOT NULL,
    PRIMARY KEY (node, gpu, cause)
);
CREATE TABLE freed_for_waiters (
    waiter   VARCHAR(128) NOT NULL,
    gpu_type VARCHAR(128) NOT NULL,
    gpus     BIGINT       NOT NULL,
    at       BIGINT       NOT NULL,
    expires  BIGINT       NOT NULL,
    PRIMARY KEY (waiter, gpu_type)
);
CREATE TABLE notify_levels (
    user  VARCHAR(255) NOT NULL PRIMARY KEY,
    level VARCHAR(16)  NOT NULL,
    at    BIGINT       NOT NULL
);
CREATE TABLE notifications (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user       VARCHAR(255) NOT NULL,
    event      VARCHAR(32)  NOT NULL,
    key        VARCHAR(255),
    balance    BIGINT       NOT NULL,
    job_id     VARCHAR(128),
    message    TEXT         NOT NULL,
    owed_at    BIGINT       NOT NULL,
    sent_at    BIGINT,
    attempts   BIGINT       NOT NULL DEFAULT 0,
    last_error TEXT,
    UNIQUE KEY notifications_by_key (key),
    KEY notifications_owed (sent_at, id)
);
CREATE TABLE pools (
    account    VARCHAR(255) NOT NULL PRIMARY KEY,
    initial    BIGINT       NOT NULL,
    daily      BIGINT       NOT NULL,
    monthly    BIGINT       NOT NULL,
    cap        BIGINT,
    floor      BIGINT       NOT NULL,
    user_limit BIGINT,
    created    BIGINT       NOT NULL
);
CREATE TABLE pool_member_months (
    account VARCHAR(255) NOT NULL,
    user    VARCHAR(255) NOT NULL,
    month   VARCHAR(7)   NOT NULL,
    charged BIGINT       NOT NULL,
    PRIMARY KEY (account, month, user)
);
CREATE TABLE job_payments (
    job_id    VARCHAR(128) NOT NULL,
    run_start BIGINT       NOT NULL,
    holder    VARCHAR(255) NOT NULL,
    charged   BIGINT       NOT NULL,
    PRIMARY KEY (job_id, run_start, holder)
);
CREATE TABLE grant_expiries (
    entry_id      BIGINT       NOT NULL PRIMARY KEY,
    user          VARCHAR(255) NOT NULL,
    amount        BIGINT       NOT NULL,
    unused        BIGINT       NOT NULL,
    expires_at    BIGINT       NOT NULL,
    warned_at     BIGINT,
    expired_entry BIGINT,
    KEY grant_expiries_open (user, expires_at)
);
CREATE TABLE journal_outbox (
    entry_id BIGINT NOT NULL PRIMARY KEY,
    what     TEXT   NOT NULL
);
CREATE TABLE job_energy (
    job_id         VARCHAR(128) NOT NULL,
    since          BIGINT       NOT NULL,
    node           VARCHAR(255) NOT NULL,
    day            VARCHAR(10)  NOT NULL,
    joules         BIGINT       NOT NULL,
    last_at        BIGINT       NOT NULL,
    charged_joules BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, since, node, day),
    KEY job_energy_by_day (day),
    KEY job_energy_uncharged (job_id)
);
CREATE TABLE write_turn (
    id    TINYINT NOT NULL PRIMARY KEY,
    turns BIGINT  NOT NULL
);
INSERT INTO write_turn VALUES (1, 0);
";

/// The lease one accountd of a pair holds while it runs the cycles; `expires_ms` on the database's
/// clock, so the hosts' clocks never matter. A ledger several clusters share has one per cluster
/// (`cluster_lease`, a row made by its first claim).
const LEASE: &str = "
CREATE TABLE IF NOT EXISTS leader_lease (
    id         TINYINT      NOT NULL PRIMARY KEY,
    holder     VARCHAR(255) NOT NULL,
    term       BIGINT       NOT NULL,
    expires_ms BIGINT       NOT NULL
);
INSERT IGNORE INTO leader_lease VALUES (1, '', 0, 0);
CREATE TABLE IF NOT EXISTS cluster_lease (
    cluster    VARCHAR(64)  NOT NULL PRIMARY KEY,
    holder     VARCHAR(255) NOT NULL,
    term       BIGINT       NOT NULL,
    expires_ms BIGINT       NOT NULL
);
";

/// Migrations past the version [`TABLES`] makes, as SQLite's past it: (version it brings, SQL).
const UPGRADES: &[(i64, &str)] = &[
    (
        20,
        "ALTER TABLE pools ADD COLUMN IF NOT EXISTS parent VARCHAR(255),
                       ADD COLUMN IF NOT EXISTS lends BIGINT NOT NULL DEFAULT 0,
                       ADD COLUMN IF NOT EXISTS starts BIGINT,
                       ADD COLUMN IF NOT EXISTS ends BIGINT;",
    ),
    (
        21,
        "CREATE TABLE borrowed_runs (
    job_id        VARCHAR(128) NOT NULL,
    run_start     BIGINT       NOT NULL,
    borrowed      BIGINT       NOT NULL,
    payer         VARCHAR(255) NOT NULL,
    judged_at     BIGINT       NOT NULL,
    reclaimed_for TEXT,
    reclaimed_at  BIGINT,
    PRIMARY KEY (job_id, run_start),
    KEY borrowed_runs_by_payer (payer, judged_at)
);",
    ),
    (
        22,
        "INSERT IGNORE INTO meta SELECT 'sluid_runs', '1' FROM DUAL
    WHERE EXISTS (SELECT 1 FROM job_charges WHERE run < 'start:' OR run >= 'start;');
DROP INDEX IF EXISTS job_charges_by_run ON job_charges;",
    ),
    (
        23,
        // IGNORE: a step cut short after its insert (DDL commits as it goes) is run again whole.
        "CREATE TABLE IF NOT EXISTS entry_keys (
    key      VARCHAR(768) NOT NULL PRIMARY KEY,
    entry_id BIGINT       NOT NULL
);
INSERT IGNORE INTO entry_keys (key, entry_id) SELECT key, id FROM entries WHERE key IS NOT NULL;
DROP INDEX IF EXISTS entries_by_key ON entries;",
    ),
];

/// The version [`TABLES`] makes.
const MADE_AT: i64 = 19;

/// The schema version of the ledger in the database; None where it holds none.
pub fn existing_version(conn: &Connection) -> Result<Option<i64>, super::SchemaError> {
    let has_table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'ledger_schema')",
        (),
        |r| r.get(0),
    )?;
    if !has_table {
        return Ok(None);
    }
    Ok(conn
        .prepare("SELECT version FROM ledger_schema WHERE id = 1")?
        .query_map((), |r| r.get(0))?
        .next()
        .transpose()?)
}

/// Makes the tables if the database has none, and brings them to [`super::VERSION`].
pub fn migrate(conn: &Connection) -> Result<(), super::SchemaError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS ledger_schema (id TINYINT NOT NULL PRIMARY KEY, version BIGINT NOT NULL)",
    )?;
    let found: Option<i64> = conn
        .prepare("SELECT version FROM ledger_schema WHERE id = 1")?
        .query_map((), |r| r.get(0))?
        .next()
        .transpose()?;
    let mut version = match found {
        Some(v) if v > super::VERSION => return Err(super::SchemaError::TooNew { found: v }),
        Some(v) => v,
        None => {
            // DDL commits as it goes in MariaDB: the version row is written last, so a creation
            // cut off half-way is seen as none, and made again (each statement can be).
            conn.execute_batch(&table_options(TABLES))?;
            conn.execute("INSERT INTO ledger_schema VALUES (1, ?1)", [MADE_AT])?;
            MADE_AT
        }
    };
    for (target, sql) in UPGRADES {
        if *target > version {
            conn.execute_batch(&table_options(sql))?;
            conn.execute("UPDATE ledger_schema SET version = ?1 WHERE id = 1", [*target])?;
            version = *target;
        }
    }
    // Who leads a pair of accountd on this ledger (`crate::lease`): a database's, not the ledger's.
    conn.execute_batch(&table_options(LEASE))?;
    Ok(())
}

/// Every table InnoDB, its text compared byte for byte; each statement one that can be made
/// again (a first creation cut off half-way, by a missing privilege, resumes where it stopped).
fn table_options(sql: &str) -> String {
    sql.replace("\n);", "\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;")
        .replace("CREATE TABLE IF NOT EXISTS ", "CREATE TABLE ")
        .replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
        .replace("CREATE TRIGGER ", "CREATE OR REPLACE TRIGGER ")
        .replace("INSERT INTO write_turn ", "INSERT IGNORE INTO write_turn ")
}

const _: () = assert!(MADE_AT <= super::VERSION);
