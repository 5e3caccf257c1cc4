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
    // The one that answers first goes first: a host that is down costs a user a moment, not a
    // connect timeout, on every command.
    let mut urls = urls.to_vec();
    if let Some(first) = first_to_connect(&urls, timeout.min(MAX_CONNECT)) {
        urls[..=first].rotate_right(1);
    }
    let urls = &urls;
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

/// How long a URL is given to connect before the next is tried beside it.
const STAGGER: Duration = Duration::from_millis(250);

/// Of several `urls`, the index of the first whose host accepted a TCP connection within `within`:
/// each tried in its turn, the next started [`STAGGER`] after the one before, without waiting for
/// it to fail. Only the connection is raced; the request goes to one host, once.
fn first_to_connect(urls: &[String], within: Duration) -> Option<usize> {
    if urls.len() < 2 {
        return None;
    }
    let (answered, first) = std::sync::mpsc::channel();
    let won = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for (n, url) in urls.iter().enumerate() {
        let Some(address) = host_and_port(url) else { continue };
        let (answered, won) = (answered.clone(), won.clone());
        std::thread::spawn(move || {
            let wait = STAGGER * n as u32;
            std::thread::sleep(wait.min(within));
            if won.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let left = within.saturating_sub(wait);
            let connected = std::net::ToSocketAddrs::to_socket_addrs(&address)
                .ok()
                .and_then(|mut addrs| addrs.next())
                .is_some_and(|addr| !left.is_zero() && std::net::TcpStream::connect_timeout(&addr, left).is_ok());
            if connected && !won.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let _ = answered.send(n);
            }
        });
    }
    drop(answered);
    first.recv_timeout(within).ok()
}

/// `host:port` of an http(s) URL (the scheme's port where it names none).
fn host_and_port(url: &str) -> Option<String> {
    let (default_port, rest) = match url.split_once("://")? {
        ("http", rest) => (80, rest),
        ("https", rest) => (443, rest),
        _ => return None,
    };
    let authority = rest.split(['/', '?']).next()?;
    let has_port = match authority.rsplit_once(':') {
        Some((_, port)) => !port.contains(']') && port.parse::<u16>().is_ok(),
        None => false,
    };
    Some(if has_port { authority.to_string() } else { format!("{authority}:{default_port}") })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_host_and_port() {
        assert_eq!(host_and_port("http://10.78.0.2:9817").as_deref(), Some("10.78.0.2:9817"));
        assert_eq!(host_and_port("https://accountd.example.org/").as_deref(), Some("accountd.example.org:443"));
        assert_eq!(host_and_port("http://[::1]:9817/x").as_deref(), Some("[::1]:9817"));
        assert_eq!(host_and_port("http://[::1]").as_deref(), Some("[::1]:80"));
        assert_eq!(host_and_port("ftp://x"), None);
    }

    #[test]
    fn the_url_that_connects_goes_first() {
        // A listener that accepts, and an address nothing listens on (refused at once).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up = format!("http://{}", listener.local_addr().unwrap());
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let down = format!("http://{closed}");
        let urls = [down.clone(), up.clone()];
        assert_eq!(first_to_connect(&urls, Duration::from_secs(2)), Some(1));
        assert_eq!(first_to_connect(&[up.clone(), down], Duration::from_secs(2)), Some(0));
        assert_eq!(first_to_connect(&[up], Duration::from_secs(2)), None, "one URL: nothing to race");
    }
}
