//! The status file each slurmctld's job_submit plugin writes about the balances it decides from, so
//! that an admin (and `accountd config check --slurm`) can see from one host what every controller
//! sees: a site with a backup controller shares the snapshot's directory between both hosts, and a
//! controller that cannot read it decides every GPU job by `on_error`.
//!
//! One JSON file per controller host, `<short host name>.json`, in `[paths] controller_status`
//! (default: `controllers/` beside the snapshot): the plugin writes it, accountd only reads it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How often a plugin rewrites its file while nothing changes.
pub const WRITE_INTERVAL_SECS: i64 = 10;
/// A file older than this belongs to a plugin that stopped writing (slurmctld stopped, the
/// directory became unwritable): three intervals, so one slow write is not taken for that.
pub const STALE_AFTER_SECS: i64 = 3 * WRITE_INTERVAL_SECS;
/// The default status directory's name, beside the snapshot file.
const DEFAULT_DIR_NAME: &str = "controllers";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerStatus {
    /// gethostname() of the controller host; Slurm matches SlurmctldHost against it or its short form.
    pub host: String,
    /// slurmctld's process ID.
    pub pid: u32,
    /// When the plugin wrote this file (unix time).
    pub written: i64,
    /// The snapshot file the plugin reads.
    pub snapshot: PathBuf,
    pub view: ViewStatus,
    /// In shadow mode (`[admission] enforce = false`): what enforcement would have done since the
    /// plugin started; absent while it enforces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Shadow>,
}

/// What a plugin in shadow mode would have done, counted since `since` (unix time).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shadow {
    pub since: i64,
    /// "refuse", "deprioritize", "limit" → GPU jobs.
    pub would: std::collections::BTreeMap<String, u64>,
    /// GPU jobs that would have been refused, by their owner's uid.
    pub refused_by_uid: std::collections::BTreeMap<u32, u64>,
}

/// The balances the plugin holds when it writes the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ViewStatus {
    Ready {
        /// When accountd wrote the snapshot (unix time).
        generated: i64,
        /// Seconds from `generated` to the status file's `written`.
        age_secs: i64,
        /// When accountd read the queue the snapshot's commitments come from, if it has them.
        queue_as_of: Option<i64>,
        /// When the snapshot file the plugin read was last modified (ns since the epoch): a snapshot
        /// written later is one the plugin has not read yet, even within one second.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_modified_ns: Option<i64>,
    },
    /// No usable snapshot, and why (missing, unreadable, corrupt).
    Unavailable { problem: String },
}

impl ControllerStatus {
    pub fn to_json(&self) -> String {
        // A struct of strings and numbers always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    pub fn parse(text: &str) -> Result<ControllerStatus, String> {
        serde_json::from_str(text).map_err(|e| format!("not a controller status file: {e}"))
    }
}

/// `ctl1` of `ctl1.example.org`.
pub fn short_host(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// The file a controller host writes: named by its short host name, which both forms of
/// SlurmctldHost (`ctl1`, `ctl1.example.org`) lead to.
pub fn file_name(host: &str) -> String {
    format!("{}.json", short_host(host))
}

/// `[paths] controller_status` when it is not set: `controllers/` beside the snapshot, on the storage
/// the controllers already share for the snapshot.
pub fn default_dir(snapshot: &Path) -> PathBuf {
    snapshot.parent().unwrap_or(Path::new("/")).join(DEFAULT_DIR_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_back_as_written() {
        let status = ControllerStatus {
            host: "ctl1.example.org".into(),
            pid: 4242,
            written: 1_795_430_400,
            snapshot: "/shared/gputokens/balances.snapshot".into(),
            view: ViewStatus::Ready {
                generated: 1_795_430_100,
                age_secs: 300,
                queue_as_of: Some(1_795_430_090),
                file_modified_ns: Some(1_795_430_100_123_456_789),
            },
            shadow: None,
        };
        let json = status.to_json();
        assert!(json.contains("\"state\": \"ready\""), "{json}");
        assert_eq!(ControllerStatus::parse(&json), Ok(status));
        let unavailable = r#"{"host":"ctl2","pid":1,"written":5,"snapshot":"/s",
                              "view":{"state":"unavailable","problem":"the snapshot is missing"}}"#;
        let parsed = ControllerStatus::parse(unavailable).unwrap();
        assert_eq!(parsed.view, ViewStatus::Unavailable { problem: "the snapshot is missing".into() });
        assert!(ControllerStatus::parse("{}").unwrap_err().starts_with("not a controller status file: missing field"));
    }

    #[test]
    fn files_are_named_by_the_short_host_name_beside_the_snapshot() {
        assert_eq!(file_name("ctl1.example.org"), "ctl1.json");
        assert_eq!(file_name("ctl1"), "ctl1.json");
        assert_eq!(
            default_dir(Path::new("/shared/gputokens/balances.snapshot")),
            Path::new("/shared/gputokens/controllers")
        );
    }
}
