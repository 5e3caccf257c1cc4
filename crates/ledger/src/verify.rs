//! `accountd admin verify`: the ledger's invariants, checked from its own tables. Each holds by
//! construction (same transaction); a broken one means the file was edited, restored in pieces or
//! damaged, and says where.

use crate::db::{params, Dialect};

use super::{Ledger, LedgerError};
use gputokens::tokens::Tokens;

/// What a verification looked at and what it found wrong (empty: all invariants hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    pub users: usize,
    pub entries: usize,
    pub problems: Vec<String>,
}

impl Ledger {
    pub fn verify(&self) -> Result<Verification, LedgerError> {
        let conn = &self.conn;
        let mut problems = Vec::new();
        problems.extend(integrity_problems(conn)?);
        let users: usize = conn.query_row("SELECT COUNT(*) FROM users", (), |r| r.get(0))?;
        let entries: usize = conn.query_row("SELECT COUNT(*) FROM entries", (), |r| r.get(0))?;
        let unlisted = crate::entry_keys::mismatches(conn)?;
        if unlisted > 0 {
            problems.push(format!("idempotency keys that entries and entry_keys disagree on: {unlisted}"));
        }

        // One row per user known to either table: balance, sum of entries, entries, entries on the
        // chain, charges, job_payments (or job_charges: GPU time and energy), usage_days.
        let mut stmt = conn.prepare(
            "WITH RECURSIVE
               walk(user, id) AS (
                 SELECT name, last_entry FROM users WHERE last_entry IS NOT NULL
                 UNION ALL
                 SELECT w.user, e.prev_id FROM walk w CROSS JOIN entries e ON e.id = w.id
                 WHERE e.prev_id IS NOT NULL AND e.prev_id < e.id AND e.user = w.user),
               chained AS (
                 SELECT w.user, COUNT(*) AS n FROM walk w CROSS JOIN entries e ON e.id = w.id
                 WHERE e.user = w.user GROUP BY w.user),
               sums AS (
                 SELECT user, SUM(amount) AS total, COUNT(*) AS n,
                        -SUM(CASE WHEN kind = 'charge' THEN amount ELSE 0 END) AS charged
                 FROM entries GROUP BY user),
               paid AS (SELECT holder AS user, charged FROM job_payments
                      UNION ALL
                      SELECT user, charged + energy_charged FROM job_charges c
                      WHERE NOT EXISTS (SELECT 1 FROM job_payments p
                                        WHERE p.job_id = c.job_id AND p.run_start IN (c.segment_start, -1))),
               progress AS (SELECT user, SUM(charged) AS charged FROM paid GROUP BY user),
               used AS (SELECT user, SUM(charged) AS charged FROM usage_days GROUP BY user),
               names AS (SELECT name AS user FROM users UNION SELECT user FROM entries)
             SELECT names.user, u.balance, COALESCE(s.total, 0), COALESCE(s.n, 0), COALESCE(c.n, 0),
                    COALESCE(s.charged, 0), COALESCE(p.charged, 0), COALESCE(g.charged, 0)
             FROM names
             LEFT JOIN users u ON u.name = names.user
             LEFT JOIN sums s ON s.user = names.user
             LEFT JOIN chained c ON c.user = names.user
             LEFT JOIN progress p ON p.user = names.user
             LEFT JOIN used g ON g.user = names.user
             ORDER BY names.user",
        )?;
        let rows = stmt.query_map(params![], |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<Option<i64>>(1)?,
                r.get::<i64>(2)?,
                r.get::<i64>(3)?,
                r.get::<i64>(4)?,
                r.get::<i64>(5)?,
                r.get::<i64>(6)?,
                r.get::<i64>(7)?,
            ))
        })?;
        let t = Tokens::from_micro;
        for row in rows {
            let (user, balance, total, n, chained, charged, progress, usage) = row?;
            let Some(balance) = balance else {
                problems.push(format!("{user}: {n} entries but no row in users"));
                continue;
            };
            if balance != total {
                problems.push(format!("{user}: balance {} but the entries add up to {}", t(balance), t(total)));
            }
            if chained != n {
                problems.push(format!("{user}: {n} entries but {chained} reachable from the newest (prev_id chain)"));
            }
            if progress != charged {
                problems.push(format!(
                    "{user}: charge entries total {} but job_charges/job_payments {}",
                    t(charged),
                    t(progress)
                ));
            }
            if usage != charged {
                problems.push(format!("{user}: charge entries total {} but usage_days {}", t(charged), t(usage)));
            }
        }
        Ok(Verification { users, entries, problems })
    }
}

/// What the database's own check finds wrong with the ledger's storage.
fn integrity_problems(conn: &crate::db::Connection) -> Result<Vec<String>, LedgerError> {
    Ok(match conn.dialect() {
        Dialect::Sqlite => {
            let lines: Vec<String> =
                conn.prepare("PRAGMA integrity_check")?.query_map((), |r| r.get(0))?.collect::<Result<_, _>>()?;
            match lines == ["ok"] {
                true => Vec::new(),
                false => lines.into_iter().map(|line| format!("SQLite integrity check: {line}")).collect(),
            }
        }
        // A row per table; an error or a status other than OK is a damaged table.
        Dialect::MariaDb => conn
            .prepare(
                "CHECK TABLE entries, entry_keys, users, job_charges, job_payments, usage_days, pools, grant_expiries",
            )?
            .query_map((), |r| Ok((r.get::<String>(0)?, r.get::<String>(2)?, r.get::<String>(3)?)))?
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|(_, kind, text)| kind == "error" || (kind == "status" && text != "OK"))
            .map(|(table, _, text)| format!("MariaDB CHECK TABLE {table}: {text}"))
            .collect(),
    })
}
