//! What the status page shows, as JSON for its script: one user's view and the admins' view. Read
//! from the ledger and what the service knows, with the same reads `sbalance` uses. A user's view
//! is their balance in the one shape of [`crate::balance_json`] with the page's own parts beside it;
//! amounts are exact decimal strings and instants RFC 3339 with their offset, as there.

use std::collections::BTreeMap;

use gputokens::entry::{EntryKind, FAULT_CANCEL, FAULT_REQUEUE};
use gputokens::forecast;
use gputokens::notify::{crossing, Event, Level};
use gputokens::policy::Status;
use gputokens::statement::{energy_total, idle_by_type, kwh, Month};
use gputokens::time::{format_rfc3339, local_date};
use gputokens::Tokens;
use serde_json::{json, Value};

use crate::answering::Answering;
use crate::balance_json::{BalanceJson, SCHEMA};
use crate::balance_row::{balance_row, SystemUsers};
use crate::resources::Resources;

/// Entries a user's view reads at most (the newest): the chart's 90 days of a busy user.
const ENTRIES_READ: usize = 5_000;
const CHART_DAYS: i64 = 90;
/// Jobs listed in a user's view, newest first.
const JOBS_LISTED: usize = 200;
/// Actions (preemptions, drains) read for the views.
const ACTIONS_READ: usize = 500;

/// A job's newest charge (time, entry id: the charges of one cycle share a time) and its tokens
/// per GPU type.
type JobCharges<'a> = ((i64, i64), BTreeMap<&'a str, Tokens>);

/// `user`'s page: balance and status, when they recover, the balance over 90 days, charges per
/// job and per GPU type, crossings and preemptions, and the burn-rate forecast.
pub fn user_view(res: &Resources, user: &str, now: i64, users: &SystemUsers) -> Result<Value, String> {
    let row = balance_row(res, user, now, users).map_err(|reply| match reply {
        gputokens::protocol::Reply::Error { message, .. } => message,
        other => format!("{other:?}"),
    })?;
    let rules = *res.ledger.rules();
    let entries =
        if row.in_ledger { res.ledger.recent(user, ENTRIES_READ).map_err(|e| e.to_string())? } else { Vec::new() };
    let since = now - CHART_DAYS * 86_400;
    let chart: Vec<Value> = entries
        .iter()
        .filter(|e| e.at >= since)
        .map(|e| json!({ "at": format_rfc3339(e.at), "at_unix": e.at, "balance": e.balance_after }))
        .collect();

    let mut jobs: BTreeMap<&str, JobCharges> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == EntryKind::Charge) {
        let Some(job) = e.job_id.as_deref() else { continue };
        let (last, types) = jobs.entry(job).or_default();
        *last = (*last).max((e.at, e.id));
        let charged = types.entry(e.gpu_type.as_deref().unwrap_or("gpu")).or_insert(Tokens::ZERO);
        *charged = *charged - e.amount;
    }
    let mut jobs: Vec<_> = jobs.into_iter().collect();
    jobs.sort_by_key(|(_, (last, _))| std::cmp::Reverse(*last));
    let jobs: Vec<Value> = jobs
        .iter()
        .take(JOBS_LISTED)
        .map(|(job, (last, types))| {
            let total: Tokens = types.values().copied().sum();
            json!({ "job": res.config.clusters.job_shown(job), "last_charged": format_rfc3339(last.0), "gpu_types": types.keys().collect::<Vec<_>>(),
                    "tokens": total })
        })
        .collect();

    let mut events: Vec<(i64, Value)> = Vec::new();
    let mut level = Level::Ok;
    let warn_below = res.config.notify.warn_below;
    for e in &entries {
        let Some(c) = crossing(level, e.balance_after, warn_below, rules.floor) else { continue };
        level = c.level;
        let Some(event) = c.event else { continue };
        let what = match event {
            Event::Warning => format!("balance fell below {warn_below}"),
            Event::Overdraft => format!("in overdraft: {}", Status::Overdraft.explanation(rules.floor)),
            Event::Floor => format!("at the floor: {}", Status::Blocked.explanation(rules.floor)),
            Event::Recovered => "recovered: GPU jobs run at full priority again".into(),
            Event::Preempted | Event::Expiring | Event::Idle => continue,
        };
        let why = format!("{} {} → balance {}", e.kind.as_str(), e.amount, e.balance_after);
        events.push((e.at, json!({ "at": format_rfc3339(e.at), "event": event.as_str(), "what": what, "why": why })));
    }
    // Not crossings, but the user should see why tokens left or came back: a grant's unused rest
    // expiring, and a run lost to the system refunded by gputokens.
    for e in entries.iter().filter(|e| e.is_expiry() || (e.kind == EntryKind::Refund && e.actor == "gputokens")) {
        let event = if e.is_expiry() { "expired" } else { "refunded" };
        let why = format!("{} {} → balance {}", e.kind.as_str(), e.amount, e.balance_after);
        events.push((e.at, json!({ "at": format_rfc3339(e.at), "event": event, "what": e.reason, "why": why })));
    }
    for a in res.ledger.actions(ACTIONS_READ).map_err(|e| e.to_string())?.iter().filter(|a| a.user == user) {
        let what = format!("job {}: {} ({})", res.config.clusters.job_shown(&a.target), a.action, a.reason);
        let event = if [FAULT_REQUEUE, FAULT_CANCEL].contains(&a.action.as_str()) {
            "failing GPU"
        } else if a.reason.starts_with("gputokens: borrowed run") {
            "reclaimed"
        } else {
            "preempted"
        };
        events.push((a.at, json!({ "at": format_rfc3339(a.at), "event": event, "what": what, "why": "" })));
    }
    events.sort_by_key(|(at, _)| std::cmp::Reverse(*at));

    // This month's charges spent on idle GPUs and the GPU energy of its jobs, from the month's
    // statement so far (energy where node agents measured it: none is null, not 0).
    let month = Month::of(local_date(now));
    let (idle, energy) = match res.ledger.statement(user, month, ledger::Issue { at: now, partial: true }) {
        Ok(statement) => {
            let (total, per_type) = idle_by_type(&statement);
            let per_type: Vec<Value> = per_type.iter().map(|(t, v)| json!({ "gpu_type": t, "tokens": v })).collect();
            let by_job: BTreeMap<String, String> =
                statement.energy.iter().map(|e| (res.config.clusters.job_shown(&e.job_id), kwh(e.joules))).collect();
            let energy = json!({ "month": month.to_string(), "kwh": energy_total(&statement).map(kwh) });
            (json!({ "month": month.to_string(), "tokens": total, "per_type": per_type }), (energy, by_job))
        }
        Err(_) => (
            json!({ "month": month.to_string(), "tokens": Tokens::ZERO, "per_type": [] }),
            (json!({ "month": month.to_string(), "kwh": null }), BTreeMap::new()),
        ),
    };
    let (energy_month, kwh_by_job) = energy;
    let jobs: Vec<Value> = jobs
        .into_iter()
        .map(|mut j| {
            let kwh = j["job"].as_str().and_then(|job| kwh_by_job.get(job)).cloned();
            j["kwh_month"] = json!(kwh);
            j
        })
        .collect();

    // What jobs spent (charges net of refunds), never an admin's adjustment or grant.
    let movements: Vec<forecast::Movement> =
        entries.iter().map(|e| forecast::Movement { at: e.at, kind: e.kind, amount: e.amount }).collect();
    let floor_on =
        forecast::floor_reached(&movements, row.balance, rules.floor, now).map(|at| local_date(at).to_string());
    let mut view = serde_json::to_value(BalanceJson::from(&row)).map_err(|e| e.to_string())?;
    let page = json!({
        "schema": SCHEMA,
        "idle_month": idle,
        "energy_month": energy_month,
        "chart": chart,
        "chart_days": CHART_DAYS,
        "jobs": jobs,
        "events": events.into_iter().map(|(_, e)| e).collect::<Vec<_>>(),
        "forecast": { "floor_on": floor_on, "window_days": forecast::WINDOW_DAYS },
        "now": format_rfc3339(now),
        "now_unix": now,
    });
    if let (Value::Object(view), Value::Object(page)) = (&mut view, page) {
        view.extend(page);
    }
    Ok(view)
}

