//! The sbalance that users run, as the README installs it.

use crate::common::sbalance_bin;

/// Users run sbalance beside sshare, often: linked statically it starts in about half the time (no
/// dynamic loader), which is what brings it under half of sshare's time (bench/sbalance.sh).
#[test]
#[ignore = "needs tests/run.sh, which installs the statically linked sbalance ($GPUTOKENS_INSTALLED_BIN_DIR) \
            or builds it ($GPUTOKENS_SBALANCE)"]
fn the_sbalance_under_test_is_linked_statically() {
    let chosen = [crate::common::INSTALLED_BIN_DIR, "GPUTOKENS_SBALANCE"].iter().any(|v| std::env::var_os(v).is_some());
    assert!(chosen, "neither GPUTOKENS_INSTALLED_BIN_DIR nor GPUTOKENS_SBALANCE is set");
    let ldd = std::process::Command::new("ldd").arg(sbalance_bin()).output().unwrap();
    let text = String::from_utf8_lossy(&ldd.stdout).to_string() + &String::from_utf8_lossy(&ldd.stderr);
    assert!(text.contains("statically linked") || text.contains("not a dynamic executable"), "{text}");
}
