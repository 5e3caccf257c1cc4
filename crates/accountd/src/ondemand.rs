//! The Open OnDemand balance file (`[ondemand]`): OnDemand's dashboard reads the JSON files named by
//! `OOD_BALANCE_PATH` as each user and warns one whose balance is below `OOD_BALANCE_THRESHOLD`.
//! Format version 1 (OnDemand's documentation, "Balance Warnings on Dashboard"): a row per user of
//! the ledger (`user`, `value`) and, with pools, a row per member of each pool (`user`, `project`:
//! the account, `value`: the pool's balance). Rewritten with the snapshot, each check cycle, by a
//! thread of its own.

use std::os::unix::fs::PermissionsExt;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use gputokens::config::{OnDemand, OnDemandReaders};
use gputokens::Tokens;
use serde_json::json;

/// A pool as the file shows it: its balance, once for each member.
pub struct PoolBalance<'a> {
    pub account: &'a str,
    pub balance: Tokens,
    pub members: Vec<&'a str>,
}

/// The file's text: users' balances, then each pool's for its members.
pub fn render(settings: &OnDemand, now: i64, users: &[(&str, Tokens)], pools: &[PoolBalance]) -> String {
    let mut balances: Vec<serde_json::Value> =
        users.iter().map(|(user, balance)| json!({ "user": user, "value": number(*balance) })).collect();
    for pool in pools {
        for member in &pool.members {
            balances.push(json!({ "user": member, "project": pool.account, "value": number(pool.balance) }));
        }
    }
    let file = json!({
        "version": 1,
        "timestamp": now,
        "config": { "unit": settings.unit, "project_type": settings.project_type },
        "balances": balances,
    });
    // Compact: the dashboard parses the whole file on each page a user loads.
    format!("{file}\n")
}

/// OnDemand compares the value with its threshold as a float.
fn number(tokens: Tokens) -> serde_json::Value {
    json!(tokens.as_f64())
}

/// Writes `text` atomically, readable as `settings` say; a directory it makes is open to every user
/// (the dashboard runs as each of them).
pub fn write(settings: &OnDemand, text: &str) -> Result<(), String> {
    let path = &settings.balance_file;
    let failed = |e: std::io::Error| format!("cannot write the OnDemand balance file {}: {e}", path.display());
    let (gid, mode) = match &settings.readers {
        OnDemandReaders::Everyone => (None, 0o644),
        OnDemandReaders::Group(name) => match nix::unistd::Group::from_name(name) {
            Ok(Some(group)) => (Some(group.gid.as_raw()), 0o640),
            Ok(None) => return Err(format!("ondemand.group '{name}' does not exist: {} not written", path.display())),
            Err(e) => return Err(format!("cannot look up ondemand.group '{name}': {e}")),
        },
    };
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    // A directory others can write lets them plant the file (or its temp name) first: their own
    // balances shown to everyone, or ours never written (the audit's L6).
    crate::daemon::file_trust::refuse_if_others_can_write(dir, "the OnDemand balance file's directory", None)
        .map_err(|e| format!("{e}: {} not written", path.display()))?;
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(failed)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(failed)?;
    }
    gputokens::snapshot::write_atomically_with(path, text, gid, mode).map_err(failed)
}

/// The file's writer: a thread of its own, since the snapshot is published under the lock that
/// answers users and the file sits on storage OnDemand's hosts mount (a hung NFS server must stall
/// nothing but this thread; the audit's L6). Only the newest text waits: one that was not written
/// yet when a newer came is dropped.
struct Writer {
    state: Mutex<WriterState>,
    changed: Condvar,
}

#[derive(Default)]
struct WriterState {
    pending: Option<(OnDemand, String)>,
    writing: bool,
}

static WRITER: OnceLock<Option<Writer>> = OnceLock::new();

