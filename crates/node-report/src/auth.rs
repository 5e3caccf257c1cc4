//! How HTTP callers prove who they are, shared by the agent (which signs) and accountd (which checks):
//! `Authorization: MUNGE <credential>`, `Authorization: GPUTOKENS-HMAC node=N at=T sig=S` or (the
//! JSON API's admin token) `Authorization: Bearer <token>`. An agent's MUNGE credential carries the
//! SHA-256 of the report it comes with, so it cannot be reused for another report. A per-node token
//! is an HMAC of the node's name under the site secret, so one node's token cannot speak for
//! another; it never travels: the agent signs each report with it, with the time, so a report seen
//! on the wire can neither be changed nor sent again.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// What the caller presented in its `Authorization` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented<'a> {
    None,
    Munge(&'a str),
    Bearer(&'a str),
    /// A report signed with its node's token (`[agent] auth = "token"`).
    Signed {
        node: &'a str,
        at: i64,
        sig: &'a str,
    },
    /// Some other scheme, or a header that is not text.
    Unknown,
}

/// The scheme of a report signed with its node's token.
pub const SIGNED_SCHEME: &str = "GPUTOKENS-HMAC";
/// How far a signed report's time may be from accountd's clock, either way (a node's clock under
/// NTP is within a second; a report is sent the moment it is signed).
pub const SIGNED_WINDOW_SECS: i64 = 300;

impl<'a> Presented<'a> {
    pub fn parse(header: Option<&'a [u8]>) -> Presented<'a> {
        let Some(bytes) = header else { return Presented::None };
        let Ok(text) = std::str::from_utf8(bytes) else { return Presented::Unknown };
        let (scheme, value) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
        let value = value.trim();
        match scheme {
            s if s.eq_ignore_ascii_case("munge") && !value.is_empty() => Presented::Munge(value),
            s if s.eq_ignore_ascii_case("bearer") && !value.is_empty() => Presented::Bearer(value),
            s if s.eq_ignore_ascii_case(SIGNED_SCHEME) => Presented::signed(value).unwrap_or(Presented::Unknown),
            _ => Presented::Unknown,
        }
    }

    /// `node=N at=T sig=S`, each once.
    fn signed(value: &'a str) -> Option<Presented<'a>> {
        let (mut node, mut at, mut sig) = (None, None, None);
        for field in value.split_whitespace() {
            let (key, v) = field.split_once('=')?;
            let slot = match key {
                "node" => &mut node,
                "at" => &mut at,
                "sig" => &mut sig,
                _ => return None,
            };
            if slot.replace(v).is_some() || v.is_empty() {
                return None;
            }
        }
        // One spelling of each signature (the replay check compares them): 64 lower-case hex digits.
        let sig = sig.filter(|s| s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))?;
        Some(Presented::Signed { node: node?, at: at?.parse().ok()?, sig })
    }
}

/// The `Authorization` value of `body`, a report of `node` signed at `at` with the node's `token`.
pub fn signed_authorization(token: &str, node: &str, at: i64, body: &[u8]) -> String {
    let sig = hex(&signature_mac(token, node, at, body).finalize().into_bytes());
    format!("{SIGNED_SCHEME} node={node} at={at} sig={sig}")
}

/// Whether `sig` signs `body` as a report of `node` at `at` with the node's `token`, compared in
/// constant time.
pub fn signature_matches(token: &str, node: &str, at: i64, body: &[u8], sig: &str) -> bool {
    let Some(bytes) = unhex(sig) else { return false };
    signature_mac(token, node, at, body).verify_slice(&bytes).is_ok()
}

fn signature_mac(token: &str, node: &str, at: i64, body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(token.as_bytes()).expect("HMAC accepts any key length");
    mac.update(format!("gputokens agent report v2\n{node}\n{at}\n{}", hex(&Sha256::digest(body))).as_bytes());
    mac
}

/// The payload of a MUNGE credential made for the JSON API (`munge -s "gputokens api v1"`): a
/// credential made for anything else (a job step's) is not taken there.
pub const API_PAYLOAD: &[u8] = b"gputokens api v1";

/// The MUNGE payload an agent signs for a report body.
pub fn report_payload(body: &[u8]) -> Vec<u8> {
    format!("gputokens agent report v1 sha256={}", hex(&Sha256::digest(body))).into_bytes()
}

type HmacSha256 = Hmac<Sha256>;

fn node_mac(secret: &str, node: &str) -> HmacSha256 {
    // HMAC takes a key of any length.
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key length");
    mac.update(b"gputokens node token v1\n");
    mac.update(node.as_bytes());
    mac
}

/// The token of `node` under the site secret (what `accountd admin node-token NODE` prints).
pub fn node_token(secret: &str, node: &str) -> String {
    hex(&node_mac(secret, node).finalize().into_bytes())
}

/// Whether `presented` is `node`'s token, compared in constant time.
pub fn node_token_matches(secret: &str, node: &str, presented: &str) -> bool {
    let Some(bytes) = unhex(presented.trim()) else { return false };
    node_mac(secret, node).verify_slice(&bytes).is_ok()
}

/// Whether `presented` equals `expected`, in time that does not depend on where they differ.
pub fn same_secret(presented: &str, expected: &str) -> bool {
    let (a, b) = (Sha256::digest(presented.as_bytes()), Sha256::digest(expected.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads a secret file no one but its owner may read or change (mode 0600 or less), owned by this
/// process's user, root, or `also` (root's `accountd admin node-token` reads the one accountd's
/// user owns): a secret others can read is no longer a secret (the old audit's L4). `key` names
/// its setting.
pub fn read_private_secret(path: &std::path::Path, key: &str, also: Option<u32>) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{key} {}: {e}", path.display()))?;
    let owners = [nix::unistd::geteuid().as_raw(), 0];
    if meta.mode() & 0o077 != 0 || !(owners.contains(&meta.uid()) || also == Some(meta.uid())) {
        return Err(format!(
            "{key} {} must be owned by this program's user and readable by it alone (mode 0600; it is {:o}, uid {})",
            path.display(),
            meta.mode() & 0o777,
            meta.uid()
        ));
    }
    read_secret(path).map_err(|e| format!("{key}: {e}"))
}

/// Reads a secret file: surrounding whitespace is not part of the secret, and an empty one is refused.
pub fn read_secret(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let secret = text.trim().to_string();
    if secret.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(secret)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_schemes() {
        assert_eq!(Presented::parse(None), Presented::None);
        assert_eq!(Presented::parse(Some(b"MUNGE MUNGE:abc:")), Presented::Munge("MUNGE:abc:"));
        assert_eq!(Presented::parse(Some(b"munge  x ")), Presented::Munge("x"));
        assert_eq!(Presented::parse(Some(b"Bearer s3cret")), Presented::Bearer("s3cret"));
        assert_eq!(Presented::parse(Some(b"Bearer")), Presented::Unknown);
        assert_eq!(Presented::parse(Some(b"Basic YWxpY2U6eA==")), Presented::Unknown);
        assert_eq!(Presented::parse(Some(b"MUNGE \xff")), Presented::Unknown);
    }

    #[test]
    fn a_report_payload_names_its_body() {
        let a = report_payload(br#"{"node":"vm"}"#);
        assert!(String::from_utf8(a.clone()).unwrap().starts_with("gputokens agent report v1 sha256="));
        assert_ne!(a, report_payload(br#"{"node":"gpu02"}"#));
        assert_eq!(a, report_payload(br#"{"node":"vm"}"#));
    }

    #[test]
    fn a_node_token_speaks_for_its_node_only() {
        let token = node_token("site secret", "gpu01");
        assert_eq!(token.len(), 64);
        assert!(node_token_matches("site secret", "gpu01", &token));
        assert!(node_token_matches("site secret", "gpu01", &format!(" {token}\n")));
        assert!(!node_token_matches("site secret", "gpu02", &token), "another node");
        assert!(!node_token_matches("other secret", "gpu01", &token), "another site");
        assert!(!node_token_matches("site secret", "gpu01", "site secret"), "the secret itself");
        assert!(!node_token_matches("site secret", "gpu01", &token[..62]));
        assert!(!node_token_matches("site secret", "gpu01", "zz"));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd") && !same_secret("ab", "abc") && !same_secret("", "abc"));
    }
}
