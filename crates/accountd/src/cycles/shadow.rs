//! Shadow mode (`[admission] enforce = false`) as accountd shows it: whether gputokens enforces, and
//! what each controller's plugin would have done, read from the status files the plugins write
//! (`[paths] controller_status`): into /metrics each check cycle ([`export`]), and for `sbalance`
//! and the status page when asked ([`crate::shadow_view`]).

use std::path::Path;

use gputokens::controller_status::{Shadow, STALE_AFTER_SECS};

use crate::metrics::ShadowLabels;
use crate::resources::Resources;
use crate::slurm_check::controllers::{read_status, StatusRead};

pub fn export(res: &Resources) {
    res.metrics.enforcing.set(i64::from(res.config.admission.enforce));
    res.metrics.shadow_decisions.clear();
    for (controller, shadow) in in_shadow_mode(&res.config.paths.controller_status, gputokens::time::now()) {
        for decision in ["refuse", "deprioritize", "limit"] {
            let labels = ShadowLabels { controller: controller.clone(), decision: decision.into() };
            let count = shadow.would.get(decision).copied().unwrap_or(0);
            res.metrics.shadow_decisions.get_or_create(&labels).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}

/// The controllers whose plugins are in shadow mode now, by name, with their counts, in name order.
pub fn in_shadow_mode(dir: &Path, now: i64) -> Vec<(String, Shadow)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        // Named by its file, `<short host name>.json`, as the plugin names it.
        let json = path.extension().and_then(|e| e.to_str()) == Some("json");
        let Some(controller) = path.file_stem().and_then(|s| s.to_str()).filter(|_| json) else { continue };
        let StatusRead::Found(status) = read_status(&path) else { continue };
        // A controller that stopped writing (retired, crashed) is not in shadow mode now.
        let Some(shadow) = status.shadow.filter(|_| now - status.written <= STALE_AFTER_SECS) else { continue };
        found.push((controller.to_string(), shadow));
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}
