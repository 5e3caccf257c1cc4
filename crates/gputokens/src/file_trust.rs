//! Files and directories a daemon or plugin takes orders from must be changeable by root and its own
//! user alone: a config anyone can edit sets prices and admins, a snapshot directory anyone can
//! write lets them rename their own balances into place for slurmctld, and a jobs directory anyone
//! can write lets them tell the agent which GPUs a job holds. Nor may anyone else be able to swap
//! the file through a directory above it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const STICKY: u32 = 0o1000;

/// Why a user other than root and this process's owner could change `path` (named `what` in the
/// text), or replace it through a directory above it; None when none can. A missing path is
/// judged by its directories (the caller creates it, with its own modes).
pub fn untrusted(path: &Path, what: &str) -> Option<String> {
    untrusted_with(path, what, None)
}

/// [`untrusted`], also trusting `user` (the SlurmUser, whom slurmctld trusts already: the state
/// directory of the packaged unit is its) as an owner, and its primary group as a writer.
pub fn untrusted_with(path: &Path, what: &str, user: Option<&str>) -> Option<String> {
    let (mut owners, mut groups) = (vec![0, nix::unistd::geteuid().as_raw()], vec![0, nix::unistd::getegid().as_raw()]);
    if let Some(Ok(Some(user))) = user.map(nix::unistd::User::from_name) {
        owners.push(user.uid.as_raw());
        groups.push(user.gid.as_raw());
    }
    let trusted = Trusted { owners, groups };
    let written = absolute(path);
    // As written and, where a link leads elsewhere, where it leads: both chains of directories.
    let resolved = std::fs::canonicalize(&written).ok().filter(|r| *r != written);
    std::iter::once(written.as_path()).chain(resolved.as_deref()).find_map(|p| untrusted_chain(p, what, &trusted))
}

struct Trusted {
    owners: Vec<u32>,
    groups: Vec<u32>,
}

fn untrusted_chain(path: &Path, what: &str, trusted: &Trusted) -> Option<String> {
    let mut checked = path;
    // 0: the path itself, 1 and more: the directories above it.
    let mut level = 0;
    // Whether the entry below `checked` on the path exists (none below the path itself).
    let mut below_exists = false;
    loop {
        let exists = match std::fs::metadata(checked) {
            Ok(meta) => {
                if let Some(why) = why_others_can_change(checked, &meta, level, below_exists, trusted) {
                    let place = match level {
                        0 => format!("{what} {}", checked.display()),
                        _ => format!("{}, above {what} {},", checked.display(), path.display()),
                    };
                    return Some(format!("{place} {why}"));
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Some(format!("cannot check {what} {}: {e}", checked.display())),
        };
        checked = checked.parent()?;
        level += 1;
        below_exists = exists;
    }
}

/// What lets others change a file or directory (`level` 0), or replace what is in a directory
/// above it. A sticky bit keeps others to their own entries (as in /tmp): it excuses a directory
/// above the path whose entry on the path exists (`below_exists`), not one where a name on the path
/// is still to be made (others could take it first).
fn why_others_can_change(
    path: &Path,
    meta: &std::fs::Metadata,
    level: u32,
    below_exists: bool,
    trusted: &Trusted,
) -> Option<String> {
    let mode = meta.mode() & 0o7777;
    let kept_to_own_entries = level >= 1 && below_exists && meta.is_dir() && mode & STICKY != 0;
    if !trusted.owners.contains(&meta.uid()) {
        return Some(format!(
            "belongs to uid {}, who could change it: it must belong to root or this program's user",
            meta.uid()
        ));
    }
    if mode & 0o002 != 0 && !kept_to_own_entries {
        return Some(format!("is writable by every user (mode {mode:o}): chmod o-w it"));
    }
    if mode & 0o020 != 0 && !trusted.groups.contains(&meta.gid()) && !kept_to_own_entries {
        return Some(format!(
            "is writable by the members of group {} (mode {mode:o}): chmod g-w it, or give it to root's group",
            group_name(meta.gid())
        ));
    }
    // With an access control list the group bits are its mask: a named user or group of the list
    // may write whatever group owns it.
    if mode & 0o020 != 0 && !kept_to_own_entries && has_access_acl(path) {
        return Some(format!(
            "has an access control list that can let other users write it (mode {mode:o}, see getfacl): \
             setfacl -b it, or chmod g-w it"
        ));
    }
    None
}

/// Why a user other than root, this process's owner and `user` (the SlurmUser) could read the
/// secret `path` (named `what`): its mode lets every user, a group not theirs, or an access
/// control list; None when none can.
pub fn secret_readable_by_others(path: &Path, what: &str, user: Option<&str>) -> Option<String> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return Some(format!("{what} {}: {e}", path.display())),
    };
    let mode = meta.mode() & 0o7777;
    let mut groups = vec![0, nix::unistd::getegid().as_raw()];
    if let Some(Ok(Some(user))) = user.map(nix::unistd::User::from_name) {
        groups.push(user.gid.as_raw());
    }
    let shown = path.display();
    if mode & 0o004 != 0 {
        return Some(format!("{what} {shown} is readable by every user (mode {mode:o}): chmod 0600 it"));
    }
    if mode & 0o040 != 0 && !groups.contains(&meta.gid()) {
        return Some(format!(
            "{what} {shown} is readable by the group {} (mode {mode:o}): chmod 0600 it, or give it accountd's group",
            group_name(meta.gid())
        ));
    }
    if has_access_acl(path) {
        return Some(format!(
            "{what} {shown} has an access control list that can let other users read it (see getfacl): setfacl -b it"
        ));
    }
    None
}

