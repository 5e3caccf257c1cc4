//! Shadow mode (`[admission] enforce = false`) as accountd shows it: whether gputokens enforces, and
//! what each controller's plugin would have done, read from the status files the plugins write
//! (`[paths] controller_status`) each check cycle, into /metrics.

use gputokens::controller_status::{short_host, ControllerStatus};

use crate::metrics::ShadowLabels;
use crate::resources::Resources;

/// A status file is a few hundred lines at most; anything larger is not one.
const MAX_STATUS_BYTES: u64 = 1 << 20;

pub fn export(res: &Resources) {
    res.metrics.enforcing.set(i64::from(res.config.admission.enforce));
    res.metrics.shadow_decisions.clear();
    let Ok(entries) = std::fs::read_dir(&res.config.paths.controller_status) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let small = entry.metadata().is_ok_and(|m| m.is_file() && m.len() <= MAX_STATUS_BYTES);
        if !small || path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(status) =
            std::fs::read_to_string(&path).map_err(|e| e.to_string()).and_then(|t| ControllerStatus::parse(&t))
        else {
            continue;
        };
        let Some(shadow) = status.shadow else { continue };
        for decision in ["refuse", "deprioritize", "limit"] {
            let labels = ShadowLabels { controller: short_host(&status.host).to_string(), decision: decision.into() };
            let count = shadow.would.get(decision).copied().unwrap_or(0);
            res.metrics.shadow_decisions.get_or_create(&labels).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}
