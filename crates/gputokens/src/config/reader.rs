//! Reading one table of the file: each key through its parser, a bad value reported as a
//! [`Problem`] and replaced by the default, and every key no one asked for reported as unknown.

use std::path::Path;

use toml::Value;

use super::problem::Problem;
use super::values::Shown;

pub(super) struct Section<'t> {
    path: &'t Path,
    /// "" for the top level, else the table's dotted name with a trailing dot ("paths.").
    prefix: String,
    table: Option<&'t toml::Table>,
    /// The keys read so far; with `open`, any key is known (the GPU types of `[prices]`).
    known: Vec<&'static str>,
    open: bool,
    problems: Vec<Problem>,
}

impl<'t> Section<'t> {
    pub fn top(table: &'t toml::Table, path: &'t Path) -> Section<'t> {
        Section {
            path,
            prefix: String::new(),
            table: Some(table),
            known: Vec::new(),
            open: false,
            problems: Vec::new(),
        }
    }

    /// Reads the table `name` with `read` (an absent table reads as empty, so every key has its
    /// default) and keeps its problems with this section's.
    pub fn table<T>(&mut self, name: &'static str, read: impl FnOnce(&mut Section<'t>) -> T) -> T {
        let table = match self.value(name) {
            None => None,
            Some(Value::Table(table)) => Some(table),
            Some(other) => {
                let reason = format!("expected a table ([{name}]), got {other}");
                self.problem(name, reason, "using the defaults");
                None
            }
        };
        let mut section = Section {
            path: self.path,
            prefix: format!("{}{name}.", self.prefix),
            table,
            known: Vec::new(),
            open: false,
            problems: Vec::new(),
        };
        let value = read(&mut section);
        self.problems.extend(section.finish());
        value
    }

    /// Reads the table `name` with `read` when the file has it (a setting that is off unless given);
    /// None when it is absent, or not a table (a problem).
    pub fn optional_table<T>(&mut self, name: &'static str, read: impl FnOnce(&mut Section<'t>) -> T) -> Option<T> {
        match self.value(name) {
            None => None,
            Some(Value::Table(_)) => Some(self.table(name, read)),
            Some(other) => {
                let reason = format!("expected a table ([{name}]), got {other}");
                self.problem(name, reason, "ignored: left unset");
                None
            }
        }
    }

    /// The value of `key`, if given; marks `key` as known.
    pub fn value(&mut self, key: &'static str) -> Option<&'t Value> {
        self.known.push(key);
        #[cfg(test)]
        asked::record(&self.prefix, key);
        self.table?.get(key)
    }

    /// Every key of the table, all of them known.
    pub fn entries(&mut self) -> impl Iterator<Item = (&'t String, &'t Value)> {
        self.open = true;
        self.table.into_iter().flatten()
    }

    /// `key` through `parse`; `default` when it is absent or bad (then a problem says so).
    pub fn get<T: Shown>(
        &mut self,
        key: &'static str,
        default: T,
        parse: impl FnOnce(&Value) -> Result<T, String>,
    ) -> T {
        let Some(value) = self.value(key) else { return default };
        parse(value).unwrap_or_else(|reason| {
            self.problem(key, reason, &format!("using the default {}", default.shown()));
            default
        })
    }

    /// `key` through `parse` when the setting is off unless given: None when absent or bad.
    pub fn optional<T>(&mut self, key: &'static str, parse: impl FnOnce(&Value) -> Result<T, String>) -> Option<T> {
        let value = self.value(key)?;
        parse(value).map_err(|reason| self.problem(key, reason, "ignored: left unset")).ok()
    }

    /// `key` through `parse` when the table is of no use without it: None when absent or bad (then a
    /// problem says the table is ignored).
    pub fn required<T>(&mut self, key: &'static str, parse: impl FnOnce(&Value) -> Result<T, String>) -> Option<T> {
        let ignored = format!("ignoring [{}]", self.prefix.trim_end_matches('.'));
        let Some(value) = self.value(key) else {
            self.problem(key, "missing".into(), &ignored);
            return None;
        };
        parse(value).map_err(|reason| self.problem(key, reason, &ignored)).ok()
    }

    /// `key` as one of `choices` (its TOML spelling and its value).
    pub fn choice<T: Copy + PartialEq>(&mut self, key: &'static str, default: T, choices: &[(&str, T)]) -> T {
        let Some(value) = self.value(key) else { return default };
        let found = choices.iter().find(|(name, _)| value.as_str() == Some(*name)).map(|&(_, v)| v);
        found.unwrap_or_else(|| {
            let names: Vec<String> = choices.iter().map(|(name, _)| format!("\"{name}\"")).collect();
            let shown = choices.iter().find(|(_, v)| *v == default).map_or("", |(name, _)| name);
            self.problem(key, format!("expected {}, got {value}", names.join(" or ")), &format!("using \"{shown}\""));
            default
        })
    }

    /// A problem with `key` of this table, found after its value was read.
    pub fn problem(&mut self, key: &str, reason: String, instead: &str) {
        self.problems.push(Problem {
            path: self.path.to_path_buf(),
            key: format!("{}{key}", self.prefix),
            reason,
            instead: instead.to_string(),
            missing_file: false,
        });
    }

    /// The problems found, with one for each unknown key.
    pub fn finish(mut self) -> Vec<Problem> {
        let unknown: Vec<&String> = match self.table {
            Some(table) if !self.open => table.keys().filter(|k| !self.known.contains(&k.as_str())).collect(),
            _ => Vec::new(),
        };
        for key in unknown {
            let is_table = self.table.and_then(|t| t.get(key)).is_some_and(Value::is_table);
            let reason = match (is_table, nearest(key, &self.known)) {
                (true, Some(near)) => {
                    format!("unknown table `[{}{key}]`: did you mean `[{}{near}]`?", self.prefix, self.prefix)
                }
                (true, None) => format!("unknown table `[{}{key}]` (known: {})", self.prefix, self.known.join(", ")),
                (false, Some(near)) => format!("unknown field `{key}`: did you mean `{near}`?"),
                (false, None) => format!("unknown field `{key}` (known: {})", self.known.join(", ")),
            };
            self.problem(key, reason, "ignored");
        }
        self.problems
    }
}

/// The known name nearest to `typed` when it is near enough to be what was meant: a few letters
/// apart (one for a short name), or the same name in other case.
fn nearest<'k>(typed: &str, known: &[&'k str]) -> Option<&'k str> {
    let lower = typed.to_ascii_lowercase();
    let allowed = match lower.chars().count() {
        0..=3 => 1,
        4..=7 => 2,
        _ => 3,
    };
    known
        .iter()
        .map(|name| (strsim::damerau_levenshtein(&lower, name), *name))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// The keys the reader asks for, as dotted names, so a test can hold the key reference to them.
#[cfg(test)]
pub(super) mod asked {
    use std::cell::RefCell;

    thread_local! {
        static ASKED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
    }

    pub fn record(prefix: &str, key: &str) {
        ASKED.with(|asked| {
            if let Some(keys) = asked.borrow_mut().as_mut() {
                keys.push(format!("{prefix}{key}"));
            }
        });
    }

    /// Every key `read` asks for on this thread, in the order asked.
    pub fn during(read: impl FnOnce()) -> Vec<String> {
        ASKED.with(|asked| *asked.borrow_mut() = Some(Vec::new()));
        read();
        ASKED.with(|asked| asked.borrow_mut().take().unwrap_or_default())
    }
}
