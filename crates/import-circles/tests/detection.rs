//! The finder itself, on small crates written for it: circles are found, the lines named, and
//! what is not a circle (a parent's `mod`, test-only imports, other crates) is not reported.

use std::path::Path;

use import_circles::circles_in_crate;

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

#[test]
fn a_circle_through_three_files_is_found_with_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[
            ("src/lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
            ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
            ("src/b.rs", "pub struct B;\nfn f() { crate::c::g(); }\n"),
            ("src/c.rs", "use crate::{a::A, b};\npub fn g() {}\n"),
        ],
    );
    let found = circles_in_crate(&dir.path().join("src/lib.rs")).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let shown = found[0].to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown}");
    assert!(
        lines[0].ends_with("src/a.rs:1 imports ".to_string().as_str()) || lines[0].contains("src/a.rs:1 imports"),
        "{shown}"
    );
    assert!(lines[1].contains("src/b.rs:2 imports") && lines[1].ends_with("src/c.rs"), "{shown}");
    assert!(lines[2].contains("src/c.rs:1 imports") && lines[2].ends_with("src/a.rs"), "{shown}");
}

#[test]
fn a_child_naming_its_parent_that_names_it_is_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[
            ("src/lib.rs", "pub mod http;\n"),
            ("src/http/mod.rs", "pub mod web;\npub struct State;\nfn f() { web::page(); }\n"),
            ("src/http/web.rs", "use super::State;\npub fn page() {}\n"),
        ],
    );
    let found = circles_in_crate(&dir.path().join("src/lib.rs")).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
}

#[test]
fn declarations_tests_comments_and_other_crates_are_not_imports() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[
            ("src/main.rs", "mod a;\nmod b;\nuse b::B;\nfn main() {}\n"),
            ("src/a.rs", "//! See `crate::b` and crate::main.\npub struct A;\n"),
            (
                "src/b.rs",
                "use std::fmt;\nuse a_crate::b::x;\npub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
            ),
        ],
    );
    assert_eq!(circles_in_crate(&dir.path().join("src/main.rs")).unwrap(), vec![]);
    // …but the same import outside the test module is one (main.rs names b, b names a, a names b).
    write(
        dir.path(),
        &[("src/a.rs", "use crate::b::B;\npub struct A;\n"), ("src/b.rs", "use crate::a::A;\npub struct B;\n")],
    );
    assert_eq!(circles_in_crate(&dir.path().join("src/main.rs")).unwrap().len(), 1);
}
