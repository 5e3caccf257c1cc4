//! The module paths a file's code names: `crate::a::b`, `super::x`, `self::y`, `child::z` and the
//! groups of `use` (`crate::a::{b, c::d}`), each made absolute (from the crate root) with its line.

/// A path named in a file, from the crate root, and the line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub line: usize,
    pub path: Vec<String>,
    /// Named in a `pub use` (a re-export: part of the file's interface, not of its code).
    pub reexport: bool,
}

/// Every path `code` names, for a file holding `module` with the child modules `children`.
pub fn named_paths(code: &str, module: &[String], children: &[String]) -> Vec<Named> {
    let chars: Vec<char> = code.chars().collect();
    let reexports = reexport_spans(&chars);
    let mut found = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        let starts_word = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        if !(starts_word && (chars[i].is_alphabetic() || chars[i] == '_')) {
            i += 1;
            continue;
        }
        let (segments, end) = path_at(&chars, i);
        if segments.len() >= 2 || (end < chars.len() && chars[end] == '{') {
            if let Some(base) = anchor(&segments, module, children) {
                let mut expanded = Vec::new();
                if end < chars.len() && chars[end] == '{' {
                    let (group, _) = group_at(&chars, end);
                    for tail in group {
                        let mut full = base.clone();
                        full.extend(tail);
                        expanded.push(full);
                    }
                } else {
                    expanded.push(base);
                }
                let reexport = reexports.iter().any(|&(from, to)| (from..to).contains(&i));
                found.extend(expanded.into_iter().map(|path| Named { line, path, reexport }));
            }
        }
        i = end.max(i + 1);
    }
    found
}

/// Where each `pub use …;` (also `pub(crate) use`) statement is, as (start, end) offsets.
fn reexport_spans(chars: &[char]) -> Vec<(usize, usize)> {
    let word_at = |i: usize, word: &str| {
        let w: Vec<char> = word.chars().collect();
        chars.get(i..i + w.len()) == Some(&w[..])
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
            && chars.get(i + w.len()).is_none_or(|c| !(c.is_alphanumeric() || *c == '_'))
    };
    let skip_space = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    let mut spans = Vec::new();
    for i in 0..chars.len() {
        if !word_at(i, "pub") {
            continue;
        }
        let mut j = skip_space(i + 3);
        if chars.get(j) == Some(&'(') {
            j = chars[j..].iter().position(|&c| c == ')').map_or(chars.len(), |p| skip_space(j + p + 1));
        }
        if word_at(j, "use") {
            let end = chars[j..].iter().position(|&c| c == ';').map_or(chars.len(), |p| j + p);
            spans.push((i, end));
        }
    }
    spans
}

/// The path of identifiers starting at `i` (`a::b::c`, or `a::b::` before a group) and where it ends.
fn path_at(chars: &[char], mut i: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    loop {
        let start = i;
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        if start == i {
            break;
        }
        segments.push(chars[start..i].iter().collect());
        let mut j = i;
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        if j + 1 < chars.len() && chars[j] == ':' && chars[j + 1] == ':' {
            i = j + 2;
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
        } else {
            break;
        }
    }
    (segments, i)
}

/// The paths of a `{ … }` group starting at `open`, each relative to the group's prefix.
fn group_at(chars: &[char], open: usize) -> (Vec<Vec<String>>, usize) {
    let mut paths = Vec::new();
    let mut i = open + 1;
    while i < chars.len() {
        match chars[i] {
            '}' => return (paths, i + 1),
            c if c.is_alphabetic() || c == '_' => {
                let (segments, end) = path_at(chars, i);
                if end < chars.len() && chars[end] == '{' {
                    let (inner, after) = group_at(chars, end);
                    paths.extend(inner.into_iter().map(|tail| segments.iter().cloned().chain(tail).collect()));
                    i = after;
                } else {
                    // `self` in a group names the prefix itself; `x as y` names x.
                    match segments.first().map(String::as_str) {
                        Some("self") => paths.push(Vec::new()),
                        _ => paths.push(segments),
                    }
                    i = end.max(i + 1);
                    // Skip an `as name` rename.
                    let rest: String = chars[i..chars.len().min(i + 4)].iter().collect();
                    if rest.trim_start().starts_with("as ") {
                        while i < chars.len() && chars[i] != ',' && chars[i] != '}' {
                            i += 1;
                        }
                    }
                }
            }
            _ => i += 1,
        }
    }
    (paths, i)
}

/// `segments` from the crate root when its first segment anchors it (`crate`, `$crate`'s `crate`,
/// `super`, `self`, or one of the file's child modules); None for other crates and local names.
fn anchor(segments: &[String], module: &[String], children: &[String]) -> Option<Vec<String>> {
    let first = segments.first()?;
    let (mut base, rest) = match first.as_str() {
        "crate" => (Vec::new(), &segments[1..]),
        "self" => (module.to_vec(), &segments[1..]),
        "super" => {
            let mut base = module.to_vec();
            let mut rest = segments;
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
            (base, rest)
        }
        name if children.iter().any(|c| c == name) => (module.to_vec(), segments),
        _ => return None,
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(code: &str) -> Vec<String> {
        let module = vec!["http".to_string()];
        let children = vec!["web".to_string()];
        named_paths(code, &module, &children).into_iter().map(|n| format!("{}:{}", n.line, n.path.join("::"))).collect()
    }

    #[test]
    fn absolute_relative_and_grouped_paths() {
        let code = "use crate::a::B;\nuse super::c;\nuse self::web::Page;\nlet x = web::render();\nuse crate::d::{e, f::{G, H as I}, self};\nuse std::io;\n";
        assert_eq!(
            paths(code),
            ["1:a::B", "2:c", "3:http::web::Page", "4:http::web::render", "5:d::e", "5:d::f::G", "5:d::f::H", "5:d"]
        );
    }

    #[test]
    fn reexports_are_marked() {
        let module = vec![];
        let named = named_paths(
            "pub use a::X;\npub(crate) use b::{Y, Z};\nuse c::W;\n",
            &module,
            &["a".into(), "b".into(), "c".into()],
        );
        let marked: Vec<(String, bool)> = named.iter().map(|n| (n.path.join("::"), n.reexport)).collect();
        assert_eq!(
            marked,
            [("a::X".into(), true), ("b::Y".into(), true), ("b::Z".into(), true), ("c::W".into(), false)]
        );
    }

    #[test]
    fn paths_within_paths_are_not_read_again() {
        assert_eq!(paths("let y = other::crate_like::x;\nlet z = a::crate::b;\n"), Vec::<String>::new());
    }
}
