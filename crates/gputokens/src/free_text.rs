//! Text that people other than root type (reasons, keys, names of things) and admins later read
//! on a terminal: refused where it could pass for something else, escaped where it is shown.
//! A coordinator's `--reason` with a newline, an escape sequence or a bidi override could show
//! admins a line that is not there (a fake command under `journal-check`), rewrite the lines
//! around it, or set their clipboard (OSC 52). What a sender no one has checked yet claims (an
//! agent's node name, a job label from Prometheus) goes into log lines escaped and cut ([`shown`]).

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` may not be shown as it is: C0 and C1 controls, DEL, the line and paragraph
/// separators and the bidirectional overrides and isolates (which reorder what follows them).
pub fn hidden_meaning(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` as it may be printed: every character of [`hidden_meaning`] as Rust writes it escaped
/// (`\n`, `\t`, `\u{1b}`), the rest as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden_meaning) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden_meaning(c) {
            let _ = write!(out, "{}", c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// How much of a name a sender claims (an agent's node, a job label from Prometheus) goes into a log
/// line or message, in characters.
pub const CLAIM_SHOWN: usize = 48;

/// At most [`CLAIM_SHOWN`] characters of a name a sender claims, every one escaped as Rust's
/// `escape_debug` writes it (quotes and backslashes too, unlike [`printable`]), and `…` where it
/// was cut: to name what an unchecked sender claims in a log line without letting it write one.
pub fn shown(claim: &str) -> String {
    let mut out: String = claim.chars().take(CLAIM_SHOWN).flat_map(char::escape_debug).collect();
    if claim.chars().nth(CLAIM_SHOWN).is_some() {
        out.push('…');
    }
    out
}

/// Reasons are at most this long (bytes): a sentence, not a document.
pub const MAX_REASON_BYTES: usize = 1000;
/// Keys are at most this long (bytes).
pub const MAX_KEY_BYTES: usize = 200;

/// Why `reason` cannot be recorded, or None when it can.
pub fn reason_problem(reason: &str) -> Option<String> {
    if reason.trim().is_empty() {
        return Some("--reason must say why".into());
    }
    if reason.len() > MAX_REASON_BYTES {
        return Some(format!("--reason is {} bytes long: {MAX_REASON_BYTES} at most", reason.len()));
    }
    reason.chars().find(|c| hidden_meaning(*c)).map(|c| {
        format!(
            "--reason holds the control character {} (newlines, escape sequences and direction marks are refused: \
             admins read reasons on their terminals)",
            c.escape_unicode()
        )
    })
}

/// Why `key` cannot be an idempotency key, or None when it can: printable characters (spaces too:
/// accountd's own keys for pools, `account lab:…`, are entered again as they were).
pub fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("--key is empty".into());
    }
    if key.len() > MAX_KEY_BYTES {
        return Some(format!("--key is {} bytes long: {MAX_KEY_BYTES} at most", key.len()));
    }
    key.chars()
        .find(|c| hidden_meaning(*c))
        .map(|c| format!("--key holds the control character {}: a key is printable text", c.escape_unicode()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_could_pass_for_other_text_is_escaped_and_refused() {
        let attack = "term grant\n  accountd admin grant carol 100000 --reason restore; curl x | sh";
        assert_eq!(printable(attack), "term grant\\n  accountd admin grant carol 100000 --reason restore; curl x | sh");
        assert_eq!(printable("x\u{1b}[2K\u{1b}[1A\r"), "x\\u{1b}[2K\\u{1b}[1A\\r");
        assert_eq!(printable("\u{1b}]52;c;ZWNobyBoaQ==\u{7}"), "\\u{1b}]52;c;ZWNobyBoaQ==\\u{7}", "OSC 52");
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(printable("Grüße, 東京 ok"), "Grüße, 東京 ok");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
        assert!(reason_problem(attack).unwrap().contains("\\u{a}"), "{:?}", reason_problem(attack));
        assert!(reason_problem("x\u{9b}31m").is_some(), "C1 CSI");
        assert!(reason_problem("  ").is_some());
        assert!(reason_problem(&"x".repeat(MAX_REASON_BYTES + 1)).is_some());
        assert_eq!(reason_problem("term grant for CS101 (Grüße)"), None);
        assert!(key_problem("k\u{1b}").is_some() && key_problem("k\n").is_some() && key_problem("").is_some());
        assert_eq!(key_problem("monthly-bob-2026-12"), None);
        assert_eq!(key_problem("account course:1795774246.1795774246923136139.15735.0"), None, "accountd's own");
    }

    #[test]
    fn what_a_sender_claims_is_shown_escaped_and_cut() {
        assert_eq!(shown("gpu\n01\u{1b}[31m"), "gpu\\n01\\u{1b}[31m");
        assert_eq!(shown("gpu01"), "gpu01");
        let long = "n".repeat(CLAIM_SHOWN + 1);
        assert_eq!(shown(&long), format!("{}…", &long[..CLAIM_SHOWN]));
        assert_eq!(shown(&long[..CLAIM_SHOWN]), &long[..CLAIM_SHOWN], "not cut at exactly the limit");
    }
}
