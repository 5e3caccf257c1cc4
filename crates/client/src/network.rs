//! accountd's HTTP listener from another host: the request as JSON, `POST /v1/request`, with a MUNGE
//! credential made for it. Each URL of `[accountd] urls` in turn, until one answers.

use std::path::Path;
use std::time::{Duration, Instant};

use gputokens::protocol::{request_credential_payload, Request, REQUEST_PATH};
use sha2::{Digest, Sha256};
use ureq::tls::{Certificate, RootCerts, TlsConfig};

use crate::errors::ClientError;
use crate::munge_cli;

/// The largest reply read (a statement of a year of an admin's site is far less).
const MAX_REPLY: u64 = 64 << 20;

/// Sends `request` to the first of `urls` that answers; its reply line (a `Reply`'s JSON). The
/// next URL is tried only when one could not be connected to, never once a request was sent (a
/// change sent twice could be made twice); each gets a share of the time left to connect.
pub(crate) fn exchange(
    urls: &[String],
    ca_file: Option<&Path>,
    request: &Request,
    timeout: Duration,
) -> Result<String, ClientError> {
    let body = serde_json::to_vec(request).map_err(|e| ClientError::Internal(e.to_string()))?;
    let payload = request_credential_payload(&format!("{:x}", Sha256::digest(&body)));
    let started = Instant::now();
    let mut tried = Vec::new();
    for (n, url) in urls.iter().enumerate() {
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        // A fresh credential for each host: each accountd's munged decodes a credential once.
        let credential = munge_cli::encode(&payload, left)
            .map_err(|reason| ClientError::NoCredential { at: url.clone(), reason })?;
        let left = timeout.saturating_sub(started.elapsed());
        let connect = (left / (urls.len() - n) as u32).min(MAX_CONNECT);
        match post(url, ca_file, &body, &credential, left, connect) {
            Ok(reply) => return Ok(reply),
            Err(Failure::NotConnected(reason)) => tried.push(format!("{url} ({reason})")),
            Err(Failure::Sent(e)) => return Err(e),
        }
    }
    let reason = match tried.is_empty() {
        true => format!("no answer within {} ms", timeout.as_millis()),
        false => format!("tried {}", tried.join("; ")),
    };
    Err(ClientError::Unreachable { at: urls.join(", "), reason })
}

/// The longest one URL gets to connect (a host that is down drops packets rather than refusing).
const MAX_CONNECT: Duration = Duration::from_secs(5);

/// How a POST failed: before the request left (another host may be tried), or after.
enum Failure {
    NotConnected(String),
    Sent(ClientError),
}

/// One POST to `url`; the reply line, or what went wrong there.
fn post(
    url: &str,
    ca_file: Option<&Path>,
    body: &[u8],
    credential: &str,
    timeout: Duration,
    connect: Duration,
) -> Result<String, Failure> {
    let failed = |reason: String| Failure::Sent(ClientError::Unreachable { at: url.to_string(), reason });
    let tls = match ca_file {
        Some(path) => {
            let roots = site_ca(path).map_err(Failure::Sent)?;
            TlsConfig::builder().root_certs(RootCerts::new_with_certs(&roots)).build()
        }
        None => TlsConfig::builder().build(),
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(connect))
        .http_status_as_error(false)
        .tls_config(tls)
        .build()
        .into();
    let response = agent
        .post(format!("{url}{REQUEST_PATH}"))
        .header("Authorization", format!("MUNGE {credential}"))
        .header("Content-Type", "application/json")
        .send(body);
    let mut response = response.map_err(|e| match not_connected(&e) {
        true => Failure::NotConnected(e.to_string()),
        false => failed(e.to_string()),
    })?;
    let status = response.status().as_u16();
    let text = response.body_mut().with_config().limit(MAX_REPLY).read_to_string();
    let text = text.map_err(|e| failed(format!("reading the reply: {e}")))?;
    if status == 200 {
        return Ok(text);
    }
    // accountd's refusals are {"error": "..."}; anything else came from something else at that address.
    let said =
        serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["error"].as_str().map(str::to_string));
    Err(Failure::Sent(match (status, said) {
        (401 | 403, Some(message)) => ClientError::Refused(format!("accountd at {url} refused: {message}")),
        (_, Some(message)) => ClientError::Internal(format!("accountd at {url}: {message}")),
        (_, None) => ClientError::Unreachable {
            at: url.to_string(),
            reason: format!("HTTP {status} from something that is not accountd's {REQUEST_PATH}"),
        },
    }))
}

/// Whether `e` happened before any of the request left: no name, no connection.
fn not_connected(e: &ureq::Error) -> bool {
    use std::io::ErrorKind::{AddrNotAvailable, ConnectionRefused, HostUnreachable, NetworkUnreachable};
    match e {
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => true,
        ureq::Error::Timeout(t) => matches!(t, ureq::Timeout::Connect | ureq::Timeout::Resolve),
        ureq::Error::Io(io) => {
            matches!(io.kind(), ConnectionRefused | HostUnreachable | NetworkUnreachable | AddrNotAvailable)
        }
        _ => false,
    }
}

/// The site's CA certificates.
fn site_ca(path: &Path) -> Result<Vec<Certificate<'static>>, ClientError> {
    let fail = |reason: String| ClientError::Internal(format!("[accountd] ca_file {}: {reason}", path.display()));
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => Some(Ok(cert)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("holds no certificate".into()));
    }
    Ok(certs)
}
