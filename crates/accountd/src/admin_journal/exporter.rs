//! `accountd serve`'s journal exporter: a thread with its own ledger connection that appends the
//! lines of marked admin changes (`export`) when a change asks it to, at start (what a crash left
//! marked) and every `every` (what a journal that could not be written left). The journal sits on
//! other storage (NFS, as the README suggests): a hung server stalls this thread alone, never the
//! lock that answers users nor the cycles (the audit's L1).

use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::resources::Resources;

struct Exporter {
    state: Mutex<Tickets>,
    changed: Condvar,
}

/// Export requests as numbered tickets: one is done once `done` has reached it.
#[derive(Default)]
struct Tickets {
    requested: u64,
    done: u64,
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// Starts the exporter on `res` (a connection of its own); once per process.
pub fn start(mut res: Resources, every: Duration) -> std::io::Result<()> {
    if EXPORTER.set(Exporter { state: Mutex::default(), changed: Condvar::new() }).is_err() {
        return Ok(());
    }
    std::thread::Builder::new().name("admin-journal".into()).spawn(move || {
        let exporter = EXPORTER.get().expect("set above");
        let mut target = request();
        loop {
            let exported = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| super::export(&mut res)));
            if exported.is_err() {
                tracing::error!("the admin journal's export panicked; tried again at the next change or in {every:?}");
            }
            let mut state = exporter.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.done = state.done.max(target);
            exporter.changed.notify_all();
            let (state, _) = exporter
                .changed
                .wait_timeout_while(state, every, |t| t.requested <= t.done)
                .unwrap_or_else(PoisonError::into_inner);
            // Every request up to here is served by the next export (it reads what they committed).
            target = state.requested;
        }
    })?;
    Ok(())
}

/// Asks the exporter to export what is marked now; returns the request's ticket (0 without an
/// exporter: a command that is not `serve`).
pub fn request() -> u64 {
    let Some(exporter) = EXPORTER.get() else { return 0 };
    let mut state = exporter.state.lock().unwrap_or_else(PoisonError::into_inner);
    state.requested += 1;
    exporter.changed.notify_all();
    state.requested
}

/// Waits up to `timeout` for the export of `ticket`; false when it has not happened by then.
pub fn wait(ticket: u64, timeout: Duration) -> bool {
    let Some(exporter) = EXPORTER.get() else { return true };
    let state = exporter.state.lock().unwrap_or_else(PoisonError::into_inner);
    let (state, _) = exporter
        .changed
        .wait_timeout_while(state, timeout, |t| t.done < ticket)
        .unwrap_or_else(PoisonError::into_inner);
    state.done >= ticket
}
