//! Shadow mode for `sbalance` and the status page: what the plugins would have done, cut to what the
//! viewer may see. Admins get every controller's counts and every user's would-be refusals (uids
//! named here); anyone else only how many of their own submissions would have been refused. Reads
//! the controllers' status files and looks names up: called with the answering lock released.

use std::collections::BTreeMap;

use gputokens::protocol::{ControllerShadow, ShadowView};
use gputokens::Config;

/// Whose would-be refusals a view counts.
pub enum Scope<'a> {
    /// Every user's (an admin's view).
    Everyone,
    /// One user's: its name, and its uid when it has one on this host.
    User { name: &'a str, uid: Option<u32> },
}

/// None while gputokens enforces and no controller's plugin is in shadow mode; for anyone but an
/// admin, None while gputokens enforces (a plugin left in shadow mode is the admins' to mend, and
/// which one it is theirs to know).
pub fn view(config: &Config, scope: Scope, now: i64) -> Option<ShadowView> {
    let enforce = config.admission.enforce;
    if enforce && !matches!(scope, Scope::Everyone) {
        return None;
    }
    let controllers = crate::cycles::shadow::in_shadow_mode(&config.paths.controller_status, now);
    if enforce && controllers.is_empty() {
        return None;
    }
    let refused_by_uid = controllers.iter().flat_map(|(_, shadow)| &shadow.refused_by_uid);
    let mut refused = BTreeMap::new();
    let everyone = matches!(scope, Scope::Everyone);
    match scope {
        Scope::Everyone => {
            let mut names: BTreeMap<u32, String> = BTreeMap::new();
            for (uid, count) in refused_by_uid {
                let name = names.entry(*uid).or_insert_with(|| user_name(*uid));
                *refused.entry(name.clone()).or_insert(0) += count;
            }
        }
        Scope::User { name, uid } => {
            let own = refused_by_uid.filter(|(u, _)| Some(**u) == uid).map(|(_, count)| count).sum();
            refused.insert(name.to_string(), own);
        }
    }
    let controllers = match everyone {
        true => controllers
            .into_iter()
            .map(|(controller, shadow)| ControllerShadow { controller, since: shadow.since, would: shadow.would })
            .collect(),
        false => Vec::new(),
    };
    Some(ShadowView { enforce, everyone, controllers, refused })
}

/// The user name of `uid`, or the number when this host has none.
fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::controller_status::{ControllerStatus, Shadow, ViewStatus};
    use std::path::Path;

    const NOW: i64 = 1_795_430_400;
    /// A uid no host gives a name to.
    const NAMELESS: u32 = 4_000_000_001;

    fn site(enforce: bool) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[paths]\nsnapshot = \"{}/balances.snapshot\"\n[admission]\nenforce = {enforce}\n",
            dir.path().display()
        );
        std::fs::create_dir(dir.path().join("controllers")).unwrap();
        (dir, Config::parse(&text, Path::new("t.toml")).unwrap())
    }

    fn write(config: &Config, host: &str, refused: &[(u32, u64)]) {
        let shadow = Shadow {
            since: NOW - 60,
            would: [("refuse".into(), 9)].into(),
            refused_by_uid: refused.iter().copied().collect(),
        };
        let status = ControllerStatus {
            host: host.into(),
            pid: 1,
            written: NOW,
            snapshot: config.paths.snapshot.clone(),
            view: ViewStatus::Unavailable { problem: "missing".into() },
            shadow: Some(shadow),
        };
        let path = config.paths.controller_status.join(format!("{host}.json"));
        std::fs::write(path, status.to_json()).unwrap();
    }

    #[test]
    fn admins_get_every_controller_and_user_others_their_own_count() {
        let (_dir, config) = site(false);
        write(&config, "ctl2", &[(0, 2), (NAMELESS, 1)]);
        write(&config, "ctl1", &[(0, 1), (1234, 5)]);
        let all = view(&config, Scope::Everyone, NOW).unwrap();
        assert_eq!(all.controllers.iter().map(|c| c.controller.as_str()).collect::<Vec<_>>(), ["ctl1", "ctl2"]);
        assert_eq!(all.refused.get("root"), Some(&3), "summed over controllers, named: {all:?}");
        assert_eq!(all.refused.get(&NAMELESS.to_string()), Some(&1), "a uid without a name is its number");
        let own = view(&config, Scope::User { name: "root", uid: Some(0) }, NOW).unwrap();
        assert_eq!((own.everyone, own.controllers.len()), (false, 0));
        assert_eq!(own.refused, [("root".to_string(), 3)].into());
        let none = view(&config, Scope::User { name: "ghost", uid: None }, NOW).unwrap();
        assert_eq!(none.refused, [("ghost".to_string(), 0)].into());
    }

    #[test]
    fn enforcing_with_no_plugin_in_shadow_mode_shows_nothing() {
        let (_dir, config) = site(true);
        assert_eq!(view(&config, Scope::Everyone, NOW), None);
        write(&config, "ctl1", &[(0, 1)]);
        assert_eq!(view(&config, Scope::Everyone, NOW + 31), None, "a status file no longer written");
        assert!(view(&config, Scope::Everyone, NOW).is_some_and(|v| v.enforce && v.controllers.len() == 1));
        let (_dir, shadow) = site(false);
        assert!(view(&shadow, Scope::Everyone, NOW).is_some_and(|v| !v.enforce && v.controllers.is_empty()));
    }

    /// accountd enforces, a plugin does not: the admins' to mend; users are told nothing of it.
    #[test]
    fn a_plugin_left_in_shadow_mode_is_shown_to_admins_only() {
        let (_dir, config) = site(true);
        write(&config, "ctl1", &[(0, 1)]);
        assert!(view(&config, Scope::Everyone, NOW).is_some());
        assert_eq!(view(&config, Scope::User { name: "root", uid: Some(0) }, NOW), None);
    }
}
