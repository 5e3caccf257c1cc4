//! `accountd config check`: 0 for a valid file, 2 and the offending key otherwise.

use crate::common::{bin, run_as};

fn check(text: &str) -> crate::common::Outcome {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gputokens.toml");
    std::fs::write(&path, text).unwrap();
    run_as(None, &bin("accountd"), &["config", "check", path.to_str().unwrap()])
}

#[test]
fn shipped_example_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/slurm-conf/gputokens.toml");
    let out = run_as(None, &bin("accountd"), &["config", "check", example]).ok();
    assert!(out.stdout.contains("valid"));
    let printed = run_as(None, &bin("accountd"), &["config", "default"]).ok();
    assert_eq!(printed.stdout, std::fs::read_to_string(example).unwrap());
}

#[test]
fn unknown_key_is_named() {
    let out = check("initial = 100\ndayly = 2\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("unknown field `dayly`"), "{}", out.stderr);
}

#[test]
fn negative_price_is_named() {
    let out = check("[prices]\nrtx2080 = 0.5\na6000 = -4\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("prices.a6000: must not be negative (got -4)"), "{}", out.stderr);
}

#[test]
fn wrong_type_and_positive_floor_are_named() {
    let out = check("floor = \"minus ten\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("floor"), "{}", out.stderr);
    let out = check("floor = 3\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("floor: must be 0 or below"), "{}", out.stderr);
}

#[test]
fn missing_file_is_named() {
    let out = run_as(None, &bin("accountd"), &["config", "check", "/nonexistent/gputokens.toml"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("/nonexistent/gputokens.toml: cannot read"), "{}", out.stderr);
}

#[test]
fn prometheus_source_needs_a_valid_table() {
    let out = check("[usage]\nsource = \"prometheus\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("usage.source") && out.stderr.contains("[prometheus]"), "{}", out.stderr);
    let out = check("[usage]\nsource = \"prometheus\"\n[prometheus]\nurl = \"ftp://x\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("[prometheus]") && out.stderr.contains("ftp://x"), "{}", out.stderr);
    check("[usage]\nsource = \"prometheus\"\n[prometheus]\nurl = \"http://127.0.0.1:9090\"\n").ok();
}

#[test]
fn bad_admission_key_is_named() {
    let out = check("[admission]\non_error = \"maybe\"\n");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("admission.on_error"), "{}", out.stderr);
}
