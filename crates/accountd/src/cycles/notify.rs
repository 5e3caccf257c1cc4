//! Notifications, Slurm's `MailProg` way: after each charge and check cycle, each user's balance is
//! compared with the level they were last notified at (`gputokens::notify` decides what a change
//! means); a crossing is recorded in the ledger as owed, then the `[notify] command` runs for every
//! owed notification (argv, never a shell: `command... EVENT USER`, the message on stdin,
//! `GPUTOKENS_*` in the environment) and each one that succeeded is marked sent.
//!
//! At-least-once: a notification is recorded before the command runs and marked sent after it exits
//! 0, so a restart never loses one; only a process killed between the two can send it twice. A
//! failure (an exit status other than 0, a timeout, a command that cannot start) is logged, counted
//! in `gputokens_notifications_total{result="failed"}` and retried on the next cycle. A cycle stops
//! starting runs once it has spent `[notify] timeout` on them (each run is killed after that long):
//! the rest wait for the next cycle.

use std::process::Command;
use std::time::{Duration, Instant};

use gputokens::notify::{balance_message, crossing, preempted_message, Event, Level};
use gputokens::statement::{idle_summary, Month};
use gputokens::time::local_date;
use ledger::{NewNotice, Notice};

use crate::error::AccountdResult;
use crate::resources::Resources;

/// The most owed notifications one cycle looks at.
const PER_CYCLE: usize = 1000;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub owed: usize,
    pub sent: usize,
    pub failed: usize,
}

/// Records the crossings of every user's balance and runs the command for what is owed. Off (and
/// nothing recorded) without a `[notify] command`. Never fails the cycle: errors are logged.
pub fn run(res: &mut Resources, now: i64) {
    if !res.config.notify.enabled() {
        return;
    }
    // Of a ledger several clusters share, the first cluster's leader delivers (the owed notices are
    // the ledger's: two leaders sending them would send some twice); each records its own crossings.
    let delivers = res.config.clusters.is_first();
    let result = record_crossings(res, now).and_then(|_| match delivers {
        true => deliver(res, now),
        false => Ok(Delivered::default()),
    });
    match result {
        Ok(Delivered { owed: 0, .. }) => {}
        Ok(d) => {
            tracing::info!("notifications: {} owed, {} sent, {} failed (retried next cycle)", d.owed, d.sent, d.failed)
        }
        Err(e) => tracing::error!("notifications: {e} (retried next cycle)"),
    }
}

/// Compares each user's balance with the level they were last notified at, and records each
/// crossing (with the notification it owes) in the ledger.
pub fn record_crossings(res: &mut Resources, now: i64) -> AccountdResult<usize> {
    let notify = res.config.notify.clone();
    let rules = *res.ledger.rules();
    let today = local_date(now);
    let levels = res.ledger.notify_levels()?;
    let mut recorded = 0;
    for account in res.ledger.accounts()? {
        let last = levels.get(&account.user).copied().unwrap_or(Level::Ok);
        let Some(c) = crossing(last, account.balance, notify.warn_below, rules.floor) else { continue };
        let notice = match c.event {
            Some(event) => {
                let mut message = balance_message(event, account.balance, notify.warn_below, &rules, today);
                // Where the tokens went: a falling balance with tokens spent on idle GPUs says so.
                if matches!(event, Event::Warning | Event::Overdraft | Event::Floor) {
                    message += &idle_note(res, &account.user, now);
                }
                Some(NewNotice { user: account.user.clone(), event, balance: account.balance, job_id: None, message })
            }
            None => None,
        };
        if res.ledger.record_crossing(&account.user, c.level, notice.as_ref(), now)? && notice.is_some() {
            recorded += 1;
        }
    }
    Ok(recorded)
}

/// " This month you spent N tokens on idle GPUs (a6000 N)." when `user` did, else nothing: from the
/// month's statement so far (a statement that cannot be drawn up says nothing here).
fn idle_note(res: &Resources, user: &str, now: i64) -> String {
    let month = Month::of(local_date(now));
    let Ok(statement) = res.ledger.statement(user, month, ledger::Issue { at: now, partial: true }) else {
        return String::new();
    };
    match idle_summary(&statement) {
        Some((idle, types)) => format!(" This month you spent {idle} tokens on idle GPUs ({types})."),
        None => String::new(),
    }
}

/// The notification a preemption owes the job's owner, or None when notifications are off.
pub fn preempted_notice(
    res: &Resources,
    user: &str,
    job: &str,
    action: &str,
    reason: &str,
    balance: gputokens::Tokens,
) -> Option<NewNotice> {
    res.config.notify.enabled().then(|| NewNotice {
        user: user.to_string(),
        event: Event::Preempted,
        balance,
        job_id: Some(job.to_string()),
        message: preempted_message(job, action, reason),
    })
}

/// Runs the command for each owed notification, oldest first, within the cycle's time budget.
pub fn deliver(res: &mut Resources, now: i64) -> AccountdResult<Delivered> {
    let owed = res.ledger.owed_notifications(PER_CYCLE)?;
    let mut done = Delivered { owed: owed.len(), ..Delivered::default() };
    let timeout = res.config.notify.timeout;
    let started = Instant::now();
    for notice in &owed {
        if started.elapsed() >= timeout {
            tracing::warn!(
                "notifications: {} left for the next cycle (this one spent {timeout:?})",
                done.owed - done.sent - done.failed
            );
            break;
        }
        let event = notice.event.as_str();
        match send(res, notice, timeout) {
            Ok(()) => {
                res.ledger.mark_sent(notice.id, now)?;
                res.metrics.record_notification(event, true);
                done.sent += 1;
            }
            Err(e) => {
                tracing::warn!(
                    "notification {event} for {} failed (attempt {}, retried next cycle): {e}",
                    notice.user,
                    notice.attempts + 1
                );
                res.ledger.mark_failed(notice.id, &e)?;
                res.metrics.record_notification(event, false);
                done.failed += 1;
            }
        }
    }
    Ok(done)
}

/// One run of the command: `command... -- EVENT USER`, the message on stdin, the facts in the
/// environment. (`--`: the program's options end there, whatever a user is named.)
fn send(res: &Resources, notice: &Notice, timeout: Duration) -> Result<(), String> {
    let argv = &res.config.notify.command;
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]).arg("--").arg(notice.event.as_str()).arg(&notice.user);
    command
        .env("GPUTOKENS_EVENT", notice.event.as_str())
        .env("GPUTOKENS_USER", &notice.user)
        .env("GPUTOKENS_BALANCE", notice.balance.to_string())
        .env("GPUTOKENS_FLOOR", res.ledger.rules().floor.to_string())
        .env_remove("GPUTOKENS_JOB");
    if let Some(job) = &notice.job_id {
        command.env("GPUTOKENS_JOB", job);
    }
    let message = format!("{}\n", notice.message);
    let finished = crate::command::run_with_input(command, Some(message.as_bytes()), timeout)
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    if finished.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&finished.stderr);
    let said = stderr.lines().last().map(|l| format!(": {}", l.trim())).unwrap_or_default();
    Err(format!("{} exited with {}{said}", argv[0], finished.status))
}
