//! Shadow mode (`[admission] enforce = false`): a site tries gputokens on its live cluster without
//! refusing anyone. Every decision is made as it would be and logged, marked as not enforced; the
//! job is accepted as submitted and its submitter told nothing. What enforcement would have done
//! is counted, so a site sees whom it would have stopped before it turns enforcement on.

use super::{Changes, Level, Log, Outcome, Verdict};

/// What enforcement would have done to one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Would {
    Refuse,
    /// Put behind others (nice, site factor or QOS), in overdraft.
    Deprioritize,
    /// Given a shorter time limit (`max_job_duration`).
    Limit,
}

impl Would {
    pub fn as_str(self) -> &'static str {
        match self {
            Would::Refuse => "refuse",
            Would::Deprioritize => "deprioritize",
            Would::Limit => "limit",
        }
    }
}

/// The log line prefix of a decision made in shadow mode.
pub const PREFIX: &str = "shadow mode, not enforced: ";

/// Runs `decision` in shadow mode: its log lines marked as not enforced, its verdict an untouched
/// accept (what it admitted stays counted), and what enforcement would have done.
pub fn decide(decision: impl FnOnce(&mut Log) -> Outcome, log: &mut Log) -> (Outcome, Vec<Would>) {
    let mut marked = |level: Level, line: String| log(level, format!("{PREFIX}{line}"));
    let outcome = decision(&mut marked);
    let would = match &outcome.verdict {
        Verdict::Reject { .. } => vec![Would::Refuse],
        Verdict::Accept { changes, .. } => {
            // A borrowed run (`requeue`) is accepted deprioritized: counted as that.
            let Changes { nice, site_factor, qos, time_limit, requeue: _ } = changes;
            let mut would = Vec::new();
            if nice.is_some() || site_factor.is_some() || qos.is_some() {
                would.push(Would::Deprioritize);
            }
            if time_limit.is_some() {
                would.push(Would::Limit);
            }
            would
        }
    };
    (Outcome { verdict: Verdict::accept(), ..outcome }, would)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(verdict: Verdict) -> Outcome {
        Outcome { verdict, admitted: None, pool: None }
    }

    #[test]
    fn what_would_be_refused_or_changed_is_accepted_untouched_and_counted() {
        let mut lines = Vec::new();
        let mut log = |_: Level, line: String| lines.push(line);
        let refuse = |log: &mut Log| {
            log(
                Level::Info,
                "refused a GPU job of alice (uid 1001): balance -10.4 is at or below the floor -10".into(),
            );
            outcome(Verdict::Reject { message: "your GPU token balance is -10.4".into() })
        };
        let (shadowed, would) = decide(refuse, &mut log);
        assert_eq!((shadowed.verdict, would), (Verdict::accept(), vec![Would::Refuse]));
        let changes = Changes { nice: Some(10_000), time_limit: Some(120), ..Changes::default() };
        let penalize = |_: &mut Log| outcome(Verdict::Accept { changes, message: Some("in overdraft".into()) });
        let (shadowed, would) = decide(penalize, &mut log);
        assert_eq!(shadowed.verdict, Verdict::accept(), "nothing changed, nothing told");
        assert_eq!(would, [Would::Deprioritize, Would::Limit]);
        let (_, would) = decide(|_: &mut Log| outcome(Verdict::accept()), &mut log);
        assert!(would.is_empty());
        assert_eq!(
            lines,
            ["shadow mode, not enforced: refused a GPU job of alice (uid 1001): balance -10.4 is at or below the floor -10"]
        );
    }
}
