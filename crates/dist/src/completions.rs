//! Shell completion scripts, named as each shell's completion directory expects them.

use std::io;
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;

/// The shells the package completes for, and the file each one loads for command `name`:
/// bash-completion loads `completions/NAME` on first use, zsh's compinit `_NAME`, fish `NAME.fish`.
const SHELLS: [(Shell, &str); 3] = [(Shell::Bash, "bash"), (Shell::Zsh, "zsh"), (Shell::Fish, "fish")];

fn script_path(dir: &Path, shell: Shell, shell_dir: &str, name: &str) -> PathBuf {
    let file = match shell {
        Shell::Zsh => format!("_{name}"),
        Shell::Fish => format!("{name}.fish"),
        _ => name.to_string(),
    };
    dir.join(shell_dir).join(file)
}

/// Writes `dir/bash/NAME`, `dir/zsh/_NAME` and `dir/fish/NAME.fish` for `cmd`.
pub fn write_scripts(mut cmd: Command, dir: &Path) -> io::Result<()> {
    let name = cmd.get_name().to_string();
    for (shell, shell_dir) in SHELLS {
        let path = script_path(dir, shell, shell_dir, &name);
        std::fs::create_dir_all(dir.join(shell_dir))?;
        // Generated in memory: clap_complete panics on a failed write, std::fs::write reports it.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd, &name, &mut script);
        std::fs::write(&path, script)?;
    }
    Ok(())
}
