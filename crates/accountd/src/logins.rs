//! Login links and browser sessions of the status page. A link is made for whoever asked over
//! accountd's Unix socket (the kernel names them), works once and only within `[web] link_ttl`;
//! opening it starts a session of `session_ttl`, named by a cookie. Both are random 256-bit tokens
//! from the OS, kept in memory only: a restart of accountd logs everybody out.
//!
//! The answering state holds them; the socket issues links (`socket::web_login`) and the status
//! page (`http::web`) redeems them and checks sessions, so they live below both.

use std::collections::HashMap;
use std::time::Duration;

/// Live links and sessions at most: a flood of `sbalance --web` cannot grow accountd without end
/// (the oldest are dropped first).
pub const MAX_LIVE: usize = 10_000;
/// Live links, and sessions, of one visitor at most: one user's flood of `sbalance --web` drops
/// that user's own oldest, never anyone else's.
pub const MAX_PER_VISITOR: usize = 8;

/// Who a link or session belongs to: their uid (admin rights are decided on each request, so a
/// change of `[admins]` applies at once) or, through a trusted proxy, a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visitor {
    pub uid: u32,
    pub name: String,
}

#[derive(Debug)]
struct Grant {
    visitor: Visitor,
    expires: i64,
}

#[derive(Debug, Default)]
pub struct Logins {
    links: HashMap<String, Grant>,
    sessions: HashMap<String, Grant>,
}

/// Why a link or cookie is not accepted (shown to the browser).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Never made here, already used, or made before a restart.
    Unknown,
    Expired,
}

impl Refused {
    pub fn message(self) -> &'static str {
        match self {
            Refused::Unknown => {
                "this login link is not valid: it was used already, mistyped or made before accountd restarted"
            }
            Refused::Expired => "this login link has expired",
        }
    }
}

impl Logins {
    /// A new link token for `visitor`, valid until `now + ttl`.
    pub fn issue_link(&mut self, visitor: Visitor, now: i64, ttl: Duration) -> std::io::Result<(String, i64)> {
        let token = random_token()?;
        let expires = now.saturating_add(ttl.as_secs() as i64);
        insert_capped(&mut self.links, token.clone(), Grant { visitor, expires }, now);
        Ok((token, expires))
    }

    /// Uses up link `token`: a new session for its visitor (token, visitor, expiry).
    pub fn redeem(&mut self, token: &str, now: i64, ttl: Duration) -> Result<(String, Visitor, i64), Refused> {
        let grant = self.links.remove(token).ok_or(Refused::Unknown)?;
        if grant.expires <= now {
            return Err(Refused::Expired);
        }
        let session = random_token().map_err(|_| Refused::Unknown)?;
        let expires = now.saturating_add(ttl.as_secs() as i64);
        let visitor = grant.visitor.clone();
        insert_capped(&mut self.sessions, session.clone(), Grant { visitor: grant.visitor, expires }, now);
        Ok((session, visitor, expires))
    }

    /// The visitor of session `token`, while it lasts.
    pub fn session(&mut self, token: &str, now: i64) -> Result<Visitor, Refused> {
        let grant = self.sessions.get(token).ok_or(Refused::Unknown)?;
        if grant.expires <= now {
            self.sessions.remove(token);
            return Err(Refused::Expired);
        }
        Ok(grant.visitor.clone())
    }

    /// Whose link `token` is, while it is valid; it stays unused.
    pub fn link_of(&self, token: &str, now: i64) -> Result<Visitor, Refused> {
        let grant = self.links.get(token).ok_or(Refused::Unknown)?;
        if grant.expires <= now {
            return Err(Refused::Expired);
        }
        Ok(grant.visitor.clone())
    }

    /// Ends session `token` (logout).
    pub fn end(&mut self, token: &str) {
        self.sessions.remove(token);
    }
}

/// Adds `grant`, first dropping, at the visitor's cap, the visitor's one that expires first; at the
/// total cap the expired ones, then the one that expires first.
fn insert_capped(map: &mut HashMap<String, Grant>, token: String, grant: Grant, now: i64) {
    let theirs = |g: &Grant| g.visitor == grant.visitor;
    if map.values().filter(|g| theirs(g)).count() >= MAX_PER_VISITOR {
        let oldest = map.iter().filter(|(_, g)| theirs(g)).min_by_key(|(_, g)| g.expires).map(|(t, _)| t.clone());
        if let Some(oldest) = oldest {
            map.remove(&oldest);
        }
    }
    if map.len() >= MAX_LIVE {
        map.retain(|_, g| g.expires > now);
    }
    if map.len() >= MAX_LIVE {
        if let Some(oldest) = map.iter().min_by_key(|(_, g)| g.expires).map(|(t, _)| t.clone()) {
            map.remove(&oldest);
        }
    }
    map.insert(token, grant);
}

