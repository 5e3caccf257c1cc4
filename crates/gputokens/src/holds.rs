//! Pending GPU jobs of a payer at the floor are held (`[admission] hold_at_floor`): the job_submit
//! plugin judges a job once, when it is submitted, so without this the pending tasks of an array
//! admitted just above the floor, a requeued run, or a job that waited while its payer spent down
//! would start anyway. accountd holds them with `scontrol hold` and releases what it held once the
//! payer is above the floor again. This is the pure choice; accountd reads squeue and acts.

/// How a pending job is held now, from squeue's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    No,
    /// `JobHeldAdmin`: by an operator or admin (gputokens' own holds look like this).
    ByAdmin,
    /// `JobHeldUser`: by its owner.
    ByUser,
}

impl Held {
    /// From the job's priority (0 while it is held, whatever reason squeue shows: a held job may
    /// show another, as BadConstraints) and its reason (`JobHeldUser` for its owner's hold).
    pub fn of(priority: Option<i64>, state_reason: &str) -> Held {
        match (priority, state_reason) {
            (_, "JobHeldUser") => Held::ByUser,
            (_, "JobHeldAdmin") | (Some(0), _) => Held::ByAdmin,
            _ => Held::No,
        }
    }
}

/// What gputokens last did about holding a job (its audit trail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Last {
    /// Held it, and has not released it.
    Held,
    /// Held it over its owner's own hold (which it puts back when it releases it).
    HeldOverOwner,
    /// Released it, or never held it, or its hold failed (tried again).
    NotHeld,
    /// Someone else released a job gputokens held: never held again.
    Lifted,
}

/// The audit trail's names of what gputokens does about holds.
pub const HOLD: &str = "hold";
pub const HOLD_OVER_OWNER: &str = "hold-over-owner";
pub const HOLD_FAILED: &str = "hold-failed";
pub const RELEASE: &str = "release";
pub const RELEASE_FAILED: &str = "release-failed";
pub const HOLD_LIFTED: &str = "hold-lifted";

impl Last {
    /// From the newest of those actions on the job (None: none).
    pub fn from_action(action: Option<&str>) -> Last {
        match action {
            Some(HOLD) | Some(RELEASE_FAILED) => Last::Held,
            Some(HOLD_OVER_OWNER) => Last::HeldOverOwner,
            Some(HOLD_LIFTED) => Last::Lifted,
            _ => Last::NotHeld,
        }
    }
}

/// A pending GPU job as the choice sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// A balance that pays for it is at or below its floor.
    pub payer_at_floor: bool,
    /// Its user, account or QOS is in `[exempt]`.
    pub exempt: bool,
    pub held: Held,
    pub last: Last,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Hold,
    /// Hold a job its owner holds: a user hold is the owner's to release, and would let the job
    /// start between two cycles at the floor.
    HoldOverOwner,
    Release,
    /// Release, then put back its owner's hold.
    ReleaseToOwner,
    /// Someone released (or re-held as its owner) a job gputokens held: recorded, left alone.
    Lifted,
    Nothing,
}

/// What to do about one pending GPU job.
pub fn step(job: Pending) -> Step {
    let should_wait = job.payer_at_floor && !job.exempt;
    match (job.last, job.held) {
        (Last::Held, Held::ByAdmin) if !should_wait => Step::Release,
        (Last::HeldOverOwner, Held::ByAdmin) if !should_wait => Step::ReleaseToOwner,
        (Last::Held | Last::HeldOverOwner, Held::ByAdmin) => Step::Nothing,
        (Last::Held | Last::HeldOverOwner, Held::No | Held::ByUser) => Step::Lifted,
        (Last::Lifted, _) => Step::Nothing,
        (Last::NotHeld, Held::No) if should_wait => Step::Hold,
        (Last::NotHeld, Held::ByUser) if should_wait => Step::HoldOverOwner,
        (Last::NotHeld, _) => Step::Nothing,
    }
}

/// How the note added to a held job's comment begins: it is found by it and taken off when the job
/// is released.
pub const COMMENT_PREFIX: &str = "gputokens: held while ";

/// Why a pending job is held: its payer is at the floor, or its user spent the per-user limit of
/// the pool that pays for it this month.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The payer (a user, or `account <name>`).
    AtFloor(String),
    OverLimit {
        account: String,
        user: String,
    },
    /// A dated sub-allocation before its start or after its end.
    Closed {
        account: String,
    },
}

impl Stopped {
    /// Why, in the audit trail and the log: `alice is at the floor`.
    pub fn reason(&self) -> String {
        match self {
            Stopped::AtFloor(payer) => format!("{payer} is at the floor"),
            Stopped::OverLimit { account, user } => {
                format!("{user} spent the per-user limit of account {account} this month")
            }
            Stopped::Closed { account } => format!("the sub-allocation {account} is closed"),
        }
    }

