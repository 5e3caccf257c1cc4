//! The one place that knows which database holds the ledger: SQLite (embedded, the default) or a
//! site's MariaDB. Its types mirror rusqlite's (`Connection`, `Transaction`, `Statement`, `Row`,
//! `params!`), so every ledger module writes its SQL once, in SQLite's spelling with `?N`
//! parameters; [`maria`] rewrites that spelling for MariaDB. What the two spell too differently
//! (upserts) is written for each, chosen by [`Connection::dialect`].

mod error;
pub(crate) mod lease_row;
mod maria;
mod params;

use std::cell::RefCell;
use std::ops::Deref;

pub use error::{Error, Result, Value};
pub(crate) use maria::IDLE_WRITE_LIMIT;
pub use maria::{MariaTarget, MariaUrlError};
pub use params::{Params, ToSql};
pub use rusqlite::params;
pub use rusqlite::types::Null;

/// The sizes a statement of many rows or names is written in: a few fixed ones, so that a
/// connection prepares each once (MariaDB parses each on the server, and keeps each statement
/// prepared) however many rows or names a cycle has.
const STATEMENT_SIZES: [usize; 6] = [1024, 256, 64, 16, 4, 1];

/// The least fixed statement size that holds `n` names (at most the largest): an `IN (…)` list is
/// padded with NULLs to it, which match nothing.
pub fn padded(n: usize) -> usize {
    STATEMENT_SIZES.iter().rev().copied().find(|&size| size >= n).unwrap_or(STATEMENT_SIZES[0])
}

/// `n` rows in fixed statement sizes, the largest first: 1,300 rows are 1,024, 256, 16 and 4.
pub fn sized(mut n: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    for size in STATEMENT_SIZES {
        while n >= size {
            sizes.push(size);
            n -= size;
        }
    }
    sizes
}

/// `items` cut into [`sized`] slices, the largest first.
pub fn sized_slices<T>(items: &[T]) -> Vec<&[T]> {
    let mut rest = items;
    sized(items.len())
        .into_iter()
        .map(|n| {
            let (slice, after) = rest.split_at(n);
            rest = after;
            slice
        })
        .collect()
}

/// `names` as the parameters of an `IN (…)` list of [`padded`] size.
pub fn padded_values<T: ToSql>(names: &[T]) -> Vec<&dyn ToSql> {
    let mut values: Vec<&dyn ToSql> = names.iter().map(|name| name as &dyn ToSql).collect();
    values.resize(padded(names.len()), &Null);
    values
}

/// Every row of `sql` for `keys`: its `IN (…)` list, written `IN (?LIST)`, takes [`Dialect::in_list`]
/// keys a statement (on MariaDB each statement is a round trip), padded to few sizes so that each
/// statement is prepared once.
pub fn query_among<K: ToSql, T>(
    conn: &Connection,
    sql: &str,
    keys: &[K],
    mut row: impl FnMut(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for group in keys.chunks(conn.dialect().in_list()) {
        let values = padded_values(group);
        let mut stmt = conn.prepare_cached(&sql.replace("?LIST", &placeholders(values.len(), 1)))?;
        for found in stmt.query_map(&values[..], &mut row)? {
            out.push(found?);
        }
    }
    Ok(out)
}

/// `?{from}, ?{from + 1}, …`: `n` numbered parameters, for an `IN (…)` list.
pub fn placeholders(n: usize, from: usize) -> String {
    (from..from + n).map(|p| format!("?{p}")).collect::<Vec<_>>().join(", ")
}

/// Which database a connection speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    MariaDb,
}

impl Dialect {
    /// `lite` on SQLite, `maria` on MariaDB: for the few statements the two spell differently.
    pub fn pick<'s>(self, lite: &'s str, maria: &'s str) -> &'s str {
        match self {
            Dialect::Sqlite => lite,
            Dialect::MariaDb => maria,
        }
    }

    /// Names a statement that looks many up at once takes (`name IN (…)`): a cycle's per-user or
    /// per-job lookups are made this many at a time. More on MariaDB, where each statement is a
    /// round trip.
    pub fn in_list(self) -> usize {
        match self {
            Dialect::Sqlite => 256,
            Dialect::MariaDb => 1024,
        }
    }
}

