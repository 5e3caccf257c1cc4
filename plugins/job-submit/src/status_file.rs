//! This controller's status file (`gputokens::controller_status`): which balances the plugin holds,
//! written into `[paths] controller_status` (a directory on the storage the controllers share), so
//! that `accountd config check --slurm` on any host sees what each slurmctld sees. Written by a
//! thread of its own (`status_thread`), never by `job_submit` nor the snapshot watcher: a slow or
//! hung shared file system stalls that thread alone.
//!
//! A backup slurmctld in standby writes one too: slurmctld loads the job_submit plugins (and calls
//! their `init`, which starts the watcher) in `main` before it decides between primary and standby
//! (Slurm 22.05 `src/slurmctld/controller.c`: `job_submit_plugin_init()` comes before the loop that
//! calls `run_backup()`; 24.11 and later do the same with `job_submit_g_init()`), and the takeover's
//! `read_slurm_conf()` reloads the plugin only when JobSubmitPlugins changed. So a standby's watcher
//! reads the snapshot all along, and its file says what it would decide from at takeover.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gputokens::controller_status::{self, ControllerStatus, ViewStatus, WRITE_INTERVAL_SECS};

use crate::ffi::Level;
use crate::watch::View;

pub struct StatusFile {
    dir: PathBuf,
    snapshot: PathBuf,
    host: String,
    pid: u32,
    last_written: Option<i64>,
    /// The view changed since the last write.
    changed: bool,
    /// The failure logged (once) and not followed by a write that worked yet.
    failing: Option<String>,
}

impl StatusFile {
    pub fn new(dir: PathBuf, snapshot: PathBuf, host: String, pid: u32) -> StatusFile {
        StatusFile { dir, snapshot, host, pid, last_written: None, changed: true, failing: None }
    }

    /// Follows an edited config: a new directory is written at once and its problems logged anew.
    pub fn configure(&mut self, dir: &Path, snapshot: &Path) {
        if dir != self.dir || snapshot != self.snapshot {
            *self =
                StatusFile::new(dir.to_path_buf(), snapshot.to_path_buf(), std::mem::take(&mut self.host), self.pid);
        }
    }

    pub fn view_changed(&mut self) {
        self.changed = true;
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(controller_status::file_name(&self.host))
    }

    /// Writes the file when it is due: every WRITE_INTERVAL_SECS, and at once (at most once a
    /// second) when the view changed. A failure is logged once, until a write works again.
    pub fn tick(
        &mut self,
        now: i64,
        view: &View,
        shadow: Option<&controller_status::Shadow>,
        log: &mut dyn FnMut(Level, String),
    ) {
        let due = match self.last_written {
            None => true,
            Some(at) => now >= at + WRITE_INTERVAL_SECS || (self.changed && now > at),
        };
        if !due {
            return;
        }
        self.last_written = Some(now);
        self.changed = false;
        let status = ControllerStatus {
            host: self.host.clone(),
            pid: self.pid,
            written: now,
            snapshot: self.snapshot.clone(),
            view: view_status(view, now),
            shadow: shadow.cloned(),
        };
        let path = self.path();
        match write_atomically(&self.dir, &path, &status.to_json()) {
            Ok(()) => {
                if self.failing.take().is_some() {
                    log(Level::Info, format!("writing the controller status file {} again", path.display()));
                }
            }
            Err(e) if self.failing.is_none() => {
                log(
                    Level::Error,
                    format!(
                        "cannot write the controller status file {} ({e}); `accountd config check --slurm` cannot \
                         see which balances this controller decides from; admission is not affected (logged once)",
                        path.display()
                    ),
                );
                self.failing = Some(e);
            }
            Err(_) => {}
        }
    }
}

fn view_status(view: &View, now: i64) -> ViewStatus {
    match view {
        View::Ready(b) => ViewStatus::Ready {
            generated: b.snapshot.generated,
            age_secs: now - b.snapshot.generated,
            queue_as_of: b.snapshot.queue.as_ref().map(|q| q.as_of),
            file_modified_ns: b.modified_ns.and_then(|ns| i64::try_from(ns).ok()),
        },
        View::Unavailable(problem) => ViewStatus::Unavailable { problem: problem.to_string() },
    }
}

