//! MariaDB: a session set up to read the ledger's SQL as SQLite would, and the rewriting of that
//! SQL (`?N` parameters, the reserved word `key`, `INSERT OR …`) into MariaDB's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mysql::prelude::Queryable;

use super::error::{Error, Result};

/// Where a MariaDB ledger is, and who accountd is there.
#[derive(Clone)]
pub struct MariaTarget {
    opts: mysql::Opts,
    /// The URL without any secret, for messages.
    pub shown: String,
}

impl std::fmt::Debug for MariaTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MariaUrlError {
    #[error("[ledger] url: {0}")]
    Url(String),
    #[error("[ledger] url: put the password in [ledger] password_file, not in the URL (a URL is shown in logs and `config check`)")]
    PasswordInUrl,
    #[error("[ledger] url: name the database (mysql://user@host/DATABASE)")]
    NoDatabase,
    #[error("[ledger] password_file {path}: {source}")]
    PasswordFile { path: PathBuf, source: std::io::Error },
}

impl MariaTarget {
    /// `url` (`mysql://user@host[:port]/database[?socket=PATH]`), with the password read from
    /// `password_file` (its first line) where one is given.
    pub fn new(url: &str, password_file: Option<&Path>) -> Result<MariaTarget, MariaUrlError> {
        let target = MariaTarget::server(url, password_file)?;
        if target.opts.get_db_name().is_none_or(str::is_empty) {
            return Err(MariaUrlError::NoDatabase);
        }
        Ok(target)
    }

    /// As [`MariaTarget::new`], for a URL that may name no database (to make one).
    pub fn server(url: &str, password_file: Option<&Path>) -> Result<MariaTarget, MariaUrlError> {
        let opts = mysql::Opts::from_url(url).map_err(|e| MariaUrlError::Url(e.to_string()))?;
        if opts.get_pass().is_some() {
            return Err(MariaUrlError::PasswordInUrl);
        }
        let password = match password_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| MariaUrlError::PasswordFile { path: path.to_owned(), source })?;
                Some(text.lines().next().unwrap_or("").to_owned())
            }
            None => None,
        };
        let opts = mysql::OptsBuilder::from_opts(opts)
            .pass(password)
            // Every statement the ledger makes, prepared once per connection.
            .stmt_cache_size(Some(512))
            .tcp_connect_timeout(Some(std::time::Duration::from_secs(5)))
            .read_timeout(Some(std::time::Duration::from_secs(60)))
            .write_timeout(Some(std::time::Duration::from_secs(60)));
        Ok(MariaTarget { opts: opts.into(), shown: url.to_owned() })
    }
}

/// A connection, with what it remembers between statements. A connection the server dropped (a
/// restart, a failover of its address) is made again before the next statement outside a
/// transaction; a transaction it was in fails whole, as the server rolled it back.
pub(crate) struct Session {
    conn: mysql::Conn,
    opts: mysql::Opts,
    /// The connection was lost: made again before the next use.
    lost: bool,
    /// Inside a transaction (between its BEGIN and its COMMIT or ROLLBACK).
    in_transaction: bool,
    translated: HashMap<String, Arc<Translated>>,
    last_insert_id: i64,
    /// Who must hold which cluster's lease for a write transaction to begin (the cycles' connection).
    pub fence: Option<(String, String)>,
    /// The ledger schema its writer writes: a write transaction begins only on it.
    pub schema: Option<i64>,
}

/// A write transaction whose client stopped answering (a leader's host lost mid-cycle: no FIN
/// reaches the server, which would hold its write turn until wait_timeout, hours) is rolled back
/// after 5 s, within the 10 s another writer waits for the turn. The ledger's own transactions never
/// pause between statements (a copy's, which waits on its source, lifts it).
pub(crate) const IDLE_WRITE_LIMIT: &str = "SET SESSION idle_write_transaction_timeout = 5";

/// Session settings that make MariaDB read the ledger's SQL as SQLite does: `||` joins strings,
/// `"name"` is a name, no value is silently cut to fit, names compare byte for byte (the tables'
/// collation), and each statement sees what was committed before it.
const SETUP: &[&str] = &[
    "SET NAMES utf8mb4 COLLATE utf8mb4_bin",
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,PIPES_AS_CONCAT,ANSI_QUOTES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    // The lease's clock (UNIX_TIMESTAMP(NOW(3))) in UTC: in a zone's repeated autumn hour it would
    // step back an hour and keep a lost leader's lease that long.
    "SET SESSION time_zone = '+00:00'",
    // As long as SQLite's busy timeout: a writer waits its turn that long, then fails.
    "SET SESSION innodb_lock_wait_timeout = 10",
    IDLE_WRITE_LIMIT,
    // A history is walked entry by entry (a recursive table): never cut short at a default depth.
    "SET SESSION max_recursive_iterations = 4294967295",
];

