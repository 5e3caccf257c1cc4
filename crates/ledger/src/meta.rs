//! Small named values kept beside the entries (table `meta`), e.g. how far sacct has been read.

use crate::db::{params, OptionalExtension};

use super::{Ledger, LedgerError};

impl Ledger {
    /// A named value kept beside the entries (e.g. `sacct_read_until`).
    pub fn meta(&self, key: &str) -> Result<Option<String>, LedgerError> {
        Ok(self.conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional()?)
    }

    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), LedgerError> {
        self.conn.execute(
            self.conn.dialect().pick(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON DUPLICATE KEY UPDATE value = VALUES(value)",
            ),
            params![key, value],
        )?;
        Ok(())
    }
}