/// Temp file + rename, so that a reader never sees half a file. The directory is never created:
/// it is the admin's, on shared storage, writable by the SlurmUser. No fsync: the file is rewritten
/// within seconds, and an fsync on NFS waits for the server.
fn write_atomically(dir: &Path, path: &Path, text: &str) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a directory", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("the directory {} does not exist", dir.display()))
        }
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Named by host and PID: controllers share the directory.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = gputokens::snapshot::create_new_private(&tmp)?;
        file.write_all(text.as_bytes())?;
        // Readable by accountd (root) and the SlurmUser's group, not by every user: in shadow mode it
        // names the uids that would be refused, that is, who is at the floor.
        file.set_permissions(std::fs::Permissions::from_mode(0o640))?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::Problem;
    use std::os::unix::fs::MetadataExt;

    const NOW: i64 = 1_795_430_400;

    struct Fixture {
        dir: tempfile::TempDir,
        file: StatusFile,
        log: Vec<(Level, String)>,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let status = dir.path().join("controllers");
            std::fs::create_dir(&status).unwrap();
            let file = StatusFile::new(status, "/shared/balances.snapshot".into(), "ctl1.example.org".into(), 4242);
            Fixture { dir, file, log: Vec::new() }
        }
        fn tick(&mut self, now: i64, view: &View) {
            let log = &mut self.log;
            self.file.tick(now, view, None, &mut |level, m| log.push((level, m)));
        }
        fn read(&self) -> Option<ControllerStatus> {
            let text = std::fs::read_to_string(self.dir.path().join("controllers/ctl1.json")).ok()?;
            Some(ControllerStatus::parse(&text).unwrap())
        }
    }

    fn missing() -> View {
        View::Unavailable(Problem::Missing)
    }

    #[test]
    fn writes_what_it_holds_every_interval_and_at_once_on_a_change() {
        let mut f = Fixture::new();
        f.tick(NOW, &missing());
        let status = f.read().expect("written at the first tick");
        assert_eq!(
            status,
            ControllerStatus {
                host: "ctl1.example.org".into(),
                pid: 4242,
                written: NOW,
                snapshot: "/shared/balances.snapshot".into(),
                view: ViewStatus::Unavailable { problem: "the snapshot is missing".into() },
                shadow: None,
            }
        );
        let path = f.dir.path().join("controllers/ctl1.json");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o640, "not every user's (audit N8)");
        f.tick(NOW + WRITE_INTERVAL_SECS - 1, &missing());
        assert_eq!(f.read().unwrap().written, NOW, "not rewritten within the interval");
        f.tick(NOW + WRITE_INTERVAL_SECS, &missing());
        assert_eq!(f.read().unwrap().written, NOW + WRITE_INTERVAL_SECS);

        let corrupt = View::Unavailable(Problem::Corrupt("not a gputokens snapshot".into()));
        f.file.view_changed();
        f.tick(NOW + WRITE_INTERVAL_SECS, &corrupt);
        assert_eq!(f.read().unwrap().written, NOW + WRITE_INTERVAL_SECS, "at most once a second");
        f.tick(NOW + WRITE_INTERVAL_SECS + 1, &corrupt);
        let status = f.read().unwrap();
        assert_eq!(status.written, NOW + WRITE_INTERVAL_SECS + 1, "a change is written at once");
        let problem = "the snapshot is corrupt: not a gputokens snapshot".to_string();
        assert_eq!(status.view, ViewStatus::Unavailable { problem });
        let names: Vec<_> =
            std::fs::read_dir(f.dir.path().join("controllers")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["ctl1.json"], "no temp file left");
        assert!(f.log.is_empty(), "{:?}", f.log);
    }

    #[test]
    fn a_ready_view_is_written_with_its_snapshots_time_and_age() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir.path().join("balances.snapshot");
        let text = format!(
            "gputokens-snapshot 1\ngenerated {}\nfloor -10000000\ndaily 1000000\nmonthly 0\ninitial 100000000\n",
            NOW - 300
        );
        gputokens::snapshot::write_atomically(&snapshot, &text).unwrap();
        // The file's modification time as the plugin read it: what a waiting reader compares.
        let modified = gputokens::file_stamp::Stamp::read(&snapshot).unwrap().mtime_ns() as i64;
        let mut monitor = crate::watch::Monitor::new(
            snapshot,
            None,
            gputokens::config::admission::OnError::Accept,
            Box::new(|_| crate::watch::Lookup::NotFound),
            vec![],
        );
        monitor.tick(NOW, &mut |_, _| {});
        let mut f = Fixture::new();
        f.tick(NOW, &monitor.view());
        assert_eq!(
            f.read().unwrap().view,
            ViewStatus::Ready {
                generated: NOW - 300,
                age_secs: 300,
                queue_as_of: None,
                file_modified_ns: Some(modified)
            }
        );
    }

    #[test]
    fn a_missing_directory_is_logged_once_and_never_created() {
        let mut f = Fixture::new();
        let gone = f.dir.path().join("not-there");
        f.file.configure(&gone, Path::new("/shared/balances.snapshot"));
        for n in 0..3 {
            f.tick(NOW + n * WRITE_INTERVAL_SECS, &missing());
        }
        assert!(!gone.exists(), "the plugin created the directory");
        assert_eq!(f.log.len(), 1, "{:?}", f.log);
        let (level, message) = &f.log[0];
        assert_eq!(*level, Level::Error);
        assert!(
            message.starts_with(&format!(
                "cannot write the controller status file {}/ctl1.json (the directory {} does not exist)",
                gone.display(),
                gone.display()
            )),
            "{message}"
        );

        std::fs::create_dir(&gone).unwrap();
        f.tick(NOW + 3 * WRITE_INTERVAL_SECS, &missing());
        assert!(gone.join("ctl1.json").exists());
        assert_eq!(f.log.len(), 2);
        assert!(f.log[1].1.starts_with("writing the controller status file"), "{:?}", f.log);
    }

    #[test]
    fn an_unwritable_directory_is_logged_once() {
        let mut f = Fixture::new();
        let file = f.dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        f.file.configure(&file, Path::new("/s"));
        f.tick(NOW, &missing());
        f.tick(NOW + WRITE_INTERVAL_SECS, &missing());
        assert_eq!(f.log.len(), 1, "{:?}", f.log);
        assert!(f.log[0].1.contains("a-file is not a directory"), "{:?}", f.log);
    }
}
