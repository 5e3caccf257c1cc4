//! Grants with an end date, each check cycle: a grant with tokens left is announced once
//! `[notify] expiry_warning` before it ends (a notification, when they are on), and what is left of
//! an ended grant expires to the ledger (`ledger::Ledger::expire_grants`).

use gputokens::notify::{expiring_message, Event};
use gputokens::time::format_local;
use ledger::NewNotice;

use crate::error::AccountdResult;
use crate::resources::Resources;

/// What one cycle did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub warned: usize,
    pub expired: usize,
}

pub fn run(res: &mut Resources, now: i64) -> AccountdResult<Expired> {
    let ahead = res.config.notify.expiry_warning.as_secs() as i64;
    let mut done = Expired::default();
    for grant in res.ledger.grants_to_warn(now.saturating_add(ahead))? {
        let balance = res.ledger.account(&grant.user)?.map(|a| a.balance).unwrap_or_default();
        let at_stake = grant.at_stake(balance);
        if at_stake == gputokens::Tokens::ZERO {
            continue; // nothing would expire (yet): warned when there is, if before its end
        }
        // A pool's grant is announced in the ledger only: its members' notifications are theirs.
        let notice =
            (res.config.notify.enabled() && gputokens::pools::account_of(&grant.user).is_none()).then(|| NewNotice {
                user: grant.user.clone(),
                event: Event::Expiring,
                balance,
                job_id: None,
                message: expiring_message(at_stake, grant.amount, &format_local(grant.expires_at), balance),
            });
        res.ledger.mark_warned(grant.entry_id, notice.as_ref(), now)?;
        done.warned += 1;
    }
    let expired = res.ledger.expire_grants(now)?;
    for entry in &expired {
        tracing::info!("{}: {}", entry.user, entry.reason);
    }
    done.expired = expired.len();
    Ok(done)
}
