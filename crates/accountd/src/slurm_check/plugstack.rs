//! Finding spank_gputokens.so in SPANK's plugstack.conf, as slurmd and sbatch read it: lines
//! `required|optional <plugin.so> [args]` and `include <glob>` (a `*`/`?` pattern in the file name),
//! `#` comments. For `accountd config check --slurm`.

use std::path::{Path, PathBuf};

/// The plugin's line: where it was found, whether required, its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpankLine {
    pub file: PathBuf,
    pub required: bool,
    pub args: Vec<String>,
}

impl SpankLine {
    /// The value of `key=` among the arguments.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args.iter().find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
    }
}

/// The first line loading `spank_gputokens.so` in `plugstack` or the files it includes.
pub fn find_gputokens(plugstack: &Path) -> Option<SpankLine> {
    find_in(plugstack, 0)
}

fn find_in(file: &Path, depth: usize) -> Option<SpankLine> {
    // Includes of includes are fine; a cycle is not followed forever.
    if depth > 8 {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let dir = file.parent().unwrap_or(Path::new("/"));
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        match words.next() {
            Some(kind @ ("required" | "optional")) => {
                let plugin = words.next().unwrap_or("");
                if Path::new(plugin).file_name().is_some_and(|n| n == "spank_gputokens.so") {
                    let args = words.map(str::to_string).collect();
                    return Some(SpankLine { file: file.to_path_buf(), required: kind == "required", args });
                }
            }
            Some("include") => {
                for pattern in words {
                    let found = expand(&dir.join(pattern)).into_iter().find_map(|f| find_in(&f, depth + 1));
                    if found.is_some() {
                        return found;
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// The files a pattern names, in name order; the wildcards may be in the file name only.
fn expand(pattern: &Path) -> Vec<PathBuf> {
    let name = pattern.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    let dir = pattern.parent().unwrap_or(Path::new("/"));
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| wildcard(name.as_bytes(), n.as_bytes())))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

/// `*` any run of characters, `?` one character.
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => wildcard(&pattern[1..], name) || (!name.is_empty() && wildcard(pattern, &name[1..])),
        (Some(b'?'), Some(_)) => wildcard(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => wildcard(&pattern[1..], &name[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard(b"*.conf", b"gputokens.conf"));
        assert!(wildcard(b"g?u*.conf", b"gputokens.conf"));
        assert!(!wildcard(b"*.conf", b"gputokens.conf.bak"));
        assert!(!wildcard(b"*.conf", b".conf.swp"));
    }

    #[test]
    fn found_through_an_include_with_its_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("plugstack.conf");
        std::fs::write(&main, "# SPANK\noptional /usr/lib/x.so\ninclude plugstack.conf.d/*.conf # one per plugin\n")
            .unwrap();
        std::fs::create_dir(dir.path().join("plugstack.conf.d")).unwrap();
        std::fs::write(dir.path().join("plugstack.conf.d/a.conf"), "required /opt/pyxis/spank_pyxis.so\n").unwrap();
        let ours = dir.path().join("plugstack.conf.d/gputokens.conf");
        std::fs::write(&ours, "required spank_gputokens.so jobs_dir=/run/x conf=/etc/g.toml\n").unwrap();
        let line = find_gputokens(&main).unwrap();
        assert_eq!(line.file, ours);
        assert!(line.required);
        assert_eq!(line.arg("jobs_dir"), Some("/run/x"));
        assert_eq!(line.arg("conf"), Some("/etc/g.toml"));
        assert_eq!(line.arg("nvml_library"), None);

        std::fs::write(&ours, "# optional spank_gputokens.so\n").unwrap();
        assert_eq!(find_gputokens(&main), None, "a commented line loads nothing");
        std::fs::write(&main, "include plugstack.conf\n").unwrap();
        assert_eq!(find_gputokens(&main), None, "an include cycle ends");
    }
}
