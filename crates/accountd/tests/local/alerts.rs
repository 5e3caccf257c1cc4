//! slurm-conf/prometheus/gputokens-alerts.yml: promtool's own unit tests of every rule pass (that
//! every metric a rule reads is served is tested beside the metrics, in accountd/src/metrics.rs).

use std::path::Path;
use std::process::Command;

#[test]
fn promtool_unit_tests_of_the_alert_rules_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/prometheus");
    let out = Command::new("promtool")
        .args(["test", "rules", "gputokens-alerts.test.yml"])
        .current_dir(&dir)
        .output()
        .expect("promtool (Debian package prometheus) is installed by tests/cluster/install.sh");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("SUCCESS"), "{text}");
}
