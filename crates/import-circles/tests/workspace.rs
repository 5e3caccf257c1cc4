//! No crate of the workspace has an import circle between its files, nor between its rooms (its
//! top-level files and folders under `src/`).

use std::path::{Path, PathBuf};

use import_circles::{circles_in_crate, room_circles_in_crate};

/// The root file of every crate target in the workspace (libraries and binaries).
fn crate_roots() -> Vec<PathBuf> {
    let workspace = workspace();
    let mut roots = Vec::new();
    for group in ["crates", "plugins"] {
        for entry in std::fs::read_dir(workspace.join(group)).unwrap() {
            let src = entry.unwrap().path().join("src");
            for root in ["lib.rs", "main.rs"] {
                if src.join(root).is_file() {
                    roots.push(src.join(root));
                }
            }
        }
    }
    roots.sort();
    roots
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

#[test]
fn no_crate_has_an_import_circle() {
    let roots = crate_roots();
    assert!(roots.len() >= 8, "found only {roots:?}");
    let mut report = String::new();
    for root in &roots {
        for circle in circles_in_crate(root).unwrap() {
            report += &format!("{}:\n{circle}", root.display());
        }
    }
    let report = report.replace(&format!("{}/", workspace().display()), "");
    assert!(report.is_empty(), "import circles (each file names the next; break each circle):\n{report}");
}

#[test]
fn no_crate_has_rooms_importing_each_other() {
    let roots = crate_roots();
    assert!(roots.iter().any(|r| r.ends_with("crates/accountd/src/lib.rs")), "found only {roots:?}");
    let mut report = String::new();
    for root in &roots {
        for knot in room_circles_in_crate(root).unwrap() {
            report += &format!("{}:\n{knot}", root.display());
        }
    }
    let report = report.replace(&format!("{}/", workspace().display()), "");
    assert!(
        report.is_empty(),
        "top-level files and folders that reach each other through imports (move what one of them \
         needs from the other to a room of its own, below both):\n{report}"
    );
}
