//! The controller status file's own thread: the watcher hands it what to write each poll and never
//! waits for it. A status directory on a hung shared file system then stalls this thread alone:
//! the watcher goes on reloading the snapshot, and `fini` waits for it a bounded time only (the
//! audit's L10).

use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use crate::ffi::Level;
use crate::status_file::StatusFile;
use crate::watch::View;

/// What to write: all of it each time, so an update dropped while the thread is stuck loses
/// nothing the next one does not carry.
pub struct StatusUpdate {
    pub now: i64,
    pub view: Arc<View>,
    /// `[paths] controller_status` and `snapshot` as the config says now.
    pub dir: PathBuf,
    pub snapshot: PathBuf,
    /// The view changed since the last update that was taken.
    pub changed: bool,
    /// What enforcement would have done, in shadow mode.
    pub shadow: Option<gputokens::controller_status::Shadow>,
}

/// The watcher's end.
pub struct StatusFeed(SyncSender<StatusUpdate>);

impl StatusFeed {
    /// Hands `update` over without waiting; false when the thread is still busy with earlier ones
    /// (the update is dropped: the next carries as much).
    pub fn send(&self, update: StatusUpdate) -> bool {
        match self.0.try_send(update) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }
}

/// Starts the thread that writes `status`; it ends when the feed is dropped (the watcher ends).
/// `log` is how it reports a failing write.
/// Its handle is for `fini`, which waits for it a bounded time only.
pub fn spawn(status: StatusFile, log: fn(Level, String)) -> std::io::Result<(StatusFeed, std::thread::JoinHandle<()>)> {
    let (feed, updates) = sync_channel(2);
    let handle =
        std::thread::Builder::new().name("gputokens-status".into()).spawn(move || write_loop(status, updates, log))?;
    Ok((StatusFeed(feed), handle))
}

fn write_loop(mut status: StatusFile, updates: Receiver<StatusUpdate>, log: fn(Level, String)) {
    let mut log = |level, message| log(level, message);
    for update in updates {
        let write = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            status.configure(&update.dir, &update.snapshot);
            if update.changed {
                status.view_changed();
            }
            status.tick(update.now, &update.view, update.shadow.as_ref(), &mut log);
        }));
        if write.is_err() {
            log(Level::Error, "the controller status writer panicked; it goes on with the next update".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(dir: &std::path::Path, now: i64) -> StatusUpdate {
        StatusUpdate {
            now,
            view: Arc::new(View::Unavailable(crate::watch::Problem::NotLoaded)),
            dir: dir.to_path_buf(),
            snapshot: dir.join("balances.snapshot"),
            changed: true,
            shadow: None,
        }
    }

    #[test]
    fn the_watcher_never_waits_for_a_stuck_writer() {
        // A feed whose thread never takes anything: as a writer stuck on a hung file system.
        let (feed, _stuck) = sync_channel(2);
        let feed = StatusFeed(feed);
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let taken: Vec<bool> = (0..100).map(|i| feed.send(update(dir.path(), i))).collect();
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(taken.iter().filter(|t| **t).count(), 2, "two queued, the rest dropped");
    }

    #[test]
    fn the_thread_writes_what_it_is_handed_and_ends_with_the_feed() {
        let dir = tempfile::tempdir().unwrap();
        let status = StatusFile::new(dir.path().to_path_buf(), dir.path().join("s"), "ctl9".into(), 7);
        let path = status.path();
        let (feed, _writer) = spawn(status, |_, _| {}).unwrap();
        assert!(feed.send(update(dir.path(), 1_795_500_000)));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !path.exists() {
            assert!(std::time::Instant::now() < deadline, "no status file at {}", path.display());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop(feed);
    }
}
