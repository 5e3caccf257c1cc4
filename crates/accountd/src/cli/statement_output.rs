//! How `sbalance --statement` prints statements: a text statement to read, and rows to parse (`-P`,
//! `--csv`: one row per user and line item, between an opening and a closing row, so that the
//! Amount column of a user's rows, opening included, sums to the closing balance) or `--json`.

use gputokens::config::Clusters;
use gputokens::statement::{energy_total, gpu_hours, idle_summary, kwh, Item, JobEnergy, Line, Month, Statement};
use gputokens::time::{format_local, local_date};
use gputokens::Tokens;

use crate::cli::admin::signed;

/// The columns of `-P` and `--csv`.
pub const ROW_HEADER: [&str; 13] = [
    "User",
    "Month",
    "Item",
    "Date",
    "Amount",
    "GPUType",
    "GPUHours",
    "GPUSeconds",
    "KWh",
    "Days",
    "JobID",
    "Actor",
    "Reason",
];

/// One row per line item, between the `opening` and `closing` rows; amounts of items are signed.
pub fn rows(s: &Statement) -> Vec<[String; 13]> {
    let month = s.month.to_string();
    let row = |item: &str, date: String, amount: String, reason: &str| {
        let mut row: [String; 13] = Default::default();
        row[..5].clone_from_slice(&[s.user.clone(), month.clone(), item.to_string(), date, amount]);
        row[12] = reason.to_string();
        row
    };
    let mut out = vec![row("opening", s.month.first_day().to_string(), s.opening.to_string(), "")];
    for line in &s.lines {
        let mut r = row(
            line.item.as_str(),
            line.date.map(|d| d.to_string()).unwrap_or_default(),
            signed(line.amount),
            line.reason.as_deref().unwrap_or(""),
        );
        r[5] = line.gpu_type.clone().unwrap_or_default();
        r[6] = line.gpu_seconds.map(gpu_hours).unwrap_or_default();
        r[7] = line.gpu_seconds.map(|s| s.to_string()).unwrap_or_default();
        r[8] = line.energy_joules.map(kwh).unwrap_or_default();
        r[9] = line.days.map(|d| d.to_string()).unwrap_or_default();
        r[10] = line.job_id.clone().unwrap_or_default();
        r[11] = line.actor.clone().unwrap_or_default();
        if line.item == Item::Charge {
            r[12] = charge_note(line);
        }
        out.push(r);
    }
    let so_far = if s.partial { "so far: the month is not over" } else { "" };
    out.push(row("closing", closing_date(s), s.closing.to_string(), so_far));
    out
}

/// The day the closing balance stands at: the month's last, or today's for a month not over.
fn closing_date(s: &Statement) -> String {
    if s.partial { local_date(s.issued) } else { s.month.last_day() }.to_string()
}

/// `-P` cells: a reason is free text, so line breaks in it become spaces to keep one row a line
/// (it is the last column: a `|` in it is read back by splitting at the first twelve).
pub fn parsable_cells(s: &Statement) -> Vec<Vec<String>> {
    rows(s).into_iter().map(|r| r.into_iter().map(|c| c.replace(['\n', '\r'], " ")).collect()).collect()
}

/// One CSV record (RFC 4180): a field with a comma, a quote or a line break is quoted, its quotes
/// doubled; user names may hold commas and quotes, reasons anything.
pub fn csv_record<S: AsRef<str>>(fields: &[S]) -> String {
    let quoted: Vec<String> = fields
        .iter()
        .map(|f| {
            let f = f.as_ref();
            if f.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f.to_string()
            }
        })
        .collect();
    quoted.join(",") + "\r\n"
}

