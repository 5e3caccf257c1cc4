//! A capture script for `[notify] command`: it appends each notification's argv, environment and
//! stdin to a file of the site, so a test reads what a site's mailer would have been given.

use super::common::Site;

/// A capture script: each successful run appends one record; with `fail` present it exits 1 and
/// only counts the attempt.
pub fn capture_script(site: &Site) -> String {
    let d = site.dir.path().display();
    let script = format!(
        "#!/bin/sh\necho \"$GPUTOKENS_EVENT\" >> {d}/attempts\n[ -e {d}/fail ] && {{ echo 'mail: relay down' >&2; exit 1; }}\n\
         {{ echo \"ARGS: $*\"; echo \"ENV: $GPUTOKENS_EVENT $GPUTOKENS_USER $GPUTOKENS_BALANCE $GPUTOKENS_FLOOR\"; \
         echo \"STDIN: $(cat)\"; }} >> {d}/captured\n"
    );
    let path = site.file("notify.sh", &script);
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

pub fn captured(site: &Site) -> Vec<String> {
    std::fs::read_to_string(site.path("captured")).unwrap_or_default().lines().map(str::to_string).collect()
}

pub fn args(site: &Site) -> Vec<String> {
    captured(site).into_iter().filter_map(|l| l.strip_prefix("ARGS: ").map(str::to_string)).collect()
}
