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
    let path = absolute(path);
    let (me, my_group) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
    let mut checked = path.as_path();
    let mut own = true;
    loop {
        match std::fs::metadata(checked) {
            Ok(meta) => {
                if let Some(why) = why_others_can_change(&meta, own, me, my_group) {
                    let place = match own {
                        true => format!("{what} {}", checked.display()),
                        false => format!("{}, above {what} {},", checked.display(), path.display()),
                    };
                    return Some(format!("{place} {why}"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Some(format!("cannot check {what} {}: {e}", checked.display())),
        }
        match checked.parent() {
            Some(parent) => checked = parent,
            None => return None,
        }
        own = false;
    }
}

/// What lets others change a file or directory (`own`), or replace what is in a directory above
/// it (where a sticky bit keeps them to their own entries).
fn why_others_can_change(meta: &std::fs::Metadata, own: bool, me: u32, my_group: u32) -> Option<String> {
    let mode = meta.mode() & 0o7777;
    let kept_to_own_entries = !own && meta.is_dir() && mode & STICKY != 0;
    if meta.uid() != 0 && meta.uid() != me {
        return Some(format!(
            "belongs to uid {}, who could change it: it must belong to root or this program's user",
            meta.uid()
        ));
    }
    if mode & 0o002 != 0 && !kept_to_own_entries {
        return Some(format!("is writable by every user (mode {mode:o}): chmod o-w it"));
    }
    if mode & 0o020 != 0 && meta.gid() != 0 && meta.gid() != my_group && !kept_to_own_entries {
        return Some(format!(
            "is writable by the members of group {} (mode {mode:o}): chmod g-w it, or give it to root's group",
            group_name(meta.gid())
        ));
    }
    None
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
        assert_eq!(untrusted(&file, "the snapshot"), None);
        mode(&inner, 0o1777);
        assert!(untrusted(&inner, "the jobs directory").is_some(), "sticky or not, its own entries are open");
        mode(top.path(), 0o700);
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
}