/// `--json`: the statements as accountd sent them (amounts as exact decimal strings), with each
/// charge's GPU-hours beside its exact GPU-seconds.
pub fn json(statements: &[Statement]) -> String {
    #[derive(serde::Serialize)]
    struct Out<'a> {
        schema: u32,
        statements: Vec<StatementJson<'a>>,
    }
    #[derive(serde::Serialize)]
    struct StatementJson<'a> {
        user: &'a str,
        month: Month,
        partial: bool,
        /// RFC 3339 with the local offset, and unix seconds: as every instant in the JSON.
        issued: String,
        issued_unix: i64,
        opening: Tokens,
        lines: Vec<LineJson<'a>>,
        closing: Tokens,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        members: Vec<MemberJson<'a>>,
        /// Each charged job's GPU energy of the month, the most first.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        energy: Vec<EnergyJson<'a>>,
    }
    #[derive(serde::Serialize)]
    struct EnergyJson<'a> {
        #[serde(flatten)]
        job: &'a JobEnergy,
        kwh: f64,
    }
    #[derive(serde::Serialize)]
    struct MemberJson<'a> {
        user: &'a str,
        charged: Tokens,
    }
    #[derive(serde::Serialize)]
    struct LineJson<'a> {
        #[serde(flatten)]
        line: &'a Line,
        #[serde(skip_serializing_if = "Option::is_none")]
        gpu_hours: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        kwh: Option<f64>,
    }
    let statements = statements
        .iter()
        .map(|s| StatementJson {
            user: &s.user,
            month: s.month,
            partial: s.partial,
            issued: gputokens::time::format_rfc3339(s.issued),
            issued_unix: s.issued,
            opening: s.opening,
            lines: s
                .lines
                .iter()
                .map(|line| LineJson {
                    line,
                    gpu_hours: line.gpu_seconds.map(|s| s as f64 / 3600.0),
                    kwh: line.energy_joules.map(kwh_number),
                })
                .collect(),
            closing: s.closing,
            members: s.members.iter().map(|(user, charged)| MemberJson { user, charged: *charged }).collect(),
            energy: s.energy.iter().map(|job| EnergyJson { job, kwh: kwh_number(job.joules) }).collect(),
        })
        .collect();
    serde_json::to_string_pretty(&Out { schema: crate::balance_json::SCHEMA, statements }).unwrap_or_default() + "\n"
}

/// The statement to read: one line per item, amounts right-aligned, who and why last.
pub fn text(s: &Statement, header: bool) -> String {
    let as_of = if s.partial { format!(" (so far, as of {})", format_local(s.issued)) } else { String::new() };
    let closing = if s.partial { "closing balance (so far)" } else { "closing balance" };
    let mut rows: Vec<[String; 4]> =
        vec![[s.month.first_day().to_string(), "opening balance".into(), s.opening.to_string(), String::new()]];
    rows.extend(s.lines.iter().map(|l| {
        let date = l.date.map(|d| d.to_string()).unwrap_or_default();
        [date, label(l), signed(l.amount), note(l)]
    }));
    rows.push([closing_date(s), closing.into(), s.closing.to_string(), String::new()]);
    let columns = ["Date", "Item", "Amount", "Note"];
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).chain([columns[i].len()]).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1), width(2));
    let line = |[date, item, amount, note]: [&str; 4]| {
        format!("{date:<w0$}  {item:<w1$}  {amount:>w2$}  {note}").trim_end().to_string() + "\n"
    };
    let mut out = format!("Statement of {} for {}{as_of}\n", s.user, s.month);
    if header {
        out += &line(columns);
    }
    for r in &rows {
        out += &line([&r[0], &r[1], &r[2], &r[3]]);
    }
    if let Some((idle, types)) = idle_summary(s) {
        out += &format!("You spent {idle} tokens on idle GPUs this month ({types}).\n");
    }
    if let Some(total) = energy_total(s) {
        out += &energy_sentence(total, &s.energy, energy_tokens(s));
    }
    if !s.members.is_empty() {
        out += "Charged by member:\n";
        let width = s.members.iter().map(|(u, _)| u.chars().count()).max().unwrap_or(0);
        for (user, spent) in &s.members {
            out += &format!("  {user:<width$}  {}\n", signed(-*spent));
        }
    }
    out
}

/// Jobs named in the sentence on the month's GPU energy; the rest are counted.
const ENERGY_JOBS_NAMED: usize = 5;

