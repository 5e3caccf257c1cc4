//! Shadow mode (`[admission] enforce = false`) as accountd shows it: whether gputokens enforces, and
//! what each controller's plugin would have done, read from the status files the plugins write
//! (`[paths] controller_status`) each check cycle, into /metrics.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use gputokens::controller_status::{ControllerStatus, STALE_AFTER_SECS};

use crate::metrics::ShadowLabels;
use crate::resources::Resources;

/// A status file is a few hundred lines at most; anything larger is not one.
const MAX_STATUS_BYTES: u64 = 1 << 20;

pub fn export(res: &Resources) {
    res.metrics.enforcing.set(i64::from(res.config.admission.enforce));
    res.metrics.shadow_decisions.clear();
    let now = gputokens::time::now();
    let Ok(entries) = std::fs::read_dir(&res.config.paths.controller_status) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        // Named by its file, `<short host name>.json`, as the plugin names it.
        let json = path.extension().and_then(|e| e.to_str()) == Some("json");
        let Some(controller) = path.file_stem().and_then(|s| s.to_str()).filter(|_| json) else { continue };
        let Some(status) = read_status(&path) else { continue };
        // A controller that stopped writing (retired, crashed) is not in shadow mode now.
        let Some(shadow) = status.shadow.filter(|_| now - status.written <= STALE_AFTER_SECS) else { continue };
        for decision in ["refuse", "deprioritize", "limit"] {
            let labels = ShadowLabels { controller: controller.to_string(), decision: decision.into() };
            let count = shadow.would.get(decision).copied().unwrap_or(0);
            res.metrics.shadow_decisions.get_or_create(&labels).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}

/// A plain file of at most MAX_STATUS_BYTES, never through a link nor waiting on a FIFO.
fn read_status(path: &std::path::Path) -> Option<ControllerStatus> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_STATUS_BYTES + 1).read_to_string(&mut text).ok()?;
    if text.len() as u64 > MAX_STATUS_BYTES {
        return None;
    }
    ControllerStatus::parse(&text).ok()
}
