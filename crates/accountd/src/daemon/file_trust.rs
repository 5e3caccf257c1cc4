//! Files and directories a daemon takes orders from must be writable by root and accountd's own user
//! alone: a config anyone can edit sets prices and admins, a snapshot directory anyone can write
//! lets them rename their own balances into place for slurmctld, and a jobs directory anyone can
//! write lets them tell the agent which GPUs a job holds.

use std::path::Path;

use crate::error::{AccountdError, AccountdResult};

/// Refuses `path` (named `what` in the message) when a user other than root, this process's owner
/// and `slurm_user` (where given: the SlurmUser, whom slurmctld trusts already) can change it or
/// replace it through a directory above it ([`gputokens::file_trust`]). A missing path passes on
/// its directories (the daemon creates it, with its own modes).
pub fn refuse_if_others_can_write(path: &Path, what: &str, slurm_user: Option<&str>) -> AccountdResult<()> {
    match gputokens::file_trust::untrusted_with(path, what, slurm_user) {
        Some(why) => Err(AccountdError::Refused(why)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_world_writable_file_or_directory_is_refused_and_a_private_one_passes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gputokens.toml");
        std::fs::write(&file, "").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        refuse_if_others_can_write(&file, "the config", None).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let refused = refuse_if_others_can_write(&file, "the config", None).unwrap_err().to_string();
        assert!(refused.contains("is writable by every user (mode 666)"), "{refused}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(refuse_if_others_can_write(dir.path(), "the snapshot's directory", None).is_err());
        assert!(refuse_if_others_can_write(&dir.path().join("missing"), "the jobs directory", None).is_err());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        refuse_if_others_can_write(&dir.path().join("missing"), "the jobs directory", None).unwrap();
    }
}