fn writer() -> Option<&'static Writer> {
    WRITER
        .get_or_init(|| {
            let spawned = std::thread::Builder::new().name("ondemand-file".into()).spawn(|| {
                let Some(writer) = writer() else { return };
                loop {
                    let mut state = writer.state.lock().unwrap_or_else(PoisonError::into_inner);
                    while state.pending.is_none() {
                        state = writer.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
                    }
                    let (settings, text) = state.pending.take().expect("pending");
                    state.writing = true;
                    drop(state);
                    let written = std::panic::catch_unwind(|| write(&settings, &text));
                    match written {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::warn!("{e}"),
                        Err(_) => tracing::error!("writing the OnDemand balance file panicked; tried again next cycle"),
                    }
                    writer.state.lock().unwrap_or_else(PoisonError::into_inner).writing = false;
                    writer.changed.notify_all();
                }
            });
            match spawned {
                Ok(_) => Some(Writer { state: Mutex::default(), changed: Condvar::new() }),
                Err(e) => {
                    tracing::warn!("cannot start the OnDemand file's writer ({e}): it is written in place");
                    None
                }
            }
        })
        .as_ref()
}

/// Hands `text` to the writer thread (written in place if it could not start); a failure is
/// logged there (the dashboard keeps the last file).
pub fn write_later(settings: &OnDemand, text: String) {
    let Some(writer) = writer() else {
        if let Err(e) = write(settings, &text) {
            tracing::warn!("{e}");
        }
        return;
    };
    writer.state.lock().unwrap_or_else(PoisonError::into_inner).pending = Some((settings.clone(), text));
    writer.changed.notify_all();
}

/// Waits up to `timeout` for the writer to finish what it was handed (a one-shot command, before
/// it exits); false when it has not.
pub fn flush(timeout: Duration) -> bool {
    let Some(writer) = WRITER.get().and_then(Option::as_ref) else { return true };
    let state = writer.state.lock().unwrap_or_else(PoisonError::into_inner);
    let (state, _) = writer
        .changed
        .wait_timeout_while(state, timeout, |s| s.pending.is_some() || s.writing)
        .unwrap_or_else(PoisonError::into_inner);
    state.pending.is_none() && !state.writing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let mut planted = settings();
        planted.balance_file = dir.path().join("balances.json");
        let refused = write(&planted, "{}").unwrap_err();
        assert!(refused.contains("is writable by every user") && refused.contains("not written"), "{refused}");
        assert!(!planted.balance_file.exists());
    }

    fn settings() -> OnDemand {
        OnDemand {
            balance_file: "/tmp/x.json".into(),
            unit: "GPU tokens".into(),
            project_type: "account".into(),
            readers: OnDemandReaders::Everyone,
        }
    }

    #[test]
    fn users_then_each_pools_members_in_format_version_1() {
        let users = [("alice", "46".parse().unwrap()), ("bob", "-10".parse().unwrap())];
        let pools = [PoolBalance { account: "lab", balance: "12.5".parse().unwrap(), members: vec!["alice", "bob"] }];
        let text = render(&settings(), 1_795_000_000, &users, &pools);
        let file: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(file["version"], 1);
        assert_eq!(file["timestamp"], 1_795_000_000);
        assert_eq!(file["config"], json!({ "unit": "GPU tokens", "project_type": "account" }));
        assert_eq!(
            file["balances"],
            json!([
                { "user": "alice", "value": 46.0 },
                { "user": "bob", "value": -10.0 },
                { "user": "alice", "project": "lab", "value": 12.5 },
                { "user": "bob", "project": "lab", "value": 12.5 },
            ])
        );
    }

    /// Handed to the writer thread, the file appears without the caller waiting for it.
    #[test]
    fn the_writer_thread_writes_the_newest_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings();
        s.balance_file = dir.path().join("balances.json");
        write_later(&s, "{\"n\": 1}\n".into());
        write_later(&s, "{\"n\": 2}\n".into());
        assert!(flush(Duration::from_secs(10)));
        assert_eq!(std::fs::read_to_string(&s.balance_file).unwrap(), "{\"n\": 2}\n");
    }

    #[test]
    fn written_with_the_readers_mode() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings();
        s.balance_file = dir.path().join("ood/balances.json");
        write(&s, "{}\n").unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&s.balance_file), mode(&dir.path().join("ood"))), (0o644, 0o755));
        s.readers = OnDemandReaders::Group("no-such-group-here".into());
        let err = write(&s, "{}\n").unwrap_err();
        assert!(err.contains("ondemand.group 'no-such-group-here' does not exist"), "{err}");
    }
}
