//! One thing wrong in the file: which key, why, and what the lenient reader uses instead.

use std::fmt;
use std::path::{Path, PathBuf};

use super::ConfigError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: PathBuf,
    /// The dotted key (`admission.on_error`); empty when the file as a whole could not be used.
    pub key: String,
    pub reason: String,
    /// What the lenient reader uses instead ("using the default 2h"); a strict error leaves it out.
    pub instead: String,
}

impl Problem {
    pub(super) fn whole_file(path: &Path, reason: String) -> Problem {
        Problem { path: path.to_path_buf(), key: String::new(), reason, instead: "using the defaults".into() }
    }

    /// Whether the problem may have changed `key` (its own, its table's or the whole file's).
    pub fn concerns(&self, key: &str) -> bool {
        self.key.is_empty()
            || key == self.key
            || key.strip_prefix(self.key.as_str()).is_some_and(|rest| rest.starts_with('.'))
    }

    pub(super) fn into_error(self) -> ConfigError {
        ConfigError::Invalid { path: self.path, key: self.key, reason: self.reason }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path.display())?;
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        write!(f, "{}; {}", self.reason, self.instead)
    }
}
