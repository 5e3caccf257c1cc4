//! Where a lease is kept in the database: shared by the lease's own statements
//! ([`crate::lease`]) and the fence every write transaction of a leader checks first; and the
//! schema condition a writer writes under.

/// ` AND` the condition that holds while the ledger's schema is `version`, where a writer writes
/// only on one (its write turn, its lease claims); nothing where it does not.
pub(crate) fn and_on_schema(version: Option<i64>) -> String {
    match version {
        Some(version) => format!(" AND (SELECT version FROM ledger_schema WHERE id = 1) = {version}"),
        None => String::new(),
    }
}

/// The database's clock in milliseconds.
pub(crate) const NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

/// Where the lease named `cluster` is kept, and the condition that finds it with `param` bound to
/// the name: a ledger of one cluster ("") in `leader_lease` row 1, where every accountd before
/// `[clusters]` kept it; each cluster of a shared ledger in its own row of `cluster_lease`, so each
/// cluster's pair leads that cluster's cycles.
pub(crate) fn lease_row(cluster: &str, param: &str) -> (&'static str, String) {
    match cluster.is_empty() {
        true => ("leader_lease", format!("id = 1 AND {param} = ''")),
        false => ("cluster_lease", format!("cluster = {param}")),
    }
}
