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
    /// The file does not exist (see [`Problem::is_missing_file`]).
    pub(super) missing_file: bool,
}

impl Problem {
    pub(super) fn whole_file(path: &Path, reason: String) -> Problem {
        Problem {
            path: path.to_path_buf(),
            key: String::new(),
            reason,
            instead: "using the defaults".into(),
            missing_file: false,
        }
    }

    /// The file could not be read: whole, and missing when it does not exist.
    pub(super) fn unreadable(path: &Path, error: &std::io::Error) -> Problem {
        let missing_file = error.kind() == std::io::ErrorKind::NotFound;
        Problem { missing_file, ..Problem::whole_file(path, format!("cannot read: {error}")) }
    }

    /// Whether the file does not exist at all (rather than being unreadable or broken): a reader that
    /// can do with the defaults where no file was installed may take them without a word.
    pub fn is_missing_file(&self) -> bool {
        self.missing_file
    }

    /// Whether the problem may have changed `key` (its own, its table's or the whole file's).
    pub fn concerns(&self, key: &str) -> bool {
        self.key.is_empty()
            || key == self.key
            || key.strip_prefix(self.key.as_str()).is_some_and(|rest| rest.starts_with('.'))
    }

    pub fn into_error(self) -> ConfigError {
        match self.key.is_empty() {
            // The file as a whole: "PATH: cannot read: ...", "PATH: not valid TOML (...)".
            true => ConfigError::Parse { path: self.path, message: self.reason },
            false => ConfigError::Invalid { path: self.path, key: self.key, reason: self.reason },
        }
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
