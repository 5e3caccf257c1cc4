//! Neither plugin links SQLite. They run inside slurmctld, sbatch, srun and slurmstepd, and reach the
//! ledger only through what accountd publishes (the snapshot file, the socket); a dependency on the
//! ledger crate or rusqlite would put a second SQLite (bundled, statically linked) into those
//! processes. Checked on the built `.so` files (`cargo build --workspace` puts them next to this
//! test) and on the dependency graph.

use std::path::Path;
use std::process::Command;

use crate::common::bin;

/// Each plugin's file and one symbol it surely has (so an empty symbol table cannot pass).
const PLUGINS: [(&str, &str); 2] =
    [("libjob_submit_gputokens.so", "job_submit"), ("libspank_gputokens.so", "slurm_spank_init")];

/// The packages of the plugins, for `cargo tree`.
const PLUGIN_PACKAGES: [&str; 2] = ["job-submit-gputokens", "spank-gputokens"];

/// The lines `program args… file` prints; panics when it cannot run or fails.
fn output_lines(program: &str, args: &[&str], file: &Path) -> Vec<String> {
    let out = Command::new(program).args(args).arg(file).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?} {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

fn mentioning_sqlite(lines: &[String]) -> Vec<&String> {
    lines.iter().filter(|l| l.to_ascii_lowercase().contains("sqlite")).collect()
}

#[test]
fn neither_plugin_links_sqlite() {
    for (file, entry) in PLUGINS {
        let so = bin(file);
        // The full symbol table, not only the dynamic one: a statically linked SQLite is local to
        // the .so (a cdylib exports only the plugin's own symbols), so `nm -D` alone would miss it.
        let symbols = output_lines("nm", &[], &so);
        assert!(
            symbols.iter().any(|l| l.ends_with(&format!(" {entry}"))),
            "{}: no {entry} in its symbol table (stripped?), so this test would prove nothing",
            so.display()
        );
        let dynamic = output_lines("nm", &["-D"], &so);
        // Every library the loader would bring in with it, not only its own NEEDED entries.
        let libraries = output_lines("ldd", &[], &so);
        for (what, lines) in [("symbols", &symbols), ("dynamic symbols", &dynamic), ("libraries", &libraries)] {
            let found = mentioning_sqlite(lines);
            assert!(found.is_empty(), "{} links SQLite; {what}: {found:?}", so.display());
        }
    }
}

/// The lines of `cargo tree` of `package`'s normal dependencies, itself among them.
fn normal_dependencies(package: &str) -> Vec<String> {
    // cargo is the build's tool, not the product: it keeps the real clock in the dated runs
    // (tests/dated-runs.sh), under whose libfaketime it hangs.
    let out = Command::new(env!("CARGO"))
        .env_remove("LD_PRELOAD")
        .env_remove("FAKETIME")
        .args(["tree", "--offline", "--edges", "normal", "--prefix", "none", "--package", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree");
    assert!(out.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&out.stderr));
    let tree: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    assert!(tree.iter().any(|l| l.starts_with(package)), "cargo tree -p {package} printed {tree:?}");
    tree
}

/// Also the source of the problem, even where the linker would drop the unused code: no normal
/// dependency of a plugin is the ledger, rusqlite or libsqlite3-sys.
#[test]
fn neither_plugin_depends_on_sqlite() {
    for package in PLUGIN_PACKAGES {
        let tree = normal_dependencies(package);
        let found = mentioning_sqlite(&tree);
        let ledger: Vec<&String> = tree.iter().filter(|l| l.starts_with("ledger ")).collect();
        assert!(found.is_empty() && ledger.is_empty(), "{package} depends on SQLite: {found:?} {ledger:?}");
    }
}

/// Whether the file at `path` holds `needle` anywhere (a symbol name, stripped or not: nvml-wrapper
/// looks NVML's functions up by name, and SQLite keeps its API's names as text).
fn holds_text(path: &Path, needle: &str) -> bool {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The node agent is a program of its own: accountd, on the controller, carries no NVML, and the
/// agent, on every GPU node, no SQLite or ledger. Checked on the binaries under test (the packaged
/// ones where tests/run.sh installed them) and on the dependency graph.
#[test]
fn accountd_carries_no_nvml_and_the_agent_no_ledger() {
    let (accountd, agent) = (bin("accountd"), bin("gputokens-agent"));
    assert!(
        holds_text(&agent, "nvmlDeviceGetCount_v2"),
        "{}: no NVML in the agent, so this proves nothing",
        agent.display()
    );
    assert!(!holds_text(&accountd, "nvmlDeviceGetCount_v2"), "{} carries NVML", accountd.display());
    assert!(holds_text(&accountd, "sqlite3_prepare_v2"), "{}: no SQLite in accountd?", accountd.display());
    assert!(!holds_text(&agent, "sqlite3_prepare_v2"), "{} carries SQLite", agent.display());
    for (package, banned) in
        [("accountd", ["nvml-wrapper ", "nvml-wrapper-sys "]), ("gputokens-agent", ["ledger ", "rusqlite "])]
    {
        let tree = normal_dependencies(package);
        let found: Vec<&String> = tree.iter().filter(|l| banned.iter().any(|b| l.starts_with(b))).collect();
        assert!(found.is_empty(), "{package} depends on {found:?}");
    }
}
