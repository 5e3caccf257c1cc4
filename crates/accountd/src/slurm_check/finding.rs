//! One line of `accountd config check --slurm`.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    Ok(String),
    Problem(String),
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Ok(text) => write!(f, "ok: {text}"),
            Finding::Problem(text) => write!(f, "problem: {text}"),
        }
    }
}