    /// The note added to the held job's comment.
    pub fn comment_note(&self) -> String {
        match self {
            Stopped::AtFloor(payer) => comment_note(payer),
            Stopped::OverLimit { account, user } => format!(
                "{COMMENT_PREFIX}{user} is over the per-user limit of account {account}, released next month or when \
                 the limit is raised"
            ),
            Stopped::Closed { account } => {
                format!("{COMMENT_PREFIX}the sub-allocation {account} is closed, released if it opens")
            }
        }
    }
}

/// The note added to a held job's comment.
pub fn comment_note(payer: &str) -> String {
    format!("{COMMENT_PREFIX}{payer} is at the floor, released when it is above")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(payer_at_floor: bool, held: Held, last: Last) -> Pending {
        Pending { payer_at_floor, exempt: false, held, last }
    }

    #[test]
    fn a_payer_at_the_floor_has_its_pending_jobs_held_and_released_when_it_recovers() {
        assert_eq!(step(pending(true, Held::No, Last::NotHeld)), Step::Hold);
        assert_eq!(step(pending(true, Held::ByAdmin, Last::Held)), Step::Nothing, "held already");
        assert_eq!(step(pending(false, Held::ByAdmin, Last::Held)), Step::Release);
        assert_eq!(step(pending(false, Held::No, Last::NotHeld)), Step::Nothing);
    }

    #[test]
    fn exempt_jobs_are_never_held_and_a_held_one_is_released() {
        let exempt = Pending { exempt: true, ..pending(true, Held::No, Last::NotHeld) };
        assert_eq!(step(exempt), Step::Nothing);
        let made_exempt = Pending { exempt: true, ..pending(true, Held::ByAdmin, Last::Held) };
        assert_eq!(step(made_exempt), Step::Release);
    }

    #[test]
    fn others_holds_are_theirs_and_a_release_by_someone_else_is_respected() {
        // An admin's hold, or the owner's above the floor: not gputokens' to release, nor to add to.
        assert_eq!(step(pending(false, Held::ByAdmin, Last::NotHeld)), Step::Nothing);
        assert_eq!(step(pending(true, Held::ByAdmin, Last::NotHeld)), Step::Nothing);
        assert_eq!(step(pending(false, Held::ByUser, Last::NotHeld)), Step::Nothing);
        // An admin released what gputokens held: recorded, and never held again.
        assert_eq!(step(pending(true, Held::No, Last::Held)), Step::Lifted);
        assert_eq!(step(pending(true, Held::No, Last::Lifted)), Step::Nothing);
        assert_eq!(step(pending(true, Held::ByUser, Last::Held)), Step::Lifted);
    }

    /// An owner's own hold at the floor would be theirs to release right after a cycle: gputokens
    /// holds it as an operator, and puts the owner's hold back when it releases it.
    #[test]
    fn an_owners_hold_at_the_floor_becomes_gputokens_and_goes_back_to_the_owner() {
        assert_eq!(step(pending(true, Held::ByUser, Last::NotHeld)), Step::HoldOverOwner);
        assert_eq!(step(pending(true, Held::ByAdmin, Last::HeldOverOwner)), Step::Nothing);
        assert_eq!(step(pending(false, Held::ByAdmin, Last::HeldOverOwner)), Step::ReleaseToOwner);
        assert_eq!(step(pending(true, Held::No, Last::HeldOverOwner)), Step::Lifted, "an admin released it");
        assert_eq!(Last::from_action(Some(HOLD_OVER_OWNER)), Last::HeldOverOwner);
    }

    #[test]
    fn a_held_job_is_known_by_its_priority_whatever_its_reason() {
        assert_eq!(Held::of(Some(0), "BadConstraints"), Held::ByAdmin);
        assert_eq!(Held::of(Some(0), "JobHeldUser"), Held::ByUser);
        assert_eq!(Held::of(Some(4294901759), "Resources"), Held::No);
        assert_eq!(Held::of(None, "JobHeldAdmin"), Held::ByAdmin);
        assert_eq!(Held::of(None, "Priority"), Held::No);
    }

    #[test]
    fn the_audit_trail_reads_back() {
        assert_eq!(Last::from_action(None), Last::NotHeld);
        assert_eq!(Last::from_action(Some(HOLD)), Last::Held);
        assert_eq!(Last::from_action(Some(HOLD_FAILED)), Last::NotHeld, "tried again");
        assert_eq!(Last::from_action(Some(RELEASE)), Last::NotHeld);
        assert_eq!(Last::from_action(Some(RELEASE_FAILED)), Last::Held, "release tried again");
        assert_eq!(Last::from_action(Some(HOLD_LIFTED)), Last::Lifted);
    }
}
