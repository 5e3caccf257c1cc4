//! The balance snapshot: a small text file accountd replaces atomically after every ledger change and
//! the job_submit plugin reads (and re-reads on change) without ever touching SQLite.
//!
//! ```text
//! gputokens-snapshot 1
//! generated 1795430400
//! floor -10000000
//! daily 1000000
//! monthly 30000000
//! initial 100000000
//! user alice 46000000
//! ```
//! Amounts are micro-tokens. A user not listed has not been seen yet and stands at `initial`.
//! [`parse`] reads it back: the magic line first, every header key once, users once each; lines
//! with other keywords are skipped, so a later writer may add keys without breaking older readers.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::ledger::Account;
use crate::policy::BucketRules;
use crate::tokens::Tokens;

pub const MAGIC: &str = "gputokens-snapshot 1";

pub fn render(accounts: &[Account], rules: &BucketRules, generated: i64) -> String {
    let mut out = String::with_capacity(64 + accounts.len() * 32);
    out.push_str(MAGIC);
    out.push('\n');
    out.push_str(&format!(
        "generated {generated}\nfloor {}\ndaily {}\nmonthly {}\ninitial {}\n",
        rules.floor.micro(),
        rules.daily.micro(),
        rules.monthly.micro(),
        rules.initial.micro()
    ));
    for a in accounts {
        out.push_str(&format!("user {} {}\n", a.user, a.balance.micro()));
    }
    out
}

/// Writes next to `path`, fsyncs, then renames over it: a reader sees the old or the new file, never
/// half of one. Mode 0640: slurmctld's group may read it, ordinary users may not.
pub fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile_in(dir, path)?;
    tmp.1.write_all(contents.as_bytes())?;
    tmp.1.sync_all()?;
    std::fs::set_permissions(&tmp.0, std::fs::Permissions::from_mode(0o640))?;
    std::fs::rename(&tmp.0, path)
}

fn tempfile_in(dir: &Path, path: &Path) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    Ok((tmp, file))
}

/// A parsed snapshot: what the job_submit plugin decides from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Unix time accountd wrote it.
    pub generated: i64,
    /// The bucket rules accountd ran with; the snapshot carries no cap (`cap` is None).
    pub rules: BucketRules,
    pub balances: HashMap<String, Tokens>,
}

impl Snapshot {
    /// The user's balance; a user not listed stands at `initial`.
    pub fn balance(&self, user: &str) -> Tokens {
        self.balances.get(user).copied().unwrap_or(self.rules.initial)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("not a gputokens snapshot (the first line is not '{MAGIC}')")]
    NotASnapshot,
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("'{0}' is missing")]
    Missing(&'static str),
}

