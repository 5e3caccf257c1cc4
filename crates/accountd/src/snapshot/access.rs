//! Who can read the balance snapshot. The job_submit plugin reads it inside slurmctld, which runs as
//! the SlurmUser; a snapshot it cannot read turns admission off (on_error = "accept"). So an accountd
//! running as root gives the file (and the directory, when it creates it) the SlurmUser's primary
//! group, mode 0640 (0750): readable by slurmctld, not by other users. `config check --slurm` checks
//! the path with the SlurmUser's uid and groups against each component's owner and mode.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User};

/// Writes the snapshot; as root, readable by the group of `slurm_user` (the SlurmUser, by name).
pub fn write(path: &Path, text: &str, slurm_user: &str) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("cannot write snapshot {}: {e}", path.display());
    if !Uid::effective().is_root() {
        return gputokens::snapshot::write_atomically(path, text).map_err(failed);
    }
    let gid = match User::from_name(slurm_user) {
        Ok(Some(user)) => user.gid.as_raw(),
        // Written anyway (root-only): a slurmctld running as root still reads it.
        Ok(None) => {
            tracing::error!(
                "slurm_user '{slurm_user}' does not exist on this host: the snapshot {} is readable by root only, \
                 so a slurmctld running as another SlurmUser cannot read it and on_error decides every GPU job; \
                 set slurm_user to slurmctld's SlurmUser",
                path.display()
            );
            return gputokens::snapshot::write_atomically(path, text).map_err(failed);
        }
        Err(e) => return Err(format!("cannot look up slurm_user '{slurm_user}': {e}")),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(failed)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750)).map_err(failed)?;
    }
    open_directory(dir, gid).map_err(failed)?;
    gputokens::snapshot::write_atomically_for(path, text, Some(gid)).map_err(failed)
}

/// A root:root directory others cannot search (accountd's own, e.g. made 0750 beside the ledger)
/// gets the SlurmUser's group with search: the files in it keep their own modes (the ledger 0600).
/// A directory with another owner or group was set up by the site and is left alone.
fn open_directory(dir: &Path, gid: u32) -> std::io::Result<()> {
    let meta = std::fs::metadata(dir)?;
    if meta.uid() != 0 || meta.gid() != 0 || meta.mode() & 0o001 != 0 {
        return Ok(());
    }
    std::os::unix::fs::chown(dir, None, Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode((meta.mode() & 0o7777) | 0o050))
}

/// The SlurmUser as the kernel checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader {
    pub uid: u32,
    pub gids: Vec<u32>,
}

impl Reader {
    /// From `scontrol show config`'s `SlurmUser = slurm(64030)`: the uid in parentheses (else the
    /// name looked up), its primary and supplementary groups when the user is known on this host.
    pub fn from_setting(value: &str) -> Option<Reader> {
        let name = value.split('(').next().unwrap_or("").trim();
        let uid_text = value.split_once('(').and_then(|(_, r)| r.strip_suffix(')'));
        let user = User::from_name(name).ok().flatten();
        let uid = uid_text.and_then(|u| u.parse().ok()).or(user.as_ref().map(|u| u.uid.as_raw()))?;
        let gids = match &user {
            Some(u) => {
                let name = std::ffi::CString::new(u.name.clone()).ok()?;
                let groups = nix::unistd::getgrouplist(&name, u.gid).unwrap_or_else(|_| vec![u.gid]);
                groups.into_iter().map(Gid::as_raw).collect()
            }
            None => Vec::new(),
        };
        Some(Reader { uid, gids })
    }
}

/// One component of the path: a directory must be searchable, the file readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub dir: bool,
}

impl Entry {
    fn allows(&self, reader: &Reader) -> bool {
        let want = if self.dir { 0o1 } else { 0o4 };
        let bits = if reader.uid == 0 {
            return true; // root reads and searches anything
        } else if reader.uid == self.uid {
            self.mode >> 6
        } else if reader.gids.contains(&self.gid) {
            self.mode >> 3
        } else {
            self.mode
        };
        bits & want != 0
    }
}

/// The first component `reader` cannot pass.
pub fn blocked<'e>(reader: &Reader, entries: &'e [Entry]) -> Option<&'e Entry> {
    entries.iter().find(|e| !e.allows(reader))
}

/// Each existing directory from `/` down, then the file if it exists (symbolic links followed).
pub fn entries(path: &Path) -> (Vec<Entry>, bool) {
    let mut out = Vec::new();
    let mut found = false;
    let ancestors: Vec<&Path> = path.ancestors().collect();
    for p in ancestors.into_iter().rev() {
        let Ok(meta) = std::fs::metadata(p) else { break };
        let dir = meta.is_dir();
        found = p == path;
        out.push(Entry { path: p.to_path_buf(), uid: meta.uid(), gid: meta.gid(), mode: meta.mode() & 0o777, dir });
    }
    (out, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, uid: u32, gid: u32, mode: u32, dir: bool) -> Entry {
        Entry { path: path.into(), uid, gid, mode, dir }
    }

    #[test]
    fn the_slurm_user_needs_search_on_every_directory_and_read_on_the_file() {
        let slurm = Reader { uid: 64030, gids: vec![64030] };
        let path = [
            entry("/", 0, 0, 0o755, true),
            entry("/var/lib/gputokens", 0, 64030, 0o750, true),
            entry("/var/lib/gputokens/balances.snapshot", 0, 64030, 0o640, false),
        ];
        assert_eq!(blocked(&slurm, &path), None);
        let alice = Reader { uid: 1001, gids: vec![1001] };
        assert_eq!(blocked(&alice, &path).map(|e| e.path.as_path()), Some(Path::new("/var/lib/gputokens")));
        let root_only = [entry("/", 0, 0, 0o755, true), entry("/s", 0, 0, 0o640, false)];
        assert_eq!(blocked(&slurm, &root_only).unwrap().path, Path::new("/s"));
        assert_eq!(blocked(&Reader { uid: 0, gids: vec![] }, &root_only), None, "root reads anything");
        let owned = [entry("/d", 64030, 0, 0o700, true), entry("/d/s", 64030, 0, 0o600, false)];
        assert_eq!(blocked(&slurm, &owned), None, "the owner's bits");
        let no_search = [entry("/d", 0, 64030, 0o740, true)];
        assert!(blocked(&slurm, &no_search).is_some(), "a directory needs x, not r");
    }

    #[test]
    fn the_reader_from_scontrol() {
        let root = Reader::from_setting("root(0)").unwrap();
        assert_eq!(root.uid, 0);
        assert!(root.gids.contains(&0));
        assert_eq!(Reader::from_setting("nosuchuser(4321)"), Some(Reader { uid: 4321, gids: vec![] }));
        assert_eq!(Reader::from_setting("nosuchuser"), None);
    }

    #[test]
    fn entries_walk_down_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("balances.snapshot");
        let (found, exists) = entries(&file);
        assert!(!exists);
        assert_eq!(found.last().unwrap().path, dir.path());
        std::fs::write(&file, "x").unwrap();
        let (found, exists) = entries(&file);
        assert!(exists && !found.last().unwrap().dir);
        assert_eq!(found[0].path, Path::new("/"));
    }
}
