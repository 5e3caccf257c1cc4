//! Shadow mode (`[admission] enforce = false`) as accountd shows it: whether gputokens enforces, and
//! what each controller's plugin would have done, read from the status files the plugins write
//! (`[paths] controller_status`) each check cycle, into /metrics.

use gputokens::controller_status::STALE_AFTER_SECS;

use crate::metrics::ShadowLabels;
use crate::resources::Resources;
use crate::slurm::controllers::{read_status, StatusRead};

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
        let StatusRead::Found(status) = read_status(&path) else { continue };
        // A controller that stopped writing (retired, crashed) is not in shadow mode now.
        let Some(shadow) = status.shadow.filter(|_| now - status.written <= STALE_AFTER_SECS) else { continue };
        for decision in ["refuse", "deprioritize", "limit"] {
            let labels = ShadowLabels { controller: controller.to_string(), decision: decision.into() };
            let count = shadow.would.get(decision).copied().unwrap_or(0);
            res.metrics.shadow_decisions.get_or_create(&labels).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}