/// Parses what [`render`] writes.
pub fn parse(text: &str) -> Result<Snapshot, SnapshotError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, first)) if first.trim_end() == MAGIC => {}
        _ => return Err(SnapshotError::NotASnapshot),
    }
    let mut header: [Option<i64>; 5] = [None; 5];
    const KEYS: [&str; 5] = ["generated", "floor", "daily", "monthly", "initial"];
    let mut balances = HashMap::new();
    for (i, line) in lines {
        let bad = |reason: String| SnapshotError::Line { line: i + 1, reason };
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split(' ');
        let key = words.next().unwrap_or_default();
        let number = |word: Option<&str>, what: &str| -> Result<i64, SnapshotError> {
            let word = word.ok_or_else(|| bad(format!("{what} is missing")))?;
            word.parse().map_err(|_| bad(format!("{what} '{word}' is not a whole number")))
        };
        if key == "user" {
            let name = words.next().filter(|n| !n.is_empty()).ok_or_else(|| bad("user name is missing".into()))?;
            let micro = number(words.next(), "balance")?;
            if words.next().is_some() {
                return Err(bad("unexpected text after the balance".into()));
            }
            if balances.insert(name.to_string(), Tokens::from_micro(micro)).is_some() {
                return Err(bad(format!("user '{name}' is listed twice")));
            }
        } else if let Some(slot) = KEYS.iter().position(|k| *k == key) {
            let value = number(words.next(), key)?;
            if words.next().is_some() {
                return Err(bad(format!("unexpected text after {key}")));
            }
            if header[slot].replace(value).is_some() {
                return Err(bad(format!("'{key}' is given twice")));
            }
        }
        // Any other keyword: a later addition to the format, skipped.
    }
    let mut values = [0i64; 5];
    for (slot, value) in values.iter_mut().enumerate() {
        *value = header[slot].ok_or(SnapshotError::Missing(KEYS[slot]))?;
    }
    let [generated, floor, daily, monthly, initial] = values;
    let t = Tokens::from_micro;
    let rules = BucketRules { initial: t(initial), daily: t(daily), monthly: t(monthly), cap: None, floor: t(floor) };
    Ok(Snapshot { generated, rules, balances })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Account;

    fn rules() -> BucketRules {
        BucketRules { cap: Some(Tokens::whole(200)), ..BucketRules::default() }
    }

    fn account(user: &str, balance: Tokens) -> Account {
        Account { user: user.into(), balance, first_seen: 0 }
    }

    #[test]
    fn parses_what_render_writes() {
        let accounts = [account("alice", Tokens::whole(46)), account("bob", Tokens::from_micro(-10_400_000))];
        let text = render(&accounts, &rules(), 1_795_430_400);
        let snap = parse(&text).unwrap();
        assert_eq!(snap.generated, 1_795_430_400);
        assert_eq!(snap.rules, BucketRules { cap: None, ..rules() });
        assert_eq!(snap.balance("alice"), Tokens::whole(46));
        assert_eq!(snap.balance("bob"), Tokens::from_micro(-10_400_000));
        assert_eq!(snap.balance("carol"), Tokens::whole(100), "unlisted users stand at initial");
        assert_eq!(snap.balances.len(), 2);
    }

    #[test]
    fn the_documented_example() {
        let text = "gputokens-snapshot 1\ngenerated 1795430400\nfloor -10000000\ndaily 1000000\nmonthly 30000000\n\
                    initial 100000000\nuser alice 46000000\n";
        let snap = parse(text).unwrap();
        assert_eq!(snap.rules.floor, Tokens::whole(-10));
        assert_eq!(snap.balance("alice"), Tokens::whole(46));
    }

    #[test]
    fn empty_ledger_and_unknown_keywords() {
        let text = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\ninitial 7\ncap 9\n\n";
        let snap = parse(text).unwrap();
        assert!(snap.balances.is_empty());
        assert_eq!(snap.balance("anyone"), Tokens::from_micro(7));
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(parse(""), Err(SnapshotError::NotASnapshot));
        assert_eq!(parse("\u{0}\u{1}garbage\n"), Err(SnapshotError::NotASnapshot));
        assert_eq!(parse("gputokens-snapshot 2\n"), Err(SnapshotError::NotASnapshot));
        assert_eq!(parse("gputokens-snapshot 1\n"), Err(SnapshotError::Missing("generated")));
        let head = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\ninitial 7\n";
        let cases = [
            ("user alice\n", "line 7: balance is missing"),
            ("user alice 1.5\n", "line 7: balance '1.5' is not a whole number"),
            ("user alice 1 2\n", "line 7: unexpected text after the balance"),
            ("user alice 1\nuser alice 2\n", "line 8: user 'alice' is listed twice"),
            ("floor 3\n", "line 7: 'floor' is given twice"),
            ("user\n", "line 7: user name is missing"),
        ];
        for (tail, want) in cases {
            assert_eq!(parse(&format!("{head}{tail}")).unwrap_err().to_string(), want, "{tail:?}");
        }
        let truncated = "gputokens-snapshot 1\ngenerated 5\nfloor 0\ndaily 0\nmonthly 0\n";
        assert_eq!(parse(truncated), Err(SnapshotError::Missing("initial")));
    }
}