/// `.optional()` on a lookup of one row, as rusqlite has it.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) | Err(Error::Sqlite(rusqlite::Error::QueryReturnedNoRows)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A value read from a column, by either database.
pub trait FromSql: rusqlite::types::FromSql + mysql::prelude::FromValue {}
impl<T: rusqlite::types::FromSql + mysql::prelude::FromValue> FromSql for T {}

/// A connection to the ledger's database.
pub struct Connection {
    inner: Inner,
}

enum Inner {
    Lite(rusqlite::Connection),
    Maria(RefCell<maria::Session>),
}

impl Connection {
    pub fn sqlite(conn: rusqlite::Connection) -> Connection {
        Connection { inner: Inner::Lite(conn) }
    }

    /// Connects to the MariaDB `target` names.
    pub fn mariadb(target: &MariaTarget) -> Result<Connection> {
        let session = maria::Session::connect(target).map_err(|e| match e {
            Error::Maria(source) => Error::MariaConnect { shown: target.shown.clone(), source },
            other => other,
        })?;
        Ok(Connection { inner: Inner::Maria(RefCell::new(session)) })
    }

    pub fn dialect(&self) -> Dialect {
        match self.inner {
            Inner::Lite(_) => Dialect::Sqlite,
            Inner::Maria(_) => Dialect::MariaDb,
        }
    }

    /// The SQLite connection, where the ledger is one (backups, pragmas, migrations).
    pub fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.inner {
            Inner::Lite(c) => Some(c),
            Inner::Maria(_) => None,
        }
    }

    pub fn as_sqlite_mut(&mut self) -> Option<&mut rusqlite::Connection> {
        match &mut self.inner {
            Inner::Lite(c) => Some(c),
            Inner::Maria(_) => None,
        }
    }

    #[allow(dead_code)]
    pub(crate) fn maria(&self) -> Option<&RefCell<maria::Session>> {
        match &self.inner {
            Inner::Lite(_) => None,
            Inner::Maria(s) => Some(s),
        }
    }

    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// Statements without parameters, one after another.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.inner {
            Inner::Lite(c) => Ok(c.execute_batch(sql)?),
            Inner::Maria(s) => s.borrow_mut().batch(sql),
        }
    }

    pub fn query_row<T, P: Params, F: FnOnce(&Row<'_>) -> Result<T>>(&self, sql: &str, params: P, f: F) -> Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement {
            inner: match &self.inner {
                Inner::Lite(c) => StatementInner::Lite(c.prepare(sql)?),
                Inner::Maria(s) => StatementInner::Maria(maria::Prepared::new(s, sql)?),
            },
        })
    }

    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement {
            inner: match &self.inner {
                Inner::Lite(c) => StatementInner::LiteCached(c.prepare_cached(sql)?),
                Inner::Maria(s) => StatementInner::Maria(maria::Prepared::new(s, sql)?),
            },
        })
    }

    /// The id the latest insert gave its (last) row.
    pub fn last_insert_rowid(&self) -> i64 {
        match &self.inner {
            Inner::Lite(c) => c.last_insert_rowid(),
            Inner::Maria(s) => s.borrow().last_insert_id(),
        }
    }

    /// Records that the latest insert gave its row `id` itself: MariaDB's LAST_INSERT_ID names only
    /// ids it made (SQLite's last_insert_rowid any row's).
    pub fn inserted_with_id(&self, id: i64) {
        if let Inner::Maria(s) = &self.inner {
            s.borrow_mut().set_last_insert_id(id);
        }
    }

    /// Makes every write transaction of this connection begin only while the ledger's schema is
    /// `version`, the one its writer writes (MariaDB, where several accountd share a ledger).
    pub fn write_only_on_schema(&self, version: i64) {
        if let Inner::Maria(s) = &self.inner {
            s.borrow_mut().schema = Some(version);
        }
    }

    /// `AND` the condition that the ledger's schema is the one this connection writes, where
    /// [`Connection::write_only_on_schema`] set one: for a statement that writes outside a
    /// transaction's write turn (a lease claim).
    pub fn and_on_written_schema(&self) -> String {
        match &self.inner {
            Inner::Maria(s) => lease_row::and_on_schema(s.borrow().schema),
            Inner::Lite(_) => String::new(),
        }
    }

    /// Makes every write transaction of this connection check first that `holder` holds the
    /// lease of `cluster` (MariaDB; a SQLite ledger has one host).
    pub fn fence(&self, holder: &str, cluster: &str) {
        if let Inner::Maria(s) = &self.inner {
            s.borrow_mut().fence = Some((holder.to_owned(), cluster.to_owned()));
        }
    }

    /// Begins a transaction that holds the ledger's write turn from its start (SQLite's IMMEDIATE;
    /// on MariaDB the `write_turn` row), so two writers never interleave.
    pub fn transaction(&mut self) -> Result<Transaction<'_>> {
        match &self.inner {
            Inner::Lite(c) => c.execute_batch("BEGIN IMMEDIATE")?,
            Inner::Maria(s) => s.borrow_mut().begin()?,
        }
        Ok(Transaction { conn: self, done: false })
    }
}

