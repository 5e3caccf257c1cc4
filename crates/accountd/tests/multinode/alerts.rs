//! The shipped alert rules, fed what a real /metrics said (slurm-conf/prometheus/gputokens-alerts.yml).

use std::process::Command;

/// Runs promtool on `GputokensAgentSilent` with each node's last report `age` seconds before the
/// test's time 0, a silent node staying silent and the others reporting every minute: the alert
/// must fire for `silent` alone.
pub fn assert_silent_alert_fires_for(ages: &[(String, f64)], silent: &str) {
    let dir = tempfile::tempdir().unwrap();
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../slurm-conf/prometheus/gputokens-alerts.yml");
    let mut input = String::new();
    for (node, age) in ages {
        let start = -age.round() as i64;
        let values = match node == silent {
            true => format!("{start}x30"),
            false => format!("{start}+60x30"),
        };
        input += &format!(
            "      - series: 'gputokens_agent_last_report_timestamp_seconds{{node=\"{node}\"}}'\n        values: '{values}'\n"
        );
    }
    let test = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{input}    alert_rule_test:\n\
         \x20     - eval_time: 15m\n        alertname: GputokensAgentSilent\n        exp_alerts:\n\
         \x20         - exp_labels: {{severity: warning, node: {silent}}}\n\
         \x20           exp_annotations:\n{}",
        rules.display(),
        annotations(&std::fs::read_to_string(&rules).unwrap(), silent)
    );
    let file = dir.path().join("silent.test.yml");
    std::fs::write(&file, &test).unwrap();
    let out = Command::new("promtool").args(["test", "rules"]).arg(&file).output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool:\n{}{}\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rule's annotations as promtool expects them for `node`: its summary with the node put in,
/// its description block as written.
fn annotations(rules: &str, node: &str) -> String {
    let rule = rules.split("- alert: ").find(|r| r.starts_with("GputokensAgentSilent")).expect("the rule");
    let lines: Vec<&str> = rule.lines().collect();
    let summary = lines.iter().find_map(|l| l.trim().strip_prefix("summary: ")).expect("summary");
    let start = lines.iter().position(|l| l.trim() == "description: >-").expect("description");
    let description: Vec<String> = lines[start + 1..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("                {}\n", l.trim()))
        .collect();
    format!(
        "              summary: {}\n              description: >-\n{}",
        summary.replace("{{ $labels.node }}", node),
        description.concat()
    )
}