/// The admins' page: every user, usage per GPU type, preemptions, drained GPUs, cycle health.
pub fn admin_view(answering: &Answering, now: i64) -> Result<Value, String> {
    let rules = *answering.res.ledger.rules();
    let users: Vec<Value> = answering
        .res
        .ledger
        .accounts()
        .map_err(|e| e.to_string())?
        .iter()
        .map(|a| json!({ "user": a.user, "balance": a.balance, "status": rules.status(a.balance) }))
        .collect();
    let first_day = local_date(now) - chrono::Days::new(29);
    let usage = answering.res.ledger.used_by_type_since(first_day).map_err(|e| e.to_string())?;
    let actions = answering.res.ledger.actions(ACTIONS_READ).map_err(|e| e.to_string())?;
    let preemptions: Vec<Value> = actions
        .iter()
        .filter(|a| a.action != "drain")
        .take(100)
        .map(|a| {
            json!({ "at": format_rfc3339(a.at), "action": a.action,
                    "job": answering.res.config.clusters.job_shown(&a.target), "user": a.user,
                         "reason": a.reason, "dry_run": a.dry_run })
        })
        .collect();
    let faults = answering.res.ledger.all_gpu_faults().map_err(|e| e.to_string())?;
    let waiting = answering.slurm_view().queue.as_ref().map(
        |q| json!({ "jobs": q.pending.values().filter(|p| p.gpus.is_some()).count(), "as_of": format_rfc3339(q.as_of) }),
    );
    Ok(json!({
        "schema": SCHEMA,
        "users": users,
        "usage_30d": usage,
        "waiting_gpu_jobs": waiting,
        "preemptions": preemptions,
        "drained": faults.iter().map(|f| json!({ "node": f.node, "gpu": f.gpu, "cause": f.cause,
                                                 "at": format_rfc3339(f.acted_at) })).collect::<Vec<_>>(),
        "cycles": answering.res.metrics.cycle_health(now),
        "now": format_rfc3339(now),
        "now_unix": now,
    }))
}
