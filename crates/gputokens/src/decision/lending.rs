//! `[lending]` at submission: a GPU job whose payer is in debt (in overdraft, or with `at_floor` at
//! or below the floor) runs as a borrowed run of idle GPUs. It is accepted at lower priority, made
//! requeueable, and told what that means; accountd reclaims it (requeues it, charging nothing) when
//! a user in credit waits for its GPU type. Only a batch job can be requeued: an interactive one of
//! a payer in debt is refused.

use crate::config::admission::Deprioritize;
use crate::config::Lending;

use super::rules::Decision;

/// What a submitter in debt is told of a borrowed run.
const BORROWED: &str = "gputokens: this job runs as a borrowed run on idle GPUs: it starts only when no user in \
     credit waits for its GPU type, is requeued (not cancelled) as soon as one does, and is not charged for a run \
     that is requeued so; a run that finishes is charged as usual";

/// What lending makes of a submission's decision.
pub(super) enum Lent {
    /// Not a borrowed run: the decision stands.
    No,
    /// A borrowed run, decided so (it must be made requeueable).
    Borrowed(Decision),
    /// An interactive job of a payer in debt: refused with this message.
    Refused(String),
}

/// Where `[lending]` applies to a submission decided `decision`: its payer (`payer`, as a message
/// names it) is in overdraft, or refused at its floor (`at_floor`) where the site lends there.
/// `batch`: None for an update, which lending leaves as it is.
pub(super) fn lend(
    decision: &Decision,
    lending: Lending,
    batch: Option<bool>,
    (at_floor, payer): (bool, &str),
    how: &Deprioritize,
) -> Lent {
    // Submissions only (an update says nothing of a script): an update is judged as before, and
    // never made requeueable by the plugin.
    let Some(batch) = batch.filter(|_| lending.enabled) else { return Lent::No };
    let lent_at_floor = match decision {
        Decision::AcceptDeprioritized { .. } => false,
        Decision::Reject { .. } if lending.at_floor && at_floor => true,
        _ => return Lent::No,
    };
    if !batch {
        return Lent::Refused(format!(
            "gputokens: {payer} is in debt, so its GPU jobs run only as borrowed runs on idle GPUs, which are requeued \
             when a user in credit needs them: an interactive job (srun, salloc) cannot be; submit it with sbatch. \
             Run 'sbalance' for details."
        ));
    }
    let message = match (decision, lent_at_floor) {
        (Decision::Reject { message }, true) => {
            let head = message.split(';').next().unwrap_or_default();
            format!("{head}; {}.", BORROWED.trim_start_matches("gputokens: "))
        }
        (Decision::AcceptDeprioritized { message, .. }, _) => format!("{message}\n{BORROWED}."),
        _ => BORROWED.to_string(),
    };
    Lent::Borrowed(Decision::AcceptDeprioritized { how: how.clone(), message })
}