impl Session {
    pub fn connect(target: &MariaTarget) -> Result<Session> {
        Ok(Session {
            conn: open(&target.opts)?,
            opts: target.opts.clone(),
            lost: false,
            in_transaction: false,
            translated: HashMap::new(),
            last_insert_id: 0,
            fence: None,
            schema: None,
        })
    }

    /// The connection, made again first if it was lost outside a transaction.
    fn conn(&mut self) -> Result<&mut mysql::Conn> {
        if self.lost {
            if self.in_transaction {
                return Err(Error::Unsupported(
                    "the connection to MariaDB was lost in a transaction: none of it was kept",
                ));
            }
            self.conn = open(&self.opts)?;
            self.lost = false;
        }
        Ok(&mut self.conn)
    }

    /// `result`, noting a connection the server dropped.
    fn noted<T>(&mut self, result: std::result::Result<T, mysql::Error>) -> Result<T> {
        if let Err(e) = &result {
            if connection_lost(e) {
                self.lost = true;
            }
        }
        Ok(result?)
    }

    fn run(&mut self, sql: &str) -> Result<()> {
        let done = self.conn()?.query_drop(sql);
        self.noted(done)
    }

    pub fn last_insert_id(&self) -> i64 {
        self.last_insert_id
    }

    pub fn set_last_insert_id(&mut self, id: i64) {
        self.last_insert_id = id;
    }

    /// Statements separated by `;`, without parameters.
    pub fn batch(&mut self, sql: &str) -> Result<()> {
        for statement in split_statements(sql) {
            let translated = translate(&statement);
            let ends = matches!(translated.sql.trim().to_ascii_uppercase().as_str(), "COMMIT" | "ROLLBACK");
            let done = self.run(&translated.sql);
            if ends {
                self.in_transaction = false;
            }
            done?;
        }
        Ok(())
    }

    /// Begins a transaction holding the write turn: an update of the one `write_turn` row, which
    /// every writer makes first (on Galera, a write that certifies, where a row lock would not).
    /// Taken only where the ledger's schema is the one this build writes: an accountd still
    /// running when a newer one upgraded the ledger writes nothing more (its writes would lack
    /// what the newer schema keeps beside them, such as `entry_keys`).
    pub fn begin(&mut self) -> Result<()> {
        self.run("START TRANSACTION")?;
        self.in_transaction = true;
        let condition = super::lease_row::and_on_schema(self.schema);
        let taken = self
            .run(&format!("UPDATE write_turn SET turns = turns + 1 WHERE id = 1{condition}"))
            .map(|()| self.conn.affected_rows());
        match (taken, self.schema) {
            (Ok(1), _) | (Ok(_), None) => {}
            (Ok(_), Some(known)) => {
                // No turn row taken on that condition: the schema is another's.
                let found = self.conn.query_first::<i64, _>("SELECT version FROM ledger_schema WHERE id = 1");
                let _ = self.batch("ROLLBACK");
                return Err(Error::SchemaChanged { found: found.ok().flatten(), known });
            }
            (Err(e), _) => {
                let _ = self.batch("ROLLBACK");
                return Err(e);
            }
        }
        // Checked with the turn held: a lease lost from here on lets the other leader write only
        // after this transaction ends.
        if let Some((holder, cluster)) = self.fence.clone() {
            let (table, row) = super::lease_row::lease_row(&cluster, "?");
            let now = super::lease_row::NOW_MS;
            let held = self.conn.exec_first(
                format!("SELECT COUNT(*) FROM {table} WHERE {row} AND holder = ? AND expires_ms > {now}"),
                (cluster.as_str(), holder.as_str()),
            );
            let held: Option<i64> = match self.noted(held) {
                Ok(held) => held,
                Err(e) => {
                    let _ = self.batch("ROLLBACK");
                    return Err(e);
                }
            };
            if held != Some(1) {
                let _ = self.batch("ROLLBACK");
                return Err(Error::Fenced(holder));
            }
        }
        Ok(())
    }

    /// Begins a read-only transaction over one consistent snapshot.
    pub fn begin_snapshot(&mut self) -> Result<()> {
        self.run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
        self.run("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")?;
        self.in_transaction = true;
        Ok(())
    }

    fn translation(&mut self, sql: &str) -> Arc<Translated> {
        if let Some(t) = self.translated.get(sql) {
            return t.clone();
        }
        let t = Arc::new(translate(sql));
        self.translated.insert(sql.to_owned(), t.clone());
        t
    }
}

