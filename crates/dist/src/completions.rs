//! Shell completion scripts, named as each shell's completion directory expects them.

use std::io;
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;

/// The shells the package completes for, and the file each one loads for command `name`:
/// bash-completion loads `completions/NAME` on first use, zsh's compinit `_NAME`, fish `NAME.fish`.
const SHELLS: [(Shell, &str); 3] = [(Shell::Bash, "bash"), (Shell::Zsh, "zsh"), (Shell::Fish, "fish")];

/// `cmd` as completion sees it: clap_complete offers hidden subcommands (bash, zsh), and clap
/// cannot take one out of a command, so the command is built again from what it shows.
fn without_hidden(cmd: &Command) -> Command {
    let mut shown = Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().cloned())
        .groups(cmd.get_groups().cloned())
        .visible_aliases(cmd.get_visible_aliases().map(str::to_string).collect::<Vec<_>>())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(without_hidden));
    if let Some(about) = cmd.get_about() {
        shown = shown.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        shown = shown.version(version.to_string());
    }
    shown
}

fn script_path(dir: &Path, shell: Shell, shell_dir: &str, name: &str) -> PathBuf {
    let file = match shell {
        Shell::Zsh => format!("_{name}"),
        Shell::Fish => format!("{name}.fish"),
        _ => name.to_string(),
    };
    dir.join(shell_dir).join(file)
}

/// Writes `dir/bash/NAME`, `dir/zsh/_NAME` and `dir/fish/NAME.fish` for `cmd`, its hidden
/// subcommands left out.
pub fn write_scripts(cmd: Command, dir: &Path) -> io::Result<()> {
    let mut cmd = without_hidden(&cmd);
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
