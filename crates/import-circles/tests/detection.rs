//! The finder itself, on small crates written for it: circles are found, the lines named, and
//! what is not a circle (a parent's `mod`, test-only imports, other crates) is not reported; the
//! same for circles among rooms (top-level files and folders).

use std::path::Path;

use import_circles::{circles_in_crate, room_circles_in_crate};

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

/// Two folders whose files import each other's files, though no two files import each other.
const TWO_FOLDERS: &[(&str, &str)] = &[
    ("src/lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
    ("src/a/mod.rs", "pub mod x;\n"),
    ("src/a/x.rs", "use crate::b::y::Y;\npub struct X;\n"),
    ("src/b/mod.rs", "pub mod y;\npub mod z;\n"),
    ("src/b/y.rs", "pub struct Y;\n"),
    ("src/b/z.rs", "use crate::c;\n\nfn f() -> crate::a::x::X { todo!() }\n"),
    ("src/c.rs", "pub const C: u8 = 1;\n"),
];

#[test]
fn two_folders_importing_each_other_are_a_room_circle() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), TWO_FOLDERS);
    let root = dir.path().join("src/lib.rs");
    assert_eq!(circles_in_crate(&root).unwrap(), vec![], "no file circle: a/x → b/y, b/z → a/x");
    let found = room_circles_in_crate(&root).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].rooms, ["a", "b"]);
    assert_eq!(found[0].mutual, [("a".to_string(), "b".to_string())]);
    let steps: Vec<String> = found[0]
        .links
        .iter()
        .map(|s| {
            let file = s.link.file.strip_prefix(dir.path()).unwrap().display();
            let imports = s.link.imports.strip_prefix(dir.path()).unwrap().display();
            format!("{} -> {}: {file}:{} imports {imports}", s.from, s.to, s.link.line)
        })
        .collect();
    assert_eq!(steps, ["a -> b: src/a/x.rs:1 imports src/b/y.rs", "b -> a: src/b/z.rs:3 imports src/a/x.rs"]);
    let shown = found[0].to_string();
    assert!(shown.contains("rooms importing each other: a <-> b"), "{shown}");
}

#[test]
fn rooms_in_a_longer_circle_are_one_knot() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[
            ("src/main.rs", "mod a;\nmod b;\nmod c;\nfn main() {}\n"),
            ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
            ("src/b/mod.rs", "mod inner;\npub use inner::B;\n"),
            ("src/b/inner.rs", "pub struct B;\nfn f() { crate::c::g(); }\n"),
            ("src/c.rs", "pub fn g() {}\nfn h(_: crate::a::A) {}\n"),
        ],
    );
    let found = room_circles_in_crate(&dir.path().join("src/main.rs")).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].rooms, ["a", "b", "c"]);
    assert!(found[0].mutual.is_empty(), "{found:?}");
    let rooms: Vec<(&str, &str)> = found[0].links.iter().map(|s| (s.from.as_str(), s.to.as_str())).collect();
    assert_eq!(rooms, [("a", "b"), ("b", "c"), ("c", "a")]);
}

#[test]
fn rooms_importing_one_way_tests_and_the_root_are_clean() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), TWO_FOLDERS);
    write(
        dir.path(),
        &[
            // b no longer imports a, but for its tests; the root re-exports a's item (its interface)
            // and a names the root's constant: lib is a room of its own, and a → lib is one way.
            ("src/lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub use a::x::X;\npub const N: u8 = 2;\n"),
            ("src/a/x.rs", "use crate::b::y::Y;\npub struct X;\nconst M: u8 = crate::N;\n"),
            ("src/b/z.rs", "use crate::c;\n#[cfg(test)]\nmod tests {\n    use crate::a::x::X;\n}\n"),
        ],
    );
    let root = dir.path().join("src/lib.rs");
    assert_eq!(room_circles_in_crate(&root).unwrap(), vec![]);
    assert_eq!(circles_in_crate(&root).unwrap(), vec![]);
}
