//! Wrappers for Slurm's commands (`[slurm] bin_dir`): each execs the real command, slowed down or
//! hung on request, so a test can put accountd's Slurm calls where a loaded site puts them.

use std::os::unix::fs::PermissionsExt;

/// Wrappers for Slurm's commands in a directory of their own. Each execs the real command, unless
/// `<name>.slow` exists there (it sleeps first: as many seconds as the file says, 4 when it is empty)
/// or `<name>.hang` (it sleeps for ever, in a child of the wrapper's shell); either way it first
/// notes the call in `<name>.calls`. `<name>.fail` makes the next call whose arguments hold the
/// file's text fail (exit 1) instead, once.
pub(crate) struct Wrappers {
    dir: tempfile::TempDir,
}

impl Wrappers {
    pub(crate) fn new() -> Wrappers {
        let dir = tempfile::Builder::new().prefix("gputokens-wrappers-").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for name in ["sacct", "squeue", "scontrol", "sinfo", "sacctmgr", "scancel"] {
            let script = format!(
                "#!/bin/sh\nd=$(dirname \"$0\")\n\
                 if [ -e \"$d/{name}.fail\" ]; then w=$(cat \"$d/{name}.fail\"); case \" $* \" in *\"$w\"*) \
                 rm -f \"$d/{name}.fail\"; echo \"{name}: failing as told ($w)\" >&2; exit 1 ;; esac; fi\n\
                 if [ -e \"$d/{name}.hang\" ]; then echo \"$$\" >> \"$d/{name}.calls\"; sleep infinity; exit 1; fi\n\
                 if [ -e \"$d/{name}.slow\" ]; then echo \"$$\" >> \"$d/{name}.calls\"; \
                 s=$(cat \"$d/{name}.slow\"); sleep \"${{s:-4}}\"; fi\n\
                 exec /usr/bin/{name} \"$@\"\n"
            );
            let path = dir.path().join(name);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Wrappers { dir }
    }

    pub(crate) fn bin_dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Turns `mode` ("slow" or "hang") of `name` on or off.
    pub(crate) fn set(&self, name: &str, mode: &str, on: bool) {
        let flag = self.dir.path().join(format!("{name}.{mode}"));
        if on {
            std::fs::write(flag, "").unwrap();
        } else {
            std::fs::remove_file(flag).unwrap();
        }
    }

    /// Makes `name` sleep `seconds` before it runs.
    pub(crate) fn slow_by(&self, name: &str, seconds: u32) {
        std::fs::write(self.dir.path().join(format!("{name}.slow")), seconds.to_string()).unwrap();
    }

    /// Makes the next call of `name` whose arguments contain `argument` fail, once.
    pub(crate) fn fail_once(&self, name: &str, argument: &str) {
        std::fs::write(self.dir.path().join(format!("{name}.fail")), argument).unwrap();
    }

    /// How many calls of `name` were slowed or hung so far.
    pub(crate) fn calls(&self, name: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.calls"))).unwrap_or_default().lines().count()
    }
}
