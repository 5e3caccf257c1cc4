//! What the ledger's database calls fail with, and the values they move: shared by both databases'
//! modules.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("MariaDB: {}", maria_text(.0))]
    Maria(#[from] mysql::Error),
    #[error("cannot connect to MariaDB at {shown}: {}", maria_text(.source))]
    MariaConnect { shown: String, source: mysql::Error },
    #[error("MariaDB: column {index}: {why}")]
    MariaValue { index: usize, why: String },
    #[error("query returned no rows")]
    NoRows,
    #[error("{0} does not hold the ledger's lease (another accountd leads): nothing was written")]
    Fenced(String),
    #[error(
        "the ledger's schema is {} and this accountd writes schema {known}: a newer accountd upgraded it; \
         nothing was written (upgrade this host's gputokens and restart it)",
        found.map_or("unknown".to_string(), |v| v.to_string())
    )]
    SchemaChanged { found: Option<i64>, known: i64 },
    #[error("{0}")]
    Unsupported(&'static str),
}

impl Error {
    /// A row refused for a key or constraint it breaks (a run charged twice, a key reused).
    pub fn is_constraint_violation(&self) -> bool {
        match self {
            Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => e.code == rusqlite::ErrorCode::ConstraintViolation,
            // 1062 duplicate entry, 1452 foreign key, 4025 CHECK constraint.
            Error::Maria(mysql::Error::MySqlError(e)) => matches!(e.code, 1062 | 1452 | 4025),
            _ => false,
        }
    }

    /// Another writer held the database past the wait, or a Galera node refused the transaction
    /// for one certified first: the same work done again goes through.
    pub fn is_busy(&self) -> bool {
        match self {
            Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => e.code == rusqlite::ErrorCode::DatabaseBusy,
            // 1205 lock wait timeout, 1213 deadlock (and Galera's certification failure).
            Error::Maria(mysql::Error::MySqlError(e)) => matches!(e.code, 1205 | 1213),
            _ => false,
        }
    }
}

/// MariaDB's own message (`ERROR 1045 (28000): Access denied …`), not the client's debug form.
fn maria_text(e: &mysql::Error) -> String {
    match e {
        mysql::Error::MySqlError(e) => format!("ERROR {} ({}): {}", e.code, e.state, e.message),
        other => other.to_string(),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any column's value, as either database gives it (a copy between them moves these).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}
