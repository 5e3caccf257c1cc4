//! Who may do what: only root, the SlurmUser and configured admins change
//! balances; everyone else sees only their own balance unless balances are public.

use nix::unistd::{getgrouplist, Gid, Group, Uid, User};

use crate::config::Config;

/// A caller as identified by the kernel (SO_PEERCRED on accountd's socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub name: String,
    pub admin: bool,
}

impl Caller {
    /// Resolves `uid` and decides whether it is an admin under `cfg`.
    pub fn identify(uid: u32, cfg: &Config) -> Caller {
        let user = User::from_uid(Uid::from_raw(uid)).ok().flatten();
        let name = user.as_ref().map(|u| u.name.clone()).unwrap_or_else(|| uid.to_string());
        let admin = uid == 0
            || name == cfg.slurm_user
            || cfg.admins.users.contains(&name)
            || user.as_ref().is_some_and(|u| in_any_group(u, &cfg.admins.groups));
        Caller { uid, name, admin }
    }

    /// A caller named by a trusted proxy: the system's user of that name, else (no account on this
    /// host) the name alone, an admin only by name.
    pub fn named(name: &str, cfg: &Config) -> Caller {
        match User::from_name(name).ok().flatten() {
            Some(user) if user.name == name => Caller::identify(user.uid.as_raw(), cfg),
            _ => Caller {
                uid: u32::MAX,
                name: name.to_string(),
                admin: name == cfg.slurm_user || cfg.admins.users.iter().any(|a| a == name),
            },
        }
    }

    /// Whether this caller may see `user`'s balance.
    pub fn may_view(&self, user: &str, cfg: &Config) -> bool {
        self.admin || cfg.balances_public || self.name == user
    }
}

fn in_any_group(user: &User, groups: &[String]) -> bool {
    if groups.is_empty() {
        return false;
    }
    let Ok(cname) = std::ffi::CString::new(user.name.as_str()) else { return false };
    let member_of: Vec<Gid> = getgrouplist(&cname, user.gid).unwrap_or_default();
    groups.iter().any(|g| Group::from_name(g).ok().flatten().is_some_and(|group| member_of.contains(&group.gid)))
}

/// Whether `name` is an account on this system.
pub fn system_user_exists(name: &str) -> bool {
    User::from_name(name).ok().flatten().is_some()
}
