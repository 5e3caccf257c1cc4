//! Which accountd of a pair leads: a lease in the database, renewed every few seconds by its
//! holder and taken by the other when it lapses, on the database's clock. The leader runs the
//! cycles; its cycles' transactions are fenced by the lease ([`Ledger::fence_with_lease`]), so one
//! that lost it writes nothing. A SQLite ledger has one host: its accountd always leads.

use std::time::Duration;

use crate::db::lease_row::{lease_row, NOW_MS};
use crate::db::Dialect;
use crate::{Ledger, LedgerError};

/// The lease as the database holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Who holds it (`host:pid`), "" before anyone did.
    pub holder: String,
    /// Counted up each time another holder takes it.
    pub term: i64,
    /// Milliseconds it still runs (negative: lapsed).
    pub left_ms: i64,
}

impl Lease {
    pub fn held_by(&self, me: &str) -> bool {
        self.holder == me && self.left_ms > 0
    }
}

impl Ledger {
    /// The lease this ledger's accountd leads under: `cluster`'s (`[clusters] local`), "" for a
    /// ledger of one cluster.
    pub fn lead_for_cluster(&mut self, cluster: &str) {
        self.lease_name = cluster.to_owned();
    }

    /// Takes or renews the lease for `me` for `ttl`, unless another holds it and it has not lapsed;
    /// returns the lease as it is after.
    pub fn claim_lease(&mut self, me: &str, ttl: Duration) -> Result<Lease, LedgerError> {
        if self.conn.dialect() == Dialect::Sqlite {
            return Ok(Lease { holder: me.to_owned(), term: 1, left_ms: i64::MAX });
        }
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let (table, row) = lease_row(&self.lease_name, "?3");
        if table == "cluster_lease" {
            self.conn.execute("INSERT IGNORE INTO cluster_lease VALUES (?1, '', 0, 0)", [&self.lease_name])?;
        }
        // MariaDB assigns in order: the term reads the holder before it changes. Only on the schema
        // this build writes: one left running after a newer accountd upgraded the ledger, which could
        // write nothing more, lets the lease lapse to it.
        let on_schema = self.conn.and_on_written_schema();
        debug_assert!(!on_schema.is_empty(), "a MariaDB ledger is opened knowing the schema it writes");
        self.conn.execute(
            &format!(
                "UPDATE {table} SET term = CASE WHEN holder = ?1 THEN term ELSE term + 1 END,
                                    holder = ?1, expires_ms = {NOW_MS} + ?2
                 WHERE {row} AND (holder = ?1 OR expires_ms < {NOW_MS}){on_schema}"
            ),
            crate::db::params![me, ttl, &self.lease_name],
        )?;
        self.lease()
    }

    /// The lease as it is now (one never taken: held by no one, lapsed).
    pub fn lease(&self) -> Result<Lease, LedgerError> {
        if self.conn.dialect() == Dialect::Sqlite {
            return Ok(Lease { holder: String::new(), term: 0, left_ms: i64::MAX });
        }
        let (table, row) = lease_row(&self.lease_name, "?1");
        let found = self.conn.query_row(
            &format!("SELECT holder, term, expires_ms - {NOW_MS} FROM {table} WHERE {row}"),
            [&self.lease_name],
            |r| Ok(Lease { holder: r.get(0)?, term: r.get(1)?, left_ms: r.get(2)? }),
        );
        match found {
            Err(crate::db::Error::NoRows) => Ok(Lease { holder: String::new(), term: 0, left_ms: -1 }),
            found => Ok(found?),
        }
    }

    /// Gives the lease up (a serve that stops), so the other takes it at once.
    pub fn release_lease(&mut self, me: &str) -> Result<(), LedgerError> {
        if self.conn.dialect() == Dialect::MariaDb {
            let (table, row) = lease_row(&self.lease_name, "?2");
            self.conn.execute(
                &format!("UPDATE {table} SET expires_ms = 0 WHERE {row} AND holder = ?1"),
                crate::db::params![me, &self.lease_name],
            )?;
        }
        Ok(())
    }

    /// From now on every transaction of this connection that writes begins by checking that `me`
    /// holds the lease, and fails ([`crate::db::Error::Fenced`]) if it does not: the cycles' writes
    /// of an accountd that lost the lease (paused, cut off) are never made.
    pub fn fence_with_lease(&mut self, me: &str) {
        self.conn.fence(me, &self.lease_name);
    }

    /// The newest entry's id: what the leader compares to know that someone (the other accountd
    /// too) changed a balance since it last wrote the snapshot.
    pub fn newest_entry(&self) -> Result<i64, LedgerError> {
        Ok(self.conn.query_row("SELECT COALESCE(MAX(id), 0) FROM entries", (), |r| r.get(0))?)
    }
}
