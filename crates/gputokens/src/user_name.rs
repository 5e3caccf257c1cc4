//! What a user name may be. Names are data: any name Slurm and the system accept (`ann@example.org`
//! from SSSD, `j.doe`, long or non-ASCII names) is a user. Only what no format of ours can carry is
//! refused: the snapshot's `user NAME BALANCE` lines and sbalance's tables are split at whitespace,
//! `sacct -P` and `sbalance -P` at `|`, and a control character would forge lines in logs. Ledger
//! keys end in fixed-width fields (`daily:USER:2026-12-01`), so `:` and `/` stay unambiguous.

/// Longest name taken, in bytes: Linux's LOGIN_NAME_MAX less its NUL.
pub const MAX_BYTES: usize = 255;

/// Why `name` cannot be a user name, or None when it can.
pub fn problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_BYTES {
        Some("it is longer than 255 bytes")
    } else if name.chars().any(char::is_whitespace) {
        Some("it contains whitespace")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if name.contains('|') {
        Some("it contains '|'")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_system_gives_are_users() {
        for name in ["alice", "ann@example.org", "j.doe", "o'brien", "DOMAIN\\kim", "zoë", "李雷", "x:y", "-x"] {
            assert_eq!(problem(name), None, "{name:?}");
        }
        assert_eq!(problem(&"a".repeat(MAX_BYTES)), None);
    }

    #[test]
    fn what_no_format_can_carry_is_refused() {
        assert_eq!(problem(""), Some("it is empty"));
        assert_eq!(problem(&"a".repeat(MAX_BYTES + 1)), Some("it is longer than 255 bytes"));
        for name in ["a b", "a\tb", "a\nuser mallory 99", "a\u{a0}b"] {
            assert_eq!(problem(name), Some("it contains whitespace"), "{name:?}");
        }
        assert_eq!(problem("a\u{7}b"), Some("it contains a control character"));
        assert_eq!(problem("a|b"), Some("it contains '|'"));
    }

    const NAMES: [&str; 5] = ["ann@example.org", "j.doe", "zoë", "李雷", "x:2026-11-22"];

    /// The job_submit plugin finds each of them in the snapshot under their whole name.
    #[test]
    fn the_snapshot_carries_every_name() {
        let mut snap = crate::snapshot::Snapshot::new(1, crate::policy::BucketRules::default());
        for (i, name) in NAMES.iter().enumerate() {
            snap.balances.insert(name.to_string(), crate::Tokens::whole(i as i64 + 1));
        }
        let back = crate::snapshot::parse(&crate::snapshot::render(&snap)).unwrap();
        assert_eq!(back.balances, snap.balances);
    }
}