/// Whether `path` has an access control list beyond its mode bits (a file system without them has
/// none).
fn has_access_acl(path: &Path) -> bool {
    // An empty buffer asks nothing of the kernel (rustix answers 0): a list too long for this one
    // is there all the same.
    let mut list = [0u8; 256];
    match rustix::fs::getxattr(path, "system.posix_acl_access", &mut list[..]) {
        Ok(size) => size > 0,
        Err(e) => e == rustix::io::Errno::RANGE,
    }
}

fn group_name(gid: u32) -> String {
    match nix::unistd::Group::from_gid(gid.into()) {
        Ok(Some(group)) => format!("{} (gid {gid})", group.name),
        _ => format!("gid {gid}"),
    }
}

fn absolute(path: &Path) -> PathBuf {
    match path.is_absolute() {
        true => path.to_path_buf(),
        false => std::env::current_dir().map(|cwd| cwd.join(path)).unwrap_or_else(|_| path.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_file_or_directory_others_can_write_is_untrusted_and_a_private_one_trusted() {
        let dir = tempfile::tempdir().unwrap();
        mode(dir.path(), 0o755);
        let file = dir.path().join("gputokens.toml");
        std::fs::write(&file, "").unwrap();
        mode(&file, 0o644);
        assert_eq!(untrusted(&file, "the config"), None);
        mode(&file, 0o666);
        let why = untrusted(&file, "the config").unwrap();
        assert!(why.contains("the config") && why.contains("is writable by every user (mode 666)"), "{why}");
        mode(&file, 0o644);
        assert_eq!(untrusted(&dir.path().join("missing"), "the jobs directory"), None);
    }

    #[test]
    fn a_group_others_are_in_may_not_write() {
        let dir = tempfile::tempdir().unwrap();
        mode(dir.path(), 0o755);
        let file = dir.path().join("gputokens.toml");
        std::fs::write(&file, "").unwrap();
        mode(&file, 0o664);
        // The file's group is this process's: its members are this program's own.
        assert_eq!(untrusted(&file, "the config"), None);
        if nix::unistd::geteuid().is_root() {
            let users = nix::unistd::Group::from_name("users").unwrap().expect("group users").gid;
            nix::unistd::chown(&file, None, Some(users)).unwrap();
            let why = untrusted(&file, "the config").unwrap();
            assert!(why.contains("is writable by the members of group users"), "{why}");
            mode(&file, 0o644);
            assert_eq!(untrusted(&file, "the config"), None, "readable by the group only");
        }
    }

    /// An access control list can give a user write that the mode bits show only as the group's
    /// (its mask): a list that lets anyone but the owner write is untrusted, one that does not is
    /// not (tests/cluster/install.sh installs setfacl).
    #[test]
    fn an_access_control_list_that_lets_others_write_is_untrusted() {
        let dir = tempfile::tempdir().unwrap();
        mode(dir.path(), 0o755);
        let file = dir.path().join("gputokens.toml");
        std::fs::write(&file, "").unwrap();
        mode(&file, 0o644);
        let setfacl = |args: &[&str]| {
            let out = std::process::Command::new("setfacl").args(args).arg(&file).output().expect("setfacl");
            assert!(out.status.success(), "setfacl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        // uid 1 (daemon) may write: the group bits (the mask) show rw-, the group is this process's.
        setfacl(&["-m", "u:1:rw"]);
        let why = untrusted(&file, "the config").unwrap();
        assert!(why.contains("has an access control list that can let other users write it"), "{why}");
        // A list whose entries only read, or none: trusted.
        setfacl(&["-m", "u:1:r"]);
        assert_eq!(untrusted(&file, "the config"), None);
        setfacl(&["-b"]);
        assert_eq!(untrusted(&file, "the config"), None);
        // On a directory above too.
        let inner = dir.path().join("lib");
        std::fs::create_dir(&inner).unwrap();
        mode(&inner, 0o755);
        let out = std::process::Command::new("setfacl").args(["-m", "u:1:rwx"]).arg(&inner).output().unwrap();
        assert!(out.status.success());
        let why = untrusted(&inner.join("balances.snapshot"), "the snapshot").unwrap();
        assert!(why.starts_with(&format!("{}, above the snapshot", inner.display())), "{why}");
    }

    /// A directory above that others can write lets them rename the file away and put theirs in
    /// its place; with the sticky bit (as /tmp) they can rename only their own entries.
    #[test]
    fn a_directory_above_that_others_can_write_is_untrusted_unless_sticky() {
        let top = tempfile::tempdir().unwrap();
        let inner = top.path().join("gputokens");
        std::fs::create_dir(&inner).unwrap();
        mode(&inner, 0o755);
        let file = inner.join("balances.snapshot");
        mode(top.path(), 0o777);
        let why = untrusted(&file, "the snapshot").unwrap();
        assert!(why.starts_with(&format!("{}, above the snapshot", top.path().display())), "{why}");
        assert!(why.contains("is writable by every user (mode 777)"), "{why}");
        mode(top.path(), 0o1777);
        assert_eq!(untrusted(&file, "the snapshot"), None, "a sticky directory above one of ours");
        mode(&inner, 0o1777);
        assert!(
            untrusted(&file, "the snapshot").is_some(),
            "missing in a sticky directory: others could take its name"
        );
        std::fs::write(&file, "").unwrap();
        mode(&file, 0o644);
        assert_eq!(untrusted(&file, "the snapshot"), None, "there, ours: others cannot move it");
        assert!(untrusted(&inner, "the jobs directory").is_some(), "sticky or not, its own entries are open");
        mode(top.path(), 0o700);
    }

    /// A link is judged where it leads too: a config linked into a directory others can write.
    #[test]
    fn a_link_is_judged_where_it_leads() {
        let dir = tempfile::tempdir().unwrap();
        mode(dir.path(), 0o755);
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        mode(&open, 0o777);
        let target = open.join("gputokens.toml");
        std::fs::write(&target, "").unwrap();
        mode(&target, 0o644);
        let link = dir.path().join("gputokens.toml");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let why = untrusted(&link, "the config").unwrap();
        assert!(why.contains(&format!("{}, above the config {}", open.display(), target.display())), "{why}");
    }

    /// The SlurmUser, trusted by slurmctld already, may own what the packaged unit gives it.
    #[test]
    fn the_slurm_user_may_own_it_when_named() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let nobody = nix::unistd::User::from_name("nobody").unwrap().expect("user nobody");
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        mode(&state, 0o750);
        nix::unistd::chown(&state, Some(nobody.uid), Some(nobody.gid)).unwrap();
        let jobs = state.join("jobs");
        assert!(untrusted(&jobs, "the jobs directory").unwrap().contains(&format!("belongs to uid {}", nobody.uid)));
        assert_eq!(untrusted_with(&jobs, "the jobs directory", Some("nobody")), None);
    }

    #[test]
    fn a_file_of_another_user_is_untrusted() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gputokens.toml");
        std::fs::write(&file, "").unwrap();
        nix::unistd::chown(&file, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let why = untrusted(&file, "the config").unwrap();
        assert!(why.contains("belongs to uid 65534"), "{why}");
    }

    #[test]
    fn a_secret_is_refused_where_others_can_read_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("ledger-password");
        std::fs::write(&secret, "pw\n").unwrap();
        let chmod = |mode| std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
        chmod(0o600);
        assert_eq!(secret_readable_by_others(&secret, "[ledger] password_file", None), None);
        chmod(0o644);
        let why = secret_readable_by_others(&secret, "[ledger] password_file", None).unwrap();
        assert!(why.contains("readable by every user (mode 644)"), "{why}");
        chmod(0o640);
        // The owner's own group (this process's) may read it; another group may not.
        assert_eq!(secret_readable_by_others(&secret, "[ledger] password_file", None), None);
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&secret, None, Some(nix::unistd::Gid::from_raw(4242))).unwrap();
            let why = secret_readable_by_others(&secret, "[ledger] password_file", None).unwrap();
            assert!(why.contains("readable by the group gid 4242 (mode 640)"), "{why}");
        }
    }
}
