//! Notifications (tables `notify_levels` and `notifications`): the level each user was last notified
//! at, and each notification owed or sent. A crossing changes the level and records the notification
//! it owes in one transaction; accountd runs the command and then marks it sent. At-least-once: only
//! a process killed between the command's success and `mark_sent` sends one again; once marked sent,
//! never again, and an owed one survives any restart until it is sent.

use std::collections::HashMap;

use crate::db::{params, OptionalExtension};

use super::{Action, Ledger, LedgerError};
use gputokens::notify::{Event, Level};
use gputokens::tokens::Tokens;

/// A notification to record as owed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNotice {
    pub user: String,
    pub event: Event,
    pub balance: Tokens,
    pub job_id: Option<String>,
    pub message: String,
}

/// An owed notification, as the command gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub id: i64,
    pub user: String,
    pub event: Event,
    pub balance: Tokens,
    pub job_id: Option<String>,
    pub message: String,
    pub attempts: i64,
}

impl Ledger {
    /// The level each user was last notified at (a user missing here is at `ok`).
    pub fn notify_levels(&self) -> Result<HashMap<String, Level>, LedgerError> {
        let mut stmt = self.conn.prepare_cached("SELECT user, level FROM notify_levels")?;
        let rows = stmt.query_map((), |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?)))?;
        let mut levels = HashMap::new();
        for row in rows {
            let (user, level) = row?;
            levels.insert(user, Level::parse(&level).unwrap_or(Level::Ok));
        }
        Ok(levels)
    }

    /// Moves `user` to `level` and records `notice` as owed, in one transaction; a no-op (false)
    /// when the user is at `level` already, so two cycles never record the same crossing twice.
    pub fn record_crossing(
        &mut self,
        user: &str,
        level: Level,
        notice: Option<&NewNotice>,
        at: i64,
    ) -> Result<bool, LedgerError> {
        let tx = self.conn.transaction()?;
        let current: Option<String> =
            tx.query_row("SELECT level FROM notify_levels WHERE user = ?1", [user], |r| r.get(0)).optional()?;
        if current.as_deref().unwrap_or(Level::Ok.as_str()) == level.as_str() {
            return Ok(false);
        }
        tx.execute(
            tx.dialect().pick(
                "INSERT INTO notify_levels (user, level, at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (user) DO UPDATE SET level = excluded.level, at = excluded.at",
                "INSERT INTO notify_levels (user, level, at) VALUES (?1, ?2, ?3)
                 ON DUPLICATE KEY UPDATE level = VALUES(level), at = VALUES(at)",
            ),
            params![user, level.as_str(), at],
        )?;
        if let Some(notice) = notice {
            insert_notice(&tx, notice, None, at)?;
        }
        tx.commit()?;
        Ok(true)
    }

    /// Records a preemption (or another action on a job) and, with `notice`, the notification it
    /// owes its user, in one transaction (keyed by the action, so it is owed once).
    pub fn record_action_noticed(&mut self, action: &Action, notice: Option<&NewNotice>) -> Result<(), LedgerError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO actions (at, action, target, user, reason, dry_run) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![action.at, action.action, action.target, action.user, action.reason, action.dry_run],
        )?;
        let id = tx.last_insert_rowid();
        if let Some(notice) = notice {
            insert_notice(&tx, notice, Some(format!("preempted:{id}")), action.at)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Owes `notice`, once per `key`: a key owed before adds nothing.
    pub fn record_notice(&mut self, notice: &NewNotice, key: &str, at: i64) -> Result<(), LedgerError> {
        let tx = self.conn.transaction()?;
        insert_notice(&tx, notice, Some(key.to_string()), at)?;
        tx.commit()?;
        Ok(())
    }

    /// Owed notifications, oldest first, at most `limit`.
    pub fn owed_notifications(&self, limit: usize) -> Result<Vec<Notice>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, user, event, balance, job_id, message, attempts FROM notifications
             WHERE sent_at IS NULL ORDER BY id LIMIT ?1",
        )?;
        let rows = stmt.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
            let event: String = r.get(2)?;
            Ok(Notice {
                id: r.get(0)?,
                user: r.get(1)?,
                // Only this module writes the column, from Event::as_str.
                event: Event::parse(&event).unwrap_or(Event::Warning),
                balance: Tokens::from_micro(r.get(3)?),
                job_id: r.get(4)?,
                message: r.get(5)?,
                attempts: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The command succeeded for notification `id`: it is never sent again.
    pub fn mark_sent(&mut self, id: i64, at: i64) -> Result<(), LedgerError> {
        self.conn.execute(
            "UPDATE notifications SET sent_at = ?2, attempts = attempts + 1, last_error = NULL
             WHERE id = ?1 AND sent_at IS NULL",
            params![id, at],
        )?;
        Ok(())
    }

    /// The command failed for notification `id`: it stays owed, with the error.
    pub fn mark_failed(&mut self, id: i64, error: &str) -> Result<(), LedgerError> {
        self.conn.execute(
            "UPDATE notifications SET attempts = attempts + 1, last_error = ?2 WHERE id = ?1 AND sent_at IS NULL",
            params![id, error],
        )?;
        Ok(())
    }

    /// Every notification of `user` as (event, sent), oldest first (for tests and audits).
    pub fn notifications_of(&self, user: &str) -> Result<Vec<(Event, bool)>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT event, sent_at IS NOT NULL FROM notifications WHERE user = ?1 ORDER BY id")?;
        let rows = stmt.query_map([user], |r| Ok((r.get::<String>(0)?, r.get::<bool>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (event, sent) = row?;
            out.extend(Event::parse(&event).map(|e| (e, sent)));
        }
        Ok(out)
    }
}

pub(crate) fn insert_notice(
    tx: &crate::db::Transaction,
    notice: &NewNotice,
    key: Option<String>,
    at: i64,
) -> Result<(), LedgerError> {
    tx.execute(
        tx.dialect().pick(
            "INSERT INTO notifications (user, event, key, balance, job_id, message, owed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (key) DO NOTHING",
            "INSERT INTO notifications (user, event, key, balance, job_id, message, owed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON DUPLICATE KEY UPDATE id = id",
        ),
        params![notice.user, notice.event.as_str(), key, notice.balance.micro(), notice.job_id, notice.message, at],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::notify::crossing;
    use gputokens::policy::BucketRules;

    fn open(dir: &tempfile::TempDir) -> Ledger {
        Ledger::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap()
    }

    fn notice(user: &str, event: Event, balance: i64) -> NewNotice {
        NewNotice { user: user.into(), event, balance: Tokens::whole(balance), job_id: None, message: "m".into() }
    }

    /// One cycle: the crossing of each balance, recorded as accountd does.
    fn cycle(l: &mut Ledger, balances: &[(&str, i64)], at: i64) {
        let levels = l.notify_levels().unwrap();
        for (user, balance) in balances {
            let last = levels.get(*user).copied().unwrap_or(Level::Ok);
            if let Some(c) = crossing(last, Tokens::whole(*balance), Tokens::whole(10), Tokens::whole(-10)) {
                let n = c.event.map(|e| notice(user, e, *balance));
                l.record_crossing(user, c.level, n.as_ref(), at).unwrap();
            }
        }
    }

    #[test]
    fn crossings_are_owed_once_and_survive_reopening_until_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = open(&dir);
        cycle(&mut l, &[("alice", 5), ("bob", 100)], 1);
        cycle(&mut l, &[("alice", -5), ("bob", 100)], 2);
        cycle(&mut l, &[("alice", -5)], 3);
        drop(l);
        let mut l = open(&dir);
        cycle(&mut l, &[("alice", -11)], 4);
        let owed = l.owed_notifications(10).unwrap();
        let events: Vec<&str> = owed.iter().map(|n| n.event.as_str()).collect();
        assert_eq!(events, ["warning", "overdraft", "floor"]);
        assert!(owed.iter().all(|n| n.user == "alice"));
        assert_eq!(owed[2].balance, Tokens::whole(-11));
        l.mark_sent(owed[0].id, 5).unwrap();
        l.mark_failed(owed[1].id, "exit status 1").unwrap();
        drop(l);
        let mut l = open(&dir);
        let owed = l.owed_notifications(10).unwrap();
        assert_eq!(
            owed.iter().map(|n| (n.event, n.attempts)).collect::<Vec<_>>(),
            [(Event::Overdraft, 1), (Event::Floor, 0)]
        );
        for n in &owed {
            l.mark_sent(n.id, 6).unwrap();
        }
        assert_eq!(l.owed_notifications(10).unwrap(), []);
        // Nothing repeats: the level is remembered.
        cycle(&mut l, &[("alice", -11)], 7);
        assert_eq!(l.owed_notifications(10).unwrap(), []);
        // A recovery, then a new fall.
        cycle(&mut l, &[("alice", 20)], 8);
        cycle(&mut l, &[("alice", 5)], 9);
        assert_eq!(
            l.notifications_of("alice").unwrap(),
            [
                (Event::Warning, true),
                (Event::Overdraft, true),
                (Event::Floor, true),
                (Event::Recovered, false),
                (Event::Warning, false),
            ]
        );
        assert_eq!(l.notifications_of("bob").unwrap(), []);
    }

    #[test]
    fn a_crossing_already_recorded_is_not_recorded_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = open(&dir);
        let n = notice("alice", Event::Overdraft, -5);
        assert!(l.record_crossing("alice", Level::Overdraft, Some(&n), 1).unwrap());
        // A second process that read the old level before the first recorded the crossing.
        assert!(!l.record_crossing("alice", Level::Overdraft, Some(&n), 2).unwrap());
        assert!(!l.record_crossing("bob", Level::Ok, None, 2).unwrap(), "ok is where everyone starts");
        assert_eq!(l.owed_notifications(10).unwrap().len(), 1);
    }

    #[test]
    fn a_preemption_owes_one_notification_per_action() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = open(&dir);
        let action = Action {
            at: 5,
            action: "requeue".into(),
            target: "41".into(),
            user: "alice".into(),
            reason: "gputokens: preempted, balance -5, a6000 contended".into(),
            dry_run: false,
        };
        let n = NewNotice { job_id: Some("41".into()), ..notice("alice", Event::Preempted, -5) };
        l.record_action_noticed(&action, Some(&n)).unwrap();
        l.record_action_noticed(&action, Some(&n)).unwrap();
        l.record_action_noticed(&Action { dry_run: true, ..action }, None).unwrap();
        assert_eq!(l.actions(10).unwrap().len(), 3);
        let owed = l.owed_notifications(10).unwrap();
        assert_eq!(owed.len(), 2, "two actions, two notices");
        assert_eq!(owed[0].job_id.as_deref(), Some("41"));
        assert_eq!(owed[0].event, Event::Preempted);
    }
}
