//! accountd's HTTP listener from another host: the request as JSON, `POST /v1/request`, with a MUNGE
//! credential made for it. A request that changes balances goes to each URL of `[accountd] urls` in
//! turn, until one takes it; one that only reads is asked of the next URL too when the one before
//! is slow, the first answer taken (a host lost mid-request costs a user a moment).

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
    if request.only_reads() && urls.len() > 1 {
        let ca_file = ca_file.map(Path::to_path_buf);
        let ask = move |url: &str, left: Duration| {
            let credential = munge_cli::encode(&payload, left)
                .map_err(|reason| ClientError::NoCredential { at: url.to_string(), reason })?;
            let left = timeout_left(left, Instant::now());
            post(url, ca_file.as_deref(), &body, &credential, left, left.min(MAX_CONNECT))
                .map_err(|f| f.into_error(url))
        };
        return first_answer(urls, timeout, ask);
    }
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

/// How long a URL is given to connect, or to answer a request that only reads, before the next is
/// tried beside it.
const STAGGER: Duration = Duration::from_millis(250);

/// What is left of `within` once `since` passed (never below zero).
fn timeout_left(within: Duration, since: Instant) -> Duration {
    within.saturating_sub(since.elapsed())
}

/// The first answer of `urls` to a request that only reads, each asked with `ask(url, time_left)`:
/// the next URL is asked [`STAGGER`] after the one before, or as soon as it failed, without waiting
/// for it to end. An answer is a reply or accountd's refusal; a host that cannot be reached, or
/// stops answering, is passed over. Those still asking when one answered are left to end on their
/// own (their time is bounded by `timeout`).
fn first_answer<F>(urls: &[String], timeout: Duration, ask: F) -> Result<String, ClientError>
where
    F: Fn(&str, Duration) -> Result<String, ClientError> + Send + Sync + 'static,
{
    let started = Instant::now();
    let ask = std::sync::Arc::new(ask);
    let (answered, answers) = std::sync::mpsc::channel();
    let mut asked = 0;
    let mut failed: Vec<ClientError> = Vec::new();
    let ask_next = |asked: &mut usize| {
        let (url, ask, answered) = (urls[*asked].clone(), ask.clone(), answered.clone());
        let left = timeout_left(timeout, started);
        std::thread::spawn(move || {
            let _ = answered.send(ask(&url, left));
        });
        *asked += 1;
    };
    ask_next(&mut asked);
    loop {
        let left = timeout_left(timeout, started);
        if left.is_zero() {
            break;
        }
        let wait = if asked < urls.len() { STAGGER.min(left) } else { left };
        match answers.recv_timeout(wait) {
            Ok(Ok(reply)) => return Ok(reply),
            Ok(Err(e @ (ClientError::Refused(_) | ClientError::Internal(_)))) => return Err(e),
            Ok(Err(e)) => {
                failed.push(e);
                if asked < urls.len() {
                    ask_next(&mut asked);
                } else if failed.len() == asked {
                    break;
                }
            }
            Err(_) if asked < urls.len() => ask_next(&mut asked),
            Err(_) => {}
        }
    }
    // Where every host failed alike (none reachable), say so once for all of them.
    match failed.iter().position(|e| !matches!(e, ClientError::Unreachable { .. })) {
        Some(n) => Err(failed.swap_remove(n)),
        None => {
            let reason = match failed.is_empty() {
                true => format!("no answer within {} ms", timeout.as_millis()),
                false => {
                    let tried = failed.iter().map(|e| match e {
                        ClientError::Unreachable { at, reason } => format!("{at} ({reason})"),
                        other => other.to_string(),
                    });
                    format!("tried {}", tried.collect::<Vec<_>>().join("; "))
                }
            };
            Err(ClientError::Unreachable { at: urls.join(", "), reason })
        }
    }
}

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

impl Failure {
    fn into_error(self, url: &str) -> ClientError {
        match self {
            Failure::NotConnected(reason) => ClientError::Unreachable { at: url.to_string(), reason },
            Failure::Sent(e) => e,
        }
    }
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

    /// Two hosts, `a` and `b`, as `first_answer` asks them: what each does, and who was asked.
    fn two_hosts(
        a: impl Fn() -> Result<String, ClientError> + Send + Sync + 'static,
        b: impl Fn() -> Result<String, ClientError> + Send + Sync + 'static,
    ) -> (Result<String, ClientError>, Vec<String>) {
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let ask = move |url: &str, _left: Duration| {
            log.lock().unwrap().push(url.to_string());
            match url {
                "http://a" => a(),
                _ => b(),
            }
        };
        let answer = first_answer(&["http://a".into(), "http://b".into()], Duration::from_secs(20), ask);
        let asked = asked.lock().unwrap().clone();
        (answer, asked)
    }

    fn unreachable(at: &str) -> ClientError {
        ClientError::Unreachable { at: at.into(), reason: "connection refused".into() }
    }

    #[test]
    fn a_read_is_answered_by_the_next_host_while_the_first_is_silent() {
        // a took the request and went silent (its host lost): it answers only when the test is over.
        let (release, silent) = std::sync::mpsc::channel::<()>();
        let silent = std::sync::Mutex::new(silent);
        let a = move || {
            let _ = silent.lock().unwrap().recv_timeout(Duration::from_secs(30));
            Ok("a".to_string())
        };
        let (answer, asked) = two_hosts(a, || Ok("b".into()));
        assert_eq!(answer.unwrap(), "b");
        assert_eq!(asked, ["http://a", "http://b"]);
        drop(release);
    }

    #[test]
    fn a_quick_answer_asks_no_other_host() {
        let (answer, asked) = two_hosts(|| Ok("a".into()), || Ok("b".into()));
        assert_eq!(answer.unwrap(), "a");
        assert_eq!(asked, ["http://a"]);
    }

    #[test]
    fn a_refusal_is_an_answer_and_a_host_that_cannot_be_reached_is_not() {
        let refused = || Err(ClientError::Refused("only admins may see other users".into()));
        let (answer, asked) = two_hosts(refused, || Ok("b".into()));
        assert_eq!(answer.unwrap_err().to_string(), "only admins may see other users");
        assert_eq!(asked, ["http://a"]);

        let (answer, asked) = two_hosts(|| Err(unreachable("http://a")), || Ok("b".into()));
        assert_eq!(answer.unwrap(), "b");
        assert_eq!(asked, ["http://a", "http://b"]);

        let (answer, _) = two_hosts(|| Err(unreachable("http://a")), || Err(unreachable("http://b")));
        let said = answer.unwrap_err().to_string();
        assert_eq!(
            said,
            "cannot reach accountd at http://a, http://b: tried http://a (connection refused); http://b (connection refused)"
        );
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
