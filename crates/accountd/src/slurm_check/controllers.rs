//! One finding per slurmctld host (`SlurmctldHost[0]`, `[1]`, ...): which balances its job_submit
//! plugin decides from, as the status file it writes into `[paths] controller_status` says
//! (`gputokens::controller_status`). A site with a backup controller shares the snapshot's directory
//! between both hosts; this is how an admin sees, from one host, that each controller reads it.
//!
//! A backup in standby is held to the same standard as the primary: slurmctld loads the job_submit
//! plugins before it decides whether it stands by (controller.c, Slurm 22.05 to 26.05), so a
//! standby's plugin reads the snapshot all along and writes its status file like the primary's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gputokens::controller_status::{self, ControllerStatus, ViewStatus, STALE_AFTER_SECS};
use gputokens::time::span;
use gputokens::Config;

use crate::slurm_check::finding::Finding;

/// What this host sees of the controllers.
#[derive(Debug, Default)]
pub struct ControllerFacts {
    /// `[paths] controller_status`.
    pub dir: PathBuf,
    pub dir_exists: bool,
    /// In SlurmctldHost order.
    pub controllers: Vec<Controller>,
    /// Unix time of the check.
    pub now: i64,
}

#[derive(Debug)]
pub struct Controller {
    /// The SlurmctldHost name (without its address).
    pub name: String,
    /// `scontrol ping`: whether it answers; None when ping was not read.
    pub answers: Option<bool>,
    pub status: StatusRead,
}

#[derive(Debug)]
pub enum StatusRead {
    Found(ControllerStatus),
    Missing,
    Unreadable(String),
}

impl ControllerFacts {
    /// Reads the status file of each controller `scontrol show config` names; `ping` is `scontrol
    /// ping`'s output, when it ran.
    pub fn read(dir: &Path, show_config: &BTreeMap<String, String>, ping: Option<&str>, now: i64) -> ControllerFacts {
        let answers = ping.map(parse_ping).unwrap_or_default();
        let controllers = hosts(show_config)
            .into_iter()
            .map(|name| Controller {
                answers: answers.get(&name).copied(),
                status: read_status(&dir.join(controller_status::file_name(&name))),
                name,
            })
            .collect();
        ControllerFacts { dir: dir.to_path_buf(), dir_exists: dir.is_dir(), controllers, now }
    }
}

/// A status file is a few hundred lines at most; anything larger is not one.
const MAX_STATUS_BYTES: u64 = 1 << 20;

/// A controller's status file: a plain file of at most MAX_STATUS_BYTES, never read through a link
/// nor waited on as a FIFO (whoever can write the directory could plant either).
pub fn read_status(path: &Path) -> StatusRead {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return StatusRead::Missing,
        Err(e) => return StatusRead::Unreadable(e.to_string()),
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return StatusRead::Unreadable("not a plain file".into());
    }
    let mut text = String::new();
    if let Err(e) = file.take(MAX_STATUS_BYTES + 1).read_to_string(&mut text) {
        return StatusRead::Unreadable(e.to_string());
    }
    if text.len() as u64 > MAX_STATUS_BYTES {
        return StatusRead::Unreadable(format!("larger than {MAX_STATUS_BYTES} bytes"));
    }
    match ControllerStatus::parse(&text) {
        Ok(status) => StatusRead::Found(status),
        Err(e) => StatusRead::Unreadable(e),
    }
}

/// The controller names of `SlurmctldHost[N] = ctl1(10.77.0.2)` (or `= ctl1`), in index order.
pub fn hosts(show_config: &BTreeMap<String, String>) -> Vec<String> {
    let mut indexed: Vec<(usize, String)> = show_config
        .iter()
        .filter_map(|(key, value)| {
            let index = key.strip_prefix("SlurmctldHost[")?.strip_suffix(']')?.parse().ok()?;
            let name = value.split('(').next().unwrap_or("").trim();
            (!name.is_empty()).then(|| (index, name.to_string()))
        })
        .collect();
    indexed.sort();
    indexed.into_iter().map(|(_, name)| name).collect()
}

/// `Slurmctld(primary) at ctl1 is UP` lines → host → answers.
pub fn parse_ping(text: &str) -> BTreeMap<String, bool> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("Slurmctld(")?;
            let (_, rest) = rest.split_once(") at ")?;
            let (host, state) = rest.rsplit_once(" is ")?;
            Some((host.trim().to_string(), state.trim() == "UP"))
        })
        .collect()
}

