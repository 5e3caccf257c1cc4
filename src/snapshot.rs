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

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::ledger::Account;
use crate::policy::BucketRules;

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