/// 32 bytes from the OS's random source, as 64 hex digits.
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000;
    const LINK: Duration = Duration::from_secs(300);
    const SESSION: Duration = Duration::from_secs(8 * 3600);

    fn alice() -> Visitor {
        Visitor { uid: 1001, name: "alice".into() }
    }

    #[test]
    fn a_link_works_once_and_starts_a_session_that_ends() {
        let mut logins = Logins::default();
        let (link, expires) = logins.issue_link(alice(), NOW, LINK).unwrap();
        assert_eq!((link.len(), expires), (64, NOW + 300));
        let (session, visitor, until) = logins.redeem(&link, NOW + 10, SESSION).unwrap();
        assert_eq!((visitor, until), (alice(), NOW + 10 + 8 * 3600));
        assert_eq!(logins.redeem(&link, NOW + 11, SESSION).unwrap_err(), Refused::Unknown, "used");
        assert_eq!(logins.session(&session, NOW + 3600).unwrap(), alice());
        assert_eq!(logins.session(&session, NOW + 10 + 8 * 3600).unwrap_err(), Refused::Expired);
        assert_eq!(logins.session(&session, NOW + 10 + 8 * 3600).unwrap_err(), Refused::Unknown, "forgotten");
    }

    #[test]
    fn expired_forged_and_ended_tokens_are_refused() {
        let mut logins = Logins::default();
        let (link, _) = logins.issue_link(alice(), NOW, LINK).unwrap();
        assert_eq!(logins.redeem(&link, NOW + 300, SESSION).unwrap_err(), Refused::Expired);
        assert_eq!(logins.redeem(&"0".repeat(64), NOW, SESSION).unwrap_err(), Refused::Unknown);
        let (link, _) = logins.issue_link(alice(), NOW, LINK).unwrap();
        assert_eq!(logins.session(&link, NOW).unwrap_err(), Refused::Unknown, "a link is not a session");
        let (session, _, _) = logins.redeem(&link, NOW, SESSION).unwrap();
        logins.end(&session);
        assert_eq!(logins.session(&session, NOW).unwrap_err(), Refused::Unknown);
    }

    #[test]
    fn tokens_differ_and_live_ones_are_capped() {
        let mut logins = Logins::default();
        let (a, _) = logins.issue_link(alice(), NOW, LINK).unwrap();
        let (b, _) = logins.issue_link(alice(), NOW, LINK).unwrap();
        assert_ne!(a, b);
        // All live (none expired), of many users: at the cap the one that expires first goes.
        for n in 0..MAX_LIVE as i64 + 5 {
            let visitor = Visitor { uid: 20_000 + n as u32, name: format!("user{n}") };
            logins.issue_link(visitor, NOW + 1 + n / 100, LINK).unwrap();
        }
        assert_eq!(logins.links.len(), MAX_LIVE);
        assert_eq!(logins.redeem(&a, NOW + 1, SESSION).unwrap_err(), Refused::Unknown, "the oldest went first");
    }

    #[test]
    fn one_visitors_flood_drops_only_their_own_oldest() {
        let mut logins = Logins::default();
        let bob = Visitor { uid: 1002, name: "bob".into() };
        let (bobs, _) = logins.issue_link(bob.clone(), NOW, LINK).unwrap();
        let (first, _) = logins.issue_link(alice(), NOW, LINK).unwrap();
        for i in 1..=100 {
            logins.issue_link(alice(), NOW + i, LINK).unwrap();
        }
        assert_eq!(logins.links.values().filter(|g| g.visitor == alice()).count(), MAX_PER_VISITOR);
        assert_eq!(logins.redeem(&first, NOW + 200, SESSION).unwrap_err(), Refused::Unknown, "her oldest went");
        let (_, visitor, _) = logins.redeem(&bobs, NOW + 200, SESSION).unwrap();
        assert_eq!(visitor, bob, "bob's link outlived her flood");
    }
}