/// A statement prepared on a session, with the parameters bound to it so far.
pub(crate) struct Prepared<'c> {
    session: &'c RefCell<Session>,
    translated: Arc<Translated>,
    statement: mysql::Statement,
    bound: Vec<mysql::Value>,
}

impl<'c> Prepared<'c> {
    pub fn new(session: &'c RefCell<Session>, sql: &str) -> Result<Prepared<'c>> {
        let mut s = session.borrow_mut();
        let translated = s.translation(sql);
        let prepared = s.conn()?.prep(&translated.sql);
        let statement = s.noted(prepared)?;
        drop(s);
        Ok(Prepared { session, translated, statement, bound: Vec::new() })
    }

    /// The values in the order the rewritten statement's `?`s take them.
    fn ordered(&self, values: &[mysql::Value]) -> Result<mysql::Params> {
        if self.translated.order.is_empty() {
            return Ok(mysql::Params::Empty);
        }
        let ordered = self
            .translated
            .order
            .iter()
            .map(|&i| {
                values.get(i).cloned().ok_or(Error::Unsupported("a statement is given fewer parameters than it names"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(mysql::Params::Positional(ordered))
    }

    pub fn execute(&mut self, values: &[mysql::Value]) -> Result<usize> {
        let params = self.ordered(values)?;
        let mut s = self.session.borrow_mut();
        let done = s.conn()?.exec_iter(&self.statement, params).map(|result| {
            let affected = result.affected_rows();
            // SQLite's last_insert_rowid is the last row's; MariaDB names the first of a many-row insert.
            let last = match (result.last_insert_id(), affected) {
                (Some(first), n) if first > 0 && n > 0 => Some(first as i64 + n as i64 - 1),
                _ => None,
            };
            (affected, last)
        });
        let (affected, last) = s.noted(done)?;
        if let Some(last) = last {
            s.last_insert_id = last;
        }
        Ok(affected as usize)
    }

    pub fn query(&mut self, values: &[mysql::Value]) -> Result<Vec<mysql::Row>> {
        let params = self.ordered(values)?;
        let mut s = self.session.borrow_mut();
        let rows = s.conn()?.exec(&self.statement, params);
        s.noted(rows)
    }

    pub fn column_names(&self) -> Vec<String> {
        self.statement.columns().iter().map(|c| c.name_str().into_owned()).collect()
    }

    pub fn bind(&mut self, index: usize, value: mysql::Value) {
        if self.bound.len() < index {
            self.bound.resize(index, mysql::Value::NULL);
        }
        self.bound[index - 1] = value;
    }

    pub fn execute_bound(&mut self) -> Result<usize> {
        let bound = std::mem::take(&mut self.bound);
        let done = self.execute(&bound);
        self.bound = bound;
        done
    }

    pub fn query_bound(&mut self) -> Result<Vec<mysql::Row>> {
        let bound = std::mem::take(&mut self.bound);
        let rows = self.query(&bound);
        self.bound = bound;
        rows
    }

    pub fn clear(&mut self) {
        self.bound.clear();
    }
}

/// A new connection, set up as [`SETUP`] says.
fn open(opts: &mysql::Opts) -> Result<mysql::Conn> {
    let mut conn = mysql::Conn::new(opts.clone())?;
    for sql in SETUP {
        conn.query_drop(sql)?;
    }
    Ok(conn)
}

/// Whether `e` means the server dropped the connection (restarted, killed it, went away).
fn connection_lost(e: &mysql::Error) -> bool {
    match e {
        mysql::Error::IoError(_) | mysql::Error::DriverError(_) | mysql::Error::CodecError(_) => true,
        // Server gone away, lost connection, killed, shut down, disconnected for idling.
        mysql::Error::MySqlError(e) => matches!(e.code, 2006 | 2013 | 1927 | 1053 | 4031),
        _ => false,
    }
}

/// Column `index` of a MariaDB row whatever its type.
pub(crate) fn value(row: &mysql::Row, index: usize) -> Result<super::error::Value> {
    use super::error::Value;
    let Some(raw) = row.as_ref(index) else {
        return Err(Error::MariaValue { index, why: "no such column".into() });
    };
    Ok(match raw {
        mysql::Value::NULL => Value::Null,
        mysql::Value::Int(i) => Value::Integer(*i),
        mysql::Value::UInt(u) => Value::Integer(
            i64::try_from(*u).map_err(|_| Error::MariaValue { index, why: format!("{u} is beyond 64 signed bits") })?,
        ),
        mysql::Value::Float(f) => Value::Real(f64::from(*f)),
        mysql::Value::Double(f) => Value::Real(*f),
        mysql::Value::Bytes(b) => match String::from_utf8(b.clone()) {
            Ok(t) => Value::Text(t),
            Err(e) => Value::Blob(e.into_bytes()),
        },
        other => {
            return Err(Error::MariaValue {
                index,
                why: format!("a date or time ({other:?}) where the ledger keeps none"),
            })
        }
    })
}

/// Column `index` of a MariaDB row as a `T`.
pub(crate) fn column<T: mysql::prelude::FromValue>(row: &mysql::Row, index: usize) -> Result<T> {
    match row.get_opt::<T, usize>(index) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(Error::MariaValue { index, why: e.to_string() }),
        None => Err(Error::MariaValue { index, why: "no such column".into() }),
    }
}

/// SQL rewritten for MariaDB, and which parameter each of its `?`s takes (0-based).
#[derive(Debug, PartialEq)]
pub(crate) struct Translated {
    pub sql: String,
    pub order: Vec<usize>,
}

/// Rewrites the ledger's SQLite spelling: `?N` becomes `?` (the parameter list is reordered to
/// match), a column named `key` is quoted (a reserved word in MariaDB), `INSERT OR FAIL` is a
/// plain insert and `INSERT OR IGNORE` MariaDB's `INSERT IGNORE`, and SQLite's `INDEXED BY`
/// (partial indexes, which MariaDB lacks) is left to MariaDB's planner. Nothing inside a string
/// changes.
pub(crate) fn translate(sql: &str) -> Translated {
    let mut sql =
        sql.replace("INSERT OR FAIL INTO", "INSERT INTO").replace("INSERT OR IGNORE INTO", "INSERT IGNORE INTO");
    while let Some(at) = sql.find(" INDEXED BY ") {
        let name_start = at + " INDEXED BY ".len();
        let name_end = sql[name_start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(sql.len(), |n| name_start + n);
        sql.replace_range(at..name_end, "");
    }
    let mut out = String::with_capacity(sql.len() + 16);
    let mut order = Vec::new();
    let mut next = 0usize;
    let bytes = sql.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\'' || c == b'"' {
            // A string, or a quoted name, with the quote doubled inside it.
            let start = i;
            i += 1;
            while i < bytes.len() {
                if bytes[i] == c {
                    if bytes.get(i + 1) == Some(&c) {
                        i += 2;
                        continue;
                    }
                    break;
                }
                i += 1;
            }
            i = (i + 1).min(bytes.len());
            out.push_str(&sql[start..i]);
        } else if c == b'?' {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            let index = match sql[start..end].parse::<usize>() {
                Ok(n) if n > 0 => n - 1,
                _ => next,
            };
            next = index + 1;
            order.push(index);
            out.push('?');
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &sql[start..i];
            let qualified = start > 0 && bytes[start - 1] == b'.';
            if word == "key" && !qualified {
                out.push_str("\"key\"");
            } else {
                out.push_str(word);
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    Translated { sql: out, order }
}

/// Statements of a batch, split at `;` outside strings and comments.
fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_string = false;
    for line in sql.lines() {
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if !in_string && c == '-' && chars.peek() == Some(&'-') {
                break;
            }
            if c == '\'' {
                in_string = !in_string;
            }
            if c == ';' && !in_string {
                if !current.trim().is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                current.clear();
            } else {
                current.push(c);
            }
        }
        current.push('\n');
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_parameters_become_positional_in_the_order_they_are_used() {
        let t = translate("SELECT 1 FROM x WHERE a = ?2 AND b = ?1 AND c = ?2");
        assert_eq!(t.sql, "SELECT 1 FROM x WHERE a = ? AND b = ? AND c = ?");
        assert_eq!(t.order, vec![1, 0, 1]);
        let t = translate("INSERT INTO y VALUES (?, ?)");
        assert_eq!(t.order, vec![0, 1]);
    }

    #[test]
    fn the_column_key_is_quoted_but_nothing_in_a_string_changes() {
        let t = translate("INSERT OR FAIL INTO meta (key, value) VALUES ('key ?1', ?1) -- t.key");
        assert_eq!(t.sql, "INSERT INTO meta (\"key\", value) VALUES ('key ?1', ?) -- t.key");
        assert_eq!(t.order, vec![0]);
        assert_eq!(translate("SELECT 'it''s ?3', ?1").order, vec![0]);
        assert_eq!(translate("INSERT INTO meta (\"key\") VALUES (?)").sql, "INSERT INTO meta (\"key\") VALUES (?)");
        assert_eq!(translate("UPDATE t INDEXED BY t_open SET a = 1").sql, "UPDATE t SET a = 1");
    }

    #[test]
    fn batches_split_at_semicolons_outside_strings_and_comments() {
        let parts = split_statements("CREATE TABLE a (x TEXT); -- one; two\nINSERT INTO a VALUES ('p;q');");
        assert_eq!(parts.len(), 2);
        assert!(parts[1].contains("'p;q'"));
    }
}
