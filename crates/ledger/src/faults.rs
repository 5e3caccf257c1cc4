//! GPU faults a node was drained for (table `gpu_faults`): what lets a restarted accountd tell a fault
//! it already acted on from a new one. Small: a row per GPU and cause, written only when a node is
//! drained or a fault clears, never per report.

use crate::db::params;

use super::{Ledger, LedgerError};

/// One fault acted on: `gpu` is the GPU's UUID (`index N` without one), `cause` e.g. `xid 79`, `ecc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFault {
    pub node: String,
    pub gpu: String,
    pub cause: String,
    /// When the node was drained for it (unix seconds).
    pub acted_at: i64,
}

impl Ledger {
    /// The faults of `node` acted on and not cleared.
    pub fn gpu_faults(&self, node: &str) -> Result<Vec<GpuFault>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT node, gpu, cause, acted_at FROM gpu_faults WHERE node = ?1 ORDER BY gpu, cause")?;
        let rows = stmt.query_map([node], |r| {
            Ok(GpuFault { node: r.get(0)?, gpu: r.get(1)?, cause: r.get(2)?, acted_at: r.get(3)? })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every fault acted on and not cleared, newest first (the admins' status page).
    pub fn all_gpu_faults(&self) -> Result<Vec<GpuFault>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT node, gpu, cause, acted_at FROM gpu_faults ORDER BY acted_at DESC, node, gpu")?;
        let rows = stmt.query_map((), |r| {
            Ok(GpuFault { node: r.get(0)?, gpu: r.get(1)?, cause: r.get(2)?, acted_at: r.get(3)? })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records that the node was drained for `fault` (again, when a fault of the same GPU and cause was
    /// recorded before: the newer drain replaces it).
    pub fn record_gpu_fault(&mut self, fault: &GpuFault) -> Result<(), LedgerError> {
        self.conn.execute(
            self.conn.dialect().pick(
                "INSERT INTO gpu_faults (node, gpu, cause, acted_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (node, gpu, cause) DO UPDATE SET acted_at = excluded.acted_at",
                "INSERT INTO gpu_faults (node, gpu, cause, acted_at) VALUES (?1, ?2, ?3, ?4)
                 ON DUPLICATE KEY UPDATE acted_at = VALUES(acted_at)",
            ),
            params![fault.node, fault.gpu, fault.cause, fault.acted_at],
        )?;
        Ok(())
    }

    /// Forgets a fault that has cleared; true when one was recorded.
    pub fn clear_gpu_fault(&mut self, node: &str, gpu: &str, cause: &str) -> Result<bool, LedgerError> {
        let removed = self
            .conn
            .execute("DELETE FROM gpu_faults WHERE node = ?1 AND gpu = ?2 AND cause = ?3", params![node, gpu, cause])?;
        Ok(removed > 0)
    }
}
