//! Reading the file into the model: the strict and the lenient reader (over the same per-key code,
//! `sections`), and which file to read.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::problem::Problem;
use super::sections;
use super::{Config, ConfigError, DEFAULT_PATH, PATH_ENV};

impl Config {
    /// Reads and validates `path`; the first problem is the error.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text, path)
    }

    /// Parses `text` strictly; `path` names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let (config, problems) = sections::read(&table, path);
        match problems.into_iter().next() {
            Some(problem) => Err(problem.into_error()),
            None => Ok(config),
        }
    }

    /// Reads `path` and never fails: a missing, unreadable or broken file gives the defaults, a bad
    /// setting keeps its default, and each is one [`Problem`] (already phrased for a log).
    pub fn load_lenient(path: &Path) -> (Config, Vec<Problem>) {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse_lenient(&text, path),
            Err(e) => (Config::defaults(path), vec![Problem::unreadable(path, &e)]),
        }
    }

    /// Parses `text` leniently (see [`Config::load_lenient`]).
    pub fn parse_lenient(text: &str, path: &Path) -> (Config, Vec<Problem>) {
        match toml::from_str::<toml::Table>(text) {
            Ok(table) => sections::read(&table, path),
            Err(e) => {
                let reason = format!("not valid TOML ({})", e.to_string().trim_end());
                (Config::defaults(path), vec![Problem::whole_file(path, reason)])
            }
        }
    }

    /// What an empty file means.
    pub fn defaults(path: &Path) -> Config {
        sections::read(&toml::Table::new(), path).0
    }

    /// Which file to read, the one resolver of accountd, sbalance and both plugins: `explicit` (a
    /// `--config` option, the SPANK plugin's `conf=`), else `$GPUTOKENS_CONF`, else
    /// /etc/slurm/gputokens.toml. An empty path counts as none given.
    pub fn resolve_path(explicit: Option<&Path>) -> PathBuf {
        resolve_path(explicit, std::env::var_os(PATH_ENV).as_deref())
    }
}

/// [`Config::resolve_path`] with the environment's value given.
pub(super) fn resolve_path(explicit: Option<&Path>, env: Option<&OsStr>) -> PathBuf {
    let given = |path: &&Path| !path.as_os_str().is_empty();
    let named = explicit.filter(given).or_else(|| env.map(Path::new).filter(given));
    named.map_or_else(|| PathBuf::from(DEFAULT_PATH), Path::to_path_buf)
}