/// `Your jobs' GPUs used 1.25 kWh this month (job 4242 1 kWh, 4243 0.25 kWh).`, the most first;
/// where energy was charged, `..., charged 2.5 tokens.`
fn energy_sentence(total: u64, jobs: &[JobEnergy], charged: Option<Tokens>) -> String {
    let mut named: Vec<String> =
        jobs.iter().take(ENERGY_JOBS_NAMED).map(|j| format!("{} {} kWh", j.job_id, kwh(j.joules))).collect();
    if jobs.len() > ENERGY_JOBS_NAMED {
        named.push(format!("{} more", jobs.len() - ENERGY_JOBS_NAMED));
    }
    let job = if jobs.len() == 1 { "job" } else { "jobs" };
    let charged = charged.map(|t| format!(", charged {t} tokens")).unwrap_or_default();
    format!("Your jobs' GPUs used {} kWh this month ({job} {}){charged}.\n", kwh(total), named.join(", "))
}

/// What the statement's charge lines charged for GPU energy; None where nothing was.
fn energy_tokens(s: &Statement) -> Option<Tokens> {
    s.lines.iter().filter_map(|l| l.energy_tokens).reduce(|a, b| a.checked_add(b).unwrap_or(Tokens::MAX))
}

/// Kilowatt-hours as a JSON number, to the watt-hour as `kwh` rounds them.
fn kwh_number(joules: u64) -> f64 {
    kwh(joules).parse().unwrap_or(0.0)
}

fn idle_note(idle: Tokens) -> String {
    format!("{idle} of it on idle GPUs")
}

/// Names each job of `statement` as people see it ([`Clusters::job_shown`]: `old:41` where the
/// ledger has several clusters).
pub fn show_jobs(statement: &mut Statement, clusters: &Clusters) {
    for line in &mut statement.lines {
        if let Some(job) = &mut line.job_id {
            *job = clusters.job_shown(job);
        }
    }
    for energy in &mut statement.energy {
        energy.job_id = clusters.job_shown(&energy.job_id);
    }
}

/// A charge line's note: what of it paid for GPU energy, for GPUs its jobs' CPUs or memory left
/// idle (`[prices] stranded`), and what was spent on idle GPUs.
fn charge_note(l: &Line) -> String {
    let energy = l.energy_tokens.map(|t| format!("{t} of it for energy"));
    let stranded = l.stranded.map(|t| format!("{t} of it for the GPUs left idle by the CPUs or memory its jobs held"));
    [energy, stranded, l.idle.map(idle_note)].into_iter().flatten().collect::<Vec<_>>().join("; ")
}

fn label(l: &Line) -> String {
    match l.item {
        Item::Initial => "initial balance".into(),
        Item::Import => "imported balance".into(),
        Item::Monthly => "monthly grant".into(),
        Item::Daily => match l.days {
            Some(1) => "daily replenishment, 1 day".into(),
            Some(n) => format!("daily replenishment, {n} days"),
            None => "daily replenishment".into(),
        },
        Item::Grant => "grant".into(),
        Item::Adjust => "adjustment".into(),
        Item::Expired => "grant expired".into(),
        Item::Refund => match &l.job_id {
            Some(job) => format!("refund of job {job}"),
            None => "refund".into(),
        },
        Item::Charge => {
            let energy = l.energy_joules.map(|j| format!(", {} kWh", kwh(j))).unwrap_or_default();
            format!(
                "{}, {} GPU-hours{energy}",
                l.gpu_type.as_deref().unwrap_or_default(),
                gpu_hours(l.gpu_seconds.unwrap_or_default())
            )
        }
    }
}

/// Who made a change by hand, and why; gputokens' own entries say nothing more than their label,
/// but for a charge line what of it paid for energy and was spent on idle GPUs.
fn note(l: &Line) -> String {
    if l.item == Item::Charge {
        return charge_note(l);
    }
    let reason = gputokens::free_text::printable(l.reason.as_deref().unwrap_or_default()).into_owned();
    match l.actor.as_deref() {
        // Which grant, and when it ended; which run was lost, and to what: their own words.
        Some("gputokens") if matches!(l.item, Item::Expired | Item::Refund) => reason,
        None | Some("gputokens") => String::new(),
        Some(actor) if reason.is_empty() => actor.to_string(),
        Some(actor) => format!("{actor}: {reason}"),
    }
}

#[cfg(test)]
mod tests;