impl Connection {
    /// Begins a transaction that only reads: every query in it sees the ledger as it was at its
    /// start, and writers go on beside it.
    pub fn read_transaction(&self) -> Result<Transaction<'_>> {
        match &self.inner {
            Inner::Lite(c) => c.execute_batch("BEGIN DEFERRED")?,
            Inner::Maria(s) => s.borrow_mut().begin_snapshot()?,
        }
        Ok(Transaction { conn: self, done: false })
    }
}

/// A transaction; rolled back unless committed.
pub struct Transaction<'c> {
    conn: &'c Connection,
    done: bool,
}

impl Transaction<'_> {
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        match &self.conn.inner {
            Inner::Lite(c) => c.execute_batch("COMMIT").map_err(|e| {
                // Not left open: what it wrote is dropped, as the caller is told.
                let _ = c.execute_batch("ROLLBACK");
                e.into()
            }),
            Inner::Maria(s) => s.borrow_mut().batch("COMMIT"),
        }
    }

    pub fn rollback(mut self) -> Result<()> {
        self.done = true;
        self.conn.execute_batch("ROLLBACK")
    }

    /// Runs `work` inside a savepoint: what it wrote is undone if it fails, the rest of the
    /// transaction kept.
    pub fn within_savepoint<T, E: From<Error>>(&self, name: &str, work: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        self.execute_batch(&format!("SAVEPOINT {name}"))?;
        match work() {
            Ok(v) => {
                self.execute_batch(&format!("RELEASE SAVEPOINT {name}"))?;
                Ok(v)
            }
            Err(e) => {
                self.execute_batch(&format!("ROLLBACK TO SAVEPOINT {name}"))?;
                self.execute_batch(&format!("RELEASE SAVEPOINT {name}"))?;
                Err(e)
            }
        }
    }
}

impl Deref for Transaction<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// A prepared statement.
pub struct Statement<'c> {
    inner: StatementInner<'c>,
}