pub fn findings(config: &Config, facts: &ControllerFacts) -> Vec<Finding> {
    let names: Vec<&str> = facts.controllers.iter().map(|c| c.name.as_str()).collect();
    if names.is_empty() {
        return Vec::new();
    }
    if !facts.dir_exists {
        let text = format!(
            "the controller status directory {} ([paths] controller_status) does not exist on this host, so which \
             snapshot slurmctld on {} decides from cannot be seen here; create it beside the snapshot, on storage \
             every controller shares, writable by the SlurmUser",
            facts.dir.display(),
            names.join(", ")
        );
        // One controller: this host is usually it, and the snapshot check above already speaks for it.
        return vec![if names.len() == 1 { Finding::Ok(text) } else { Finding::Problem(text) }];
    }
    let in_control = facts.controllers.iter().position(|c| c.answers == Some(true));
    facts
        .controllers
        .iter()
        .enumerate()
        .map(|(index, controller)| {
            let label = label(index, facts.controllers.len(), controller, in_control);
            one(config, facts, controller, &label)
        })
        .collect()
}

/// `slurmctld on ctl2 (backup, standing by)`.
fn label(index: usize, count: usize, controller: &Controller, in_control: Option<usize>) -> String {
    let role = match index {
        0 => "primary".to_string(),
        1 if count == 2 => "backup".to_string(),
        n => format!("backup{n}"),
    };
    // Slurm hands control down SlurmctldHost's order: the first that answers holds it.
    let state = match (controller.answers, in_control) {
        (None, _) => String::new(),
        (Some(false), _) => ", not answering scontrol ping".to_string(),
        (Some(true), Some(first)) if first == index => ", in control".to_string(),
        (Some(true), _) => ", standing by: decides from this view if it takes over".to_string(),
    };
    format!("slurmctld on {} ({role}{state})", controller.name)
}

