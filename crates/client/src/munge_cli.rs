//! A MUNGE credential made by the `munge` command, as the caller: the program every host with munged
//! has, so that neither a statically linked sbalance nor sbatch's plugin links libmunge (a site
//! without MUNGE still loads the plugin). Bounded: munged that does not answer costs at most the
//! caller's timeout.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The credential `munge` encodes for `payload`, or why there is none.
pub(crate) fn encode(payload: &str, timeout: Duration) -> Result<String, String> {
    let mut child = Command::new("munge")
        .args(["--string", payload])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "the munge command is not installed on this host (package munge)".into(),
            _ => format!("cannot run munge: {e}"),
        })?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("munge did not answer within {} ms (is munged running?)", timeout.as_millis()));
            }
            Err(e) => return Err(format!("munge: {e}")),
        }
    };
    // A credential is a few hundred bytes: both pipes' buffers hold it, so munge never waited on us.
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    let credential = out.trim();
    if !status.success() || !credential.starts_with("MUNGE:") {
        let said = err.trim().trim_start_matches("munge: ").trim_start_matches("Error: ");
        return Err(format!("munge failed: {}", if said.is_empty() { status.to_string() } else { said.to_string() }));
    }
    Ok(credential.to_string())
}
