//! Running an external command with a deadline: a hung command (sacct waiting on a dead slurmdbd) is
//! killed and reaped, with everything it started, so it delays its caller but never wedges it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How often a running child is looked at.
const POLL: Duration = Duration::from_millis(20);
/// After the kill, how long the pipes may take to close (a grandchild that left the process group
/// could hold them open for ever: its output is then given up, not waited for).
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// What a command that ran to its end left.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start: {0}")]
    Spawn(std::io::Error),
    #[error("timed out after {}; killed", humantime::format_duration(*.0))]
    TimedOut(Duration),
    #[error("cannot wait for it: {0}")]
    Wait(std::io::Error),
}

/// Runs `command` (stdin from /dev/null) for at most `timeout`. It runs in a process group of its
/// own, so on timeout the whole group is killed, not just a wrapper script around the real program.
pub fn run(command: Command, timeout: Duration) -> Result<Finished, RunError> {
    run_with_input(command, None, timeout)
}

/// [`run`], with `input` written to the command's stdin (then closed) when given. The input is
/// written on a thread of its own: a command that never reads it still times out.
pub fn run_with_input(mut command: Command, input: Option<&[u8]>, timeout: Duration) -> Result<Finished, RunError> {
    let stdin = if input.is_some() { Stdio::piped() } else { Stdio::null() };
    command.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = command.spawn().map_err(RunError::Spawn)?;
    if let (Some(mut pipe), Some(input)) = (child.stdin.take(), input) {
        let input = input.to_vec();
        std::thread::spawn(move || {
            use std::io::Write;
            // A command that exits without reading it gets EPIPE here: nothing to do about it.
            let _ = pipe.write_all(&input);
        });
    }
    // Read both pipes while waiting: a child that fills one would otherwise block for ever.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                kill_and_reap(&mut child);
                // Let the readers finish (or give up on them) so no thread waits on the pipes.
                let _ = stdout.recv_timeout(DRAIN_AFTER_KILL);
                let _ = stderr.recv_timeout(DRAIN_AFTER_KILL);
                return Err(RunError::TimedOut(timeout));
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(RunError::Wait(e));
            }
        }
    };
    // The child has exited; its pipes close when the last process of its group that holds them does.
    let remaining = deadline.saturating_duration_since(Instant::now()).max(DRAIN_AFTER_KILL);
    let stdout = stdout.recv_timeout(remaining).unwrap_or_default();
    let stderr = stderr.recv_timeout(DRAIN_AFTER_KILL).unwrap_or_default();
    Ok(Finished { status, stdout, stderr })
}

/// Reads a pipe to its end on a thread of its own; the bytes arrive on the returned channel.
fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (send, receive) = mpsc::channel();
    match pipe {
        Some(mut pipe) => {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                let _ = send.send(bytes);
            });
        }
        None => {
            let _ = send.send(Vec::new());
        }
    }
    receive
}

/// SIGKILL to the child's process group, then the child is waited for (no zombie is left behind).
fn kill_and_reap(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // The group's ID is the child's PID (process_group(0)).
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn output_and_status_of_a_command_that_ends() {
        let done = run(sh("echo out; echo err >&2; exit 3"), Duration::from_secs(30)).unwrap();
        assert_eq!(done.status.code(), Some(3));
        assert_eq!(done.stdout, b"out\n");
        assert_eq!(done.stderr, b"err\n");
    }

    #[test]
    fn output_larger_than_a_pipe_does_not_block() {
        let done =
            run(sh("head -c 1000000 /dev/zero; head -c 1000000 /dev/zero >&2"), Duration::from_secs(30)).unwrap();
        assert!(done.status.success());
        assert_eq!((done.stdout.len(), done.stderr.len()), (1_000_000, 1_000_000));
    }

    #[test]
    fn a_hung_command_and_what_it_started_are_killed_and_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("sleeper.pid");
        // A wrapper script whose real work (the sleep) is a child of its own, as a bin_dir wrapper's is.
        let script = format!("sleep 1000 & echo $! > {}; wait", pid_file.display());
        let err = run(sh(&script), Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, RunError::TimedOut(_)), "{err}");
        assert_eq!(err.to_string(), "timed out after 300ms; killed");
        let sleeper: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        // Gone, or a zombie waiting for init: either way no longer running. SIGKILL is delivered
        // asynchronously: on a busy machine the sleep can still show as running for a moment.
        let stopped = |state: &str| {
            let running = state.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).unwrap_or("gone");
            matches!(running, "gone" | "Z" | "X")
        };
        let read_state = || std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut state = read_state();
        while !stopped(&state) && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(20));
            state = read_state();
        }
        assert!(stopped(&state), "the wrapper's sleep is still there 10 s after the kill: {state}");
    }

    #[test]
    fn input_reaches_stdin_and_a_command_that_ignores_it_still_ends() {
        let done = run_with_input(sh("cat; echo \"$1\""), Some(b"hello\n"), Duration::from_secs(30)).unwrap();
        assert_eq!(done.stdout, b"hello\n\n");
        let big = vec![b'x'; 1_000_000];
        let done = run_with_input(sh("exit 0"), Some(&big), Duration::from_secs(30)).unwrap();
        assert!(done.status.success());
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let err = run(Command::new("/nonexistent/sacct"), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, RunError::Spawn(_)), "{err}");
    }
}
