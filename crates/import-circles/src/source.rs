//! A crate's files as the compiler finds them: from the root file, each `mod name;` declaration
//! leads to `name.rs` or `name/mod.rs`. Each file's code is kept without comments and without
//! `#[cfg(test)]` items, which may import anything.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: PathBuf,
    /// The module the file holds, from the crate root (`["http", "web"]`).
    pub module: Vec<String>,
    /// Child modules declared in the file with `mod name;`.
    pub children: Vec<String>,
    /// The code, comments and test-only items blanked out (line numbers kept).
    pub code: String,
}

/// Every file of the crate rooted at `root`, the root first.
pub fn crate_files(root: &Path) -> std::io::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    let mut queue = vec![(root.to_path_buf(), Vec::new())];
    while let Some((path, module)) = queue.pop() {
        let text = std::fs::read_to_string(&path)?;
        let code = without_test_items(&without_comments(&text));
        let children = declared_modules(&code);
        let dir = child_dir(&path);
        for child in &children {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(child).join("mod.rs");
            let found = if flat.is_file() { flat } else { nested };
            let mut child_module = module.clone();
            child_module.push(child.clone());
            queue.push((found, child_module));
        }
        files.push(SourceFile { path, module, children, code });
    }
    Ok(files)
}

/// Where the files of `path`'s child modules are.
fn child_dir(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    match path.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") => dir,
        Some(stem) => dir.join(stem),
        None => dir,
    }
}

/// `mod name;` declarations (not inline `mod name { … }` blocks, which live in the same file).
fn declared_modules(code: &str) -> Vec<String> {
    code.split(';')
        .filter_map(|statement| {
            let words: Vec<&str> = statement.split_whitespace().collect();
            match words.as_slice() {
                [.., "mod", name] if is_ident(name) => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}

fn is_ident(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// `text` with `//` and `/* */` comments replaced by spaces, string and char literals kept as they
/// are (a `//` inside a string is not a comment); newlines kept so line numbers hold.
pub fn without_comments(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    out.push(' ');
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        out.push_str("  ");
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        out.push_str("  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        out.push(if chars[i] == '\n' { '\n' } else { ' ' });
                        i += 1;
                    }
                }
            }
            ('"', _) => {
                // A string literal, blanked (it is not code), its newlines kept.
                out.push('"');
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        out.push(' ');
                        i += 1;
                    }
                    if i < chars.len() {
                        out.push(if chars[i] == '\n' { '\n' } else { ' ' });
                        i += 1;
                    }
                }
                out.push('"');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// `code` with each `#[cfg(test)]` item blanked out: up to its `;`, or its `{ … }` block.
pub fn without_test_items(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= out.len() {
        if out[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i + marker.len();
        let mut depth = 0usize;
        while j < out.len() {
            match out[j] {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let end = j.min(out.len());
        for c in &mut out[start..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = j;
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_strings_are_not_code() {
        let code = without_comments("use a; // crate::b\n/* crate::c */ let s = \"crate::d // x\";\n");
        assert!(!code.contains("crate::"), "{code}");
        assert_eq!(code.lines().count(), 2);
    }

    #[test]
    fn test_items_are_left_out() {
        let code = without_test_items(
            "use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n#[cfg(test)]\nuse crate::c;\nfn f() {}\n",
        );
        assert!(code.contains("crate::a") && !code.contains("crate::b") && !code.contains("crate::c"), "{code}");
        assert!(code.contains("fn f()"));
        assert_eq!(code.lines().count(), 8);
    }

    #[test]
    fn declared_modules_are_file_modules_only() {
        let code = "pub mod a;\nmod b;\nmod inline { }\npub(crate) mod c;\n";
        assert_eq!(declared_modules(code), ["a", "b", "c"]);
    }
}
