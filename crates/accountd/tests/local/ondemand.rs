//! The Open OnDemand balance file (`[ondemand]`): written with each snapshot in OnDemand's format
//! version 1 (checked against a JSON schema of its documentation), readable as the site says, and
//! read by the users themselves, as OnDemand's dashboard does (it runs as each user).

use std::path::{Path, PathBuf};

use crate::common::{run_as, Outcome, Site};

const SCHEMA: &str = include_str!("ondemand-balance.schema.json");

/// alice charged past the floor (2 × a6000 × 14 h = 112 of her 100), bob half a token.
const SACCT: &str = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
101|alice|billing=2,cpu=2,gres/gpu:a6000=2,gres/gpu=2,node=1|50400|2026-11-20T08:00:00|COMPLETED
201|bob|billing=1,cpu=1,gres/gpu:rtx2080=1,gres/gpu=1,node=1|3600|2026-11-21T09:00:00|COMPLETED
";

/// The file parsed, after the schema has passed it.
fn validated(text: &str) -> serde_json::Value {
    let file: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource("ondemand-balance.schema.json", serde_json::from_str(SCHEMA).unwrap()).unwrap();
    let index = compiler.compile("ondemand-balance.schema.json", &mut schemas).unwrap();
    if let Err(e) = schemas.validate(&file, index) {
        panic!("not OnDemand's balance file format: {e:#}\n{text}");
    }
    file
}

/// `OOD_BALANCE_THRESHOLD` of the example dashboard settings (slurm-conf/ondemand/dashboard.env).
fn example_threshold() -> f64 {
    let env = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../slurm-conf/ondemand/dashboard.env");
    let text = std::fs::read_to_string(env).unwrap();
    let value = text.lines().find_map(|l| l.strip_prefix("OOD_BALANCE_THRESHOLD=")).expect("a threshold");
    value.trim().parse().unwrap()
}

/// A site writing the file into a directory of its own, with `readers` (`world_readable` or `group`).
fn site(readers: &str) -> (Site, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let file = dir.path().join("ondemand/balances.json");
    let site = Site::start("", &format!("[ondemand]\nbalance_file = \"{}\"\n{readers}\n", file.display()));
    let sacct = site.file("sacct.txt", SACCT);
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    site.accountd(None, &["tick", "--skip-charge"]).ok();
    (site, dir, file)
}

fn read_as(user: &str, file: &Path) -> Outcome {
    run_as(Some(user), Path::new("/bin/cat"), &[file.to_str().unwrap()])
}

fn value_of(file: &serde_json::Value, user: &str) -> f64 {
    let rows = file["balances"].as_array().unwrap();
    let row = rows.iter().find(|r| r["user"] == user && r.get("project").is_none()).unwrap_or_else(|| panic!("{file}"));
    row["value"].as_f64().unwrap()
}

#[test]
fn a_user_at_the_floor_reads_a_balance_below_the_examples_threshold() {
    let (_site, _dir, file) = site("world_readable = true");
    let text = read_as("alice", &file).ok().stdout;
    let parsed = validated(&text);
    assert_eq!(parsed["config"], serde_json::json!({ "unit": "GPU tokens", "project_type": "account" }));
    let age = gputokens::time::now() - parsed["timestamp"].as_i64().unwrap();
    assert!((0..120).contains(&age), "written {age} s ago");
    let threshold = example_threshold();
    assert_eq!(value_of(&parsed, "alice"), -12.0);
    assert!(value_of(&parsed, "alice") < threshold, "alice at the floor is warned");
    assert_eq!(value_of(&parsed, "bob"), 99.5);
    assert!(value_of(&parsed, "bob") >= threshold, "bob is not");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o644);
}

/// With `group`, only its members read it (every user's balance is in it).
#[test]
fn with_a_group_only_its_members_read_it() {
    let (_site, _dir, file) = site("group = \"bob\"");
    validated(&read_as("bob", &file).ok().stdout);
    let alice = read_as("alice", &file);
    assert_ne!(alice.code, 0);
    assert!(alice.stderr.contains("Permission denied"), "{}", alice.stderr);
}

/// A balance file without a word on who reads it is a configuration problem, and is not written.
#[test]
fn without_readers_it_is_a_problem_and_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gputokens.toml");
    std::fs::write(&config, "[ondemand]\nbalance_file = \"/tmp/gputokens-ondemand-test/balances.json\"\n").unwrap();
    let check = run_as(None, &crate::common::bin("accountd"), &["config", "check", config.to_str().unwrap()]);
    assert_eq!(check.code, 2, "{}", check.stdout);
    assert!(
        check.stderr.contains("ondemand.balance_file") && check.stderr.contains("world_readable = true"),
        "{}",
        check.stderr
    );
}
