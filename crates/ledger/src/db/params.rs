//! Parameters of a statement, for either database: what rusqlite binds, and the same values as
//! MariaDB's.

use rusqlite::types::{ToSqlOutput, ValueRef};

pub use rusqlite::ToSql;

use super::error::{Error, Result};

/// A statement's parameters: `params![…]`, an array of one type, or `()` for none.
pub trait Params {
    type Lite: rusqlite::Params;
    fn into_lite(self) -> Self::Lite;
    fn values(&self) -> Result<Vec<mysql::Value>>;
}

impl<'a> Params for &'a [&'a dyn ToSql] {
    type Lite = Self;
    fn into_lite(self) -> Self {
        self
    }
    fn values(&self) -> Result<Vec<mysql::Value>> {
        self.iter().map(|v| maria_value(*v)).collect()
    }
}

impl<T: ToSql, const N: usize> Params for [T; N] {
    type Lite = rusqlite::ParamsFromIter<[T; N]>;
    fn into_lite(self) -> Self::Lite {
        rusqlite::params_from_iter(self)
    }
    fn values(&self) -> Result<Vec<mysql::Value>> {
        self.iter().map(maria_value).collect()
    }
}

impl Params for () {
    type Lite = [&'static (dyn ToSql + Send + Sync); 0];
    fn into_lite(self) -> Self::Lite {
        []
    }
    fn values(&self) -> Result<Vec<mysql::Value>> {
        Ok(Vec::new())
    }
}

/// The MariaDB value of what rusqlite would bind.
pub(crate) fn maria_value<T: ToSql + ?Sized>(value: &T) -> Result<mysql::Value> {
    let out = value.to_sql()?;
    let value = match &out {
        ToSqlOutput::Borrowed(v) => *v,
        ToSqlOutput::Owned(v) => v.into(),
        _ => return Err(Error::Unsupported("a parameter type MariaDB is not given")),
    };
    Ok(match value {
        ValueRef::Null => mysql::Value::NULL,
        ValueRef::Integer(i) => mysql::Value::Int(i),
        ValueRef::Real(f) => mysql::Value::Double(f),
        ValueRef::Text(t) | ValueRef::Blob(t) => mysql::Value::Bytes(t.to_vec()),
    })
}