enum StatementInner<'c> {
    Lite(rusqlite::Statement<'c>),
    LiteCached(rusqlite::CachedStatement<'c>),
    Maria(maria::Prepared<'c>),
}

impl<'c> Statement<'c> {
    fn lite(&mut self) -> Option<&mut rusqlite::Statement<'c>> {
        match &mut self.inner {
            StatementInner::Lite(s) => Some(s),
            StatementInner::LiteCached(s) => Some(s),
            StatementInner::Maria(_) => None,
        }
    }

    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        match &mut self.inner {
            StatementInner::Maria(m) => m.execute(&params.values()?),
            _ => Ok(self.lite().expect("lite").execute(params.into_lite())?),
        }
    }

    /// Every row, each made into a `T` by `f`.
    pub fn query_map<T, P: Params, F: FnMut(&Row<'_>) -> Result<T>>(
        &mut self,
        params: P,
        mut f: F,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        let mut out = Vec::new();
        let mut rows = self.query(params)?;
        while let Some(row) = rows.next()? {
            out.push(f(&row));
        }
        Ok(out.into_iter())
    }

    pub fn query_row<T, P: Params, F: FnOnce(&Row<'_>) -> Result<T>>(&mut self, params: P, f: F) -> Result<T> {
        let mut rows = self.query(params)?;
        match rows.next()? {
            Some(row) => f(&row),
            None => Err(Error::NoRows),
        }
    }

    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        Ok(self.query(params)?.next()?.is_some())
    }

    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows<'_>> {
        Ok(Rows {
            inner: match &mut self.inner {
                StatementInner::Maria(m) => RowsInner::Maria(m.query(&params.values()?)?.into_iter(), None),
                StatementInner::Lite(s) => RowsInner::Lite(s.query(params.into_lite())?),
                StatementInner::LiteCached(s) => RowsInner::Lite(s.query(params.into_lite())?),
            },
        })
    }

    /// The names of the columns a query gives.
    pub fn column_names(&self) -> Vec<String> {
        match &self.inner {
            StatementInner::Lite(s) => s.column_names().into_iter().map(str::to_owned).collect(),
            StatementInner::LiteCached(s) => s.column_names().into_iter().map(str::to_owned).collect(),
            StatementInner::Maria(m) => m.column_names(),
        }
    }

    /// Binds parameter `index` (1-based) for [`Statement::raw_execute`]: the charge cycle's many-row
    /// inserts bind without building a parameter list each time.
    pub fn raw_bind_parameter<T: ToSql>(&mut self, index: usize, value: T) -> Result<()> {
        match &mut self.inner {
            StatementInner::Maria(m) => {
                m.bind(index, params::maria_value(&value)?);
                Ok(())
            }
            _ => Ok(self.lite().expect("lite").raw_bind_parameter(index, value)?),
        }
    }

    pub fn raw_execute(&mut self) -> Result<usize> {
        match &mut self.inner {
            StatementInner::Maria(m) => m.execute_bound(),
            _ => Ok(self.lite().expect("lite").raw_execute()?),
        }
    }

    /// The rows of a query whose parameters were bound with [`Statement::raw_bind_parameter`].
    pub fn raw_query(&mut self) -> Result<Rows<'_>> {
        Ok(Rows {
            inner: match &mut self.inner {
                StatementInner::Maria(m) => RowsInner::Maria(m.query_bound()?.into_iter(), None),
                StatementInner::Lite(s) => RowsInner::Lite(s.raw_query()),
                StatementInner::LiteCached(s) => RowsInner::Lite(s.raw_query()),
            },
        })
    }

    pub fn clear_bindings(&mut self) {
        match &mut self.inner {
            StatementInner::Maria(m) => m.clear(),
            _ => self.lite().expect("lite").clear_bindings(),
        }
    }
}

/// The rows of a query, read one at a time.
pub struct Rows<'s> {
    inner: RowsInner<'s>,
}

enum RowsInner<'s> {
    Lite(rusqlite::Rows<'s>),
    Maria(std::vec::IntoIter<mysql::Row>, Option<mysql::Row>),
}

impl Rows<'_> {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        match &mut self.inner {
            RowsInner::Lite(rows) => Ok(rows.next()?.map(Row::Lite)),
            RowsInner::Maria(rows, current) => {
                *current = rows.next();
                Ok(current.as_ref().map(Row::Maria))
            }
        }
    }
}

/// One row of a query's result.
pub enum Row<'r> {
    Lite(&'r rusqlite::Row<'r>),
    Maria(&'r mysql::Row),
}

impl Row<'_> {
    /// Column `index` (0-based) as a `T`.
    pub fn get<T: FromSql>(&self, index: usize) -> Result<T> {
        match self {
            Row::Lite(r) => Ok(r.get(index)?),
            Row::Maria(r) => maria::column(r, index),
        }
    }

    /// Column `index` whatever its type.
    pub fn value(&self, index: usize) -> Result<Value> {
        use rusqlite::types::ValueRef;
        match self {
            Row::Lite(r) => Ok(match r.get_ref(index)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(i) => Value::Integer(i),
                ValueRef::Real(f) => Value::Real(f),
                ValueRef::Text(t) => match std::str::from_utf8(t) {
                    Ok(t) => Value::Text(t.to_owned()),
                    Err(_) => Value::Blob(t.to_vec()),
                },
                ValueRef::Blob(b) => Value::Blob(b.to_vec()),
            }),
            Row::Maria(r) => maria::value(r, index),
        }
    }

    /// Column `index` as text, borrowed where the database lets it be.
    pub fn get_str(&self, index: usize) -> Result<std::borrow::Cow<'_, str>> {
        match self {
            Row::Lite(r) => Ok(std::borrow::Cow::Borrowed(r.get_ref(index)?.as_str().map_err(rusqlite::Error::from)?)),
            Row::Maria(r) => Ok(std::borrow::Cow::Owned(maria::column::<String>(r, index)?)),
        }
    }
}