fn one(config: &Config, facts: &ControllerFacts, controller: &Controller, label: &str) -> Finding {
    let path = facts.dir.join(controller_status::file_name(&controller.name));
    let status = match &controller.status {
        StatusRead::Found(status) => status,
        StatusRead::Missing => {
            return Finding::Problem(format!(
                "{label}: no status file {}: slurmctld is not running there, its plugin is not loaded, or it cannot \
                 write {}",
                path.display(),
                facts.dir.display()
            ))
        }
        StatusRead::Unreadable(e) => {
            return Finding::Problem(format!("{label}: cannot read its status file {}: {e}", path.display()))
        }
    };
    let silent = facts.now - status.written;
    if silent > STALE_AFTER_SECS {
        return Finding::Problem(format!(
            "{label}: its status file {} was last written {} ago (pid {}; it is rewritten every {}s): slurmctld there \
             stopped, or its plugin can no longer write {}",
            path.display(),
            span(silent),
            status.pid,
            controller_status::WRITE_INTERVAL_SECS,
            facts.dir.display()
        ));
    }
    let on_error = config.admission.on_error.as_str();
    let snapshot = status.snapshot.display();
    let generated = match &status.view {
        ViewStatus::Unavailable { problem } => {
            return Finding::Problem(format!(
                "{label}: its plugin has no usable snapshot ({problem}: {snapshot}); on_error = \"{on_error}\" decides \
                 every GPU job there"
            ))
        }
        ViewStatus::Ready { generated, .. } => *generated,
    };
    if status.snapshot != config.paths.snapshot {
        return Finding::Problem(format!(
            "{label}: its plugin reads {snapshot}, but [paths] snapshot here is {}: it decides from balances this \
             accountd does not write",
            config.paths.snapshot.display()
        ));
    }
    let age = facts.now - generated;
    match config.admission.max_snapshot_age {
        Some(max) if age > max.as_secs() as i64 => Finding::Problem(format!(
            "{label}: decides from the snapshot {snapshot} written {} ago, older than max_snapshot_age ({}): \
             on_error = \"{on_error}\" decides every GPU job there; is accountd writing it, and does that host see \
             the shared directory's current contents?",
            span(age),
            humantime::format_duration(max)
        )),
        Some(max) => Finding::Ok(format!(
            "{label}: decides from the snapshot {snapshot} written {} ago (max_snapshot_age {})",
            span(age),
            humantime::format_duration(max)
        )),
        None => Finding::Ok(format!(
            "{label}: decides from the snapshot {snapshot} written {} ago (max_snapshot_age off: never stale)",
            span(age)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm_check::parse_show_config;

    const NOW: i64 = 1_795_430_400;

    /// `scontrol show config` of a site with a primary and a backup (22.05's layout).
    const SHOW_CONFIG: &str = "Configuration data as of 2026-11-22T09:40:00
JobSubmitPlugins        = gputokens
SlurmctldHost[0]        = ctl1(10.77.0.2)
SlurmctldHost[1]        = ctl2
SlurmctldTimeout        = 120 sec
";
    const BOTH_UP: &str = "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is UP\n";

    struct Site {
        dir: tempfile::TempDir,
        config: Config,
    }

    impl Site {
        fn new(admission: &str) -> Site {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("controllers")).unwrap();
            let text =
                format!("[paths]\nsnapshot = \"{}/balances.snapshot\"\n[admission]\n{admission}", dir.path().display());
            let config = Config::parse(&text, Path::new("test.toml")).unwrap();
            Site { dir, config }
        }
        fn status_dir(&self) -> PathBuf {
            self.dir.path().join("controllers")
        }
        /// The file `host`'s plugin writes, `written` at, holding `view`.
        fn write(&self, host: &str, written: i64, view: ViewStatus) {
            let status = ControllerStatus {
                host: host.into(),
                pid: 777,
                written,
                snapshot: self.config.paths.snapshot.clone(),
                view,
                shadow: None,
            };
            std::fs::write(self.status_dir().join(controller_status::file_name(host)), status.to_json()).unwrap();
        }
        fn findings(&self, show_config: &str, ping: Option<&str>) -> Vec<Finding> {
            let facts = ControllerFacts::read(&self.status_dir(), &parse_show_config(show_config), ping, NOW);
            findings(&self.config, &facts)
        }
    }

    fn ready(generated: i64) -> ViewStatus {
        ViewStatus::Ready { generated, age_secs: NOW - generated, queue_as_of: None, file_modified_ns: None }
    }

    #[test]
    fn controllers_are_read_from_show_config_in_index_order() {
        let config = parse_show_config(
            "SlurmctldHost[10]       = ctl11\nSlurmctldHost[0]        = ctl1(10.77.0.2)\nSlurmctldHost[2]        = \
             ctl3.example.org(10.77.0.4)\nSlurmctldHost[1]        = ctl2\nSlurmctldPort           = 6817\n",
        );
        assert_eq!(hosts(&config), ["ctl1", "ctl2", "ctl3.example.org", "ctl11"]);
        assert!(hosts(&parse_show_config("SlurmctldPort           = 6817\n")).is_empty());
    }

    #[test]
    fn ping_says_which_controllers_answer() {
        let text = "Slurmctld(primary) at ctl1 is DOWN\nSlurmctld(backup) at ctl2 is UP\n\
                    *****************************************\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n";
        assert_eq!(parse_ping(text), BTreeMap::from([("ctl1".into(), false), ("ctl2".into(), true)]));
    }

    #[test]
    fn controllers_reading_a_fresh_snapshot_are_ok() {
        let site = Site::new("max_snapshot_age = \"2h\"\n");
        site.write("ctl1", NOW - 4, ready(NOW - 300));
        // A fully qualified host name writes under its short name.
        site.write("ctl2.example.org", NOW - 9, ready(NOW - 300));
        let snapshot = site.config.paths.snapshot.display().to_string();
        assert_eq!(
            site.findings(SHOW_CONFIG, Some(BOTH_UP)),
            [
                Finding::Ok(format!(
                    "slurmctld on ctl1 (primary, in control): decides from the snapshot {snapshot} written 5m ago \
                     (max_snapshot_age 2h)"
                )),
                Finding::Ok(format!(
                    "slurmctld on ctl2 (backup, standing by: decides from this view if it takes over): decides from \
                     the snapshot {snapshot} written 5m ago (max_snapshot_age 2h)"
                )),
            ]
        );
    }

    #[test]
    fn without_max_snapshot_age_the_age_is_said() {
        let site = Site::new("max_snapshot_age = \"off\"\n");
        site.write("ctl1", NOW, ready(NOW - 3 * 86400));
        site.write("ctl2", NOW, ready(NOW - 3 * 86400));
        let found = site.findings(SHOW_CONFIG, None);
        assert!(
            matches!(&found[0], Finding::Ok(t) if t.starts_with("slurmctld on ctl1 (primary): decides from the snapshot")
                && t.ends_with("written 3days ago (max_snapshot_age off: never stale)")),
            "{found:#?}"
        );
    }

    #[test]
    fn a_controller_without_a_status_file_is_named() {
        let site = Site::new("");
        site.write("ctl1", NOW, ready(NOW));
        let found = site.findings(SHOW_CONFIG, Some(BOTH_UP));
        assert!(matches!(found[0], Finding::Ok(_)), "{found:#?}");
        let dir = site.status_dir();
        assert_eq!(
            found[1],
            Finding::Problem(format!(
                "slurmctld on ctl2 (backup, standing by: decides from this view if it takes over): no status file \
                 {}/ctl2.json: slurmctld is not running there, its plugin is not loaded, or it cannot write {}",
                dir.display(),
                dir.display()
            ))
        );
    }

    #[test]
    fn a_status_file_not_rewritten_is_stale() {
        let site = Site::new("");
        site.write("ctl1", NOW - STALE_AFTER_SECS, ready(NOW - 60));
        site.write("ctl2", NOW - STALE_AFTER_SECS - 1, ready(NOW - 60));
        let found =
            site.findings(SHOW_CONFIG, Some("Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is DOWN\n"));
        assert!(matches!(found[0], Finding::Ok(_)), "{found:#?}");
        let Finding::Problem(text) = &found[1] else { panic!("{found:#?}") };
        assert!(
            text.starts_with("slurmctld on ctl2 (backup, not answering scontrol ping): its status file ")
                && text.contains(
                    "ctl2.json was last written 31s ago (pid 777; it is rewritten every 10s): slurmctld \
                                  there stopped, or its plugin can no longer write "
                ),
            "{text}"
        );
    }

    #[test]
    fn a_controller_without_a_usable_snapshot_says_why() {
        let site = Site::new("on_error = \"reject\"\n");
        let problem = "the snapshot is missing".to_string();
        site.write("ctl1", NOW, ready(NOW));
        site.write("ctl2", NOW, ViewStatus::Unavailable { problem });
        // The primary is down: the backup holds control.
        let ping = "Slurmctld(primary) at ctl1 is DOWN\nSlurmctld(backup) at ctl2 is UP\n";
        let found = site.findings(SHOW_CONFIG, Some(ping));
        assert_eq!(
            found[1],
            Finding::Problem(format!(
                "slurmctld on ctl2 (backup, in control): its plugin has no usable snapshot (the snapshot is missing: \
                 {}); on_error = \"reject\" decides every GPU job there",
                site.config.paths.snapshot.display()
            ))
        );
    }

    #[test]
    fn a_snapshot_older_than_max_snapshot_age_is_a_problem() {
        let site = Site::new("max_snapshot_age = \"1h\"\n");
        site.write("ctl1", NOW, ready(NOW - 3600));
        site.write("ctl2", NOW, ready(NOW - 3601));
        let found = site.findings(SHOW_CONFIG, None);
        assert!(matches!(found[0], Finding::Ok(_)), "exactly max_snapshot_age is not stale: {found:#?}");
        let Finding::Problem(text) = &found[1] else { panic!("{found:#?}") };
        assert!(text.starts_with("slurmctld on ctl2 (backup): decides from the snapshot "), "{text}");
        assert!(text.contains("written 1h ago, older than max_snapshot_age (1h): on_error = \"accept\""), "{text}");
    }

    #[test]
    fn a_plugin_reading_another_snapshot_is_a_problem() {
        let site = Site::new("");
        let status = ControllerStatus {
            host: "ctl1".into(),
            pid: 1,
            written: NOW,
            snapshot: "/var/lib/gputokens/balances.snapshot".into(),
            view: ready(NOW),
            shadow: None,
        };
        std::fs::write(site.status_dir().join("ctl1.json"), status.to_json()).unwrap();
        std::fs::write(site.status_dir().join("ctl2.json"), "{ half a file").unwrap();
        let found = site.findings(SHOW_CONFIG, None);
        let Finding::Problem(text) = &found[0] else { panic!("{found:#?}") };
        assert!(text.contains("its plugin reads /var/lib/gputokens/balances.snapshot, but [paths] snapshot here is"));
        let Finding::Problem(text) = &found[1] else { panic!("{found:#?}") };
        assert!(text.contains("ctl2.json: not a controller status file: "), "{text}");
    }

    #[test]
    fn a_missing_status_directory_is_one_finding() {
        let site = Site::new("");
        std::fs::remove_dir(site.status_dir()).unwrap();
        let found = site.findings(SHOW_CONFIG, None);
        assert_eq!(found.len(), 1, "{found:#?}");
        let Finding::Problem(text) = &found[0] else { panic!("two controllers: {found:#?}") };
        assert!(text.contains("does not exist on this host, so which snapshot slurmctld on ctl1, ctl2 decides from"));
        let one = site.findings("SlurmctldHost[0]        = ctl1\n", None);
        assert!(matches!(&one[..], [Finding::Ok(_)]), "one controller: a notice, {one:#?}");
        assert!(site.findings("JobSubmitPlugins        = gputokens\n", None).is_empty(), "no controller named");
    }
}
