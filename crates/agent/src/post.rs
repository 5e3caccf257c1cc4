//! Posting a report to accountd (blocking: the sampling loop runs on a thread of its own).

use std::time::Duration;

use gputokens_node_report::auth::report_payload;
use gputokens_node_report::{AgentReport, REPORT_PATH};

/// How a report proves where it comes from (`[agent] auth`).
pub enum Signer {
    /// A MUNGE credential from the node's munged (or the one at this socket) naming the report.
    Munge(Option<std::path::PathBuf>),
    /// The node's token: each report is signed with it, and the time.
    Token(String),
}

/// Longer than accountd takes to file a report, short enough that a hung accountd costs one interval.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Enough of an error reply to say why (accountd answers with a short JSON error).
const MAX_ERROR_BODY: usize = 300;

/// How long a host is given to take the connection before the next `report_to` is tried (a lost
/// host drops packets rather than refusing).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

pub struct Reporter {
    client: reqwest::blocking::Client,
    /// Each `report_to`'s report URL, in the configured order.
    urls: Vec<String>,
    /// The one that took the last report: tried first next time.
    current: std::sync::atomic::AtomicUsize,
    signer: Signer,
}

impl Reporter {
    /// Must not be called, nor the reporter dropped, inside an async runtime (reqwest's blocking client
    /// runs one of its own).
    /// An `https://` `report_to` is checked against `ca_file` (the site's CA, `[accountd] ca_file`),
    /// else the public CAs.
    pub fn new(report_to: &[String], ca_file: Option<&std::path::Path>, signer: Signer) -> Result<Self, String> {
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(format!("gputokens-agent/{}", env!("CARGO_PKG_VERSION")));
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).map_err(|e| format!("[accountd] ca_file {}: {e}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("[accountd] ca_file {}: {e}", path.display()))?;
            builder = builder.tls_built_in_root_certs(false);
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build().map_err(|e| format!("cannot create the HTTP client: {e}"))?;
        let urls = report_to.iter().map(|url| format!("{}{REPORT_PATH}", url.trim_end_matches('/'))).collect();
        Ok(Reporter { client, urls, current: Default::default(), signer })
    }

    /// Where reports go, for the log.
    pub fn destinations(&self) -> String {
        self.urls.join(" or ")
    }

    /// Posts `report` to the `report_to` that took the last one, else to the next that can be
    /// connected to (a pair's other accountd); the URL that took it. A report is sent on only when
    /// a host could not be connected to, never once it may have arrived: a report filed twice would
    /// count its energy twice. A host that took it and failed (an error, no answer in time) is
    /// tried after the others with the next report.
    pub fn post(&self, report: &AgentReport) -> Result<&str, String> {
        use std::sync::atomic::Ordering;
        let first = self.current.load(Ordering::Relaxed);
        let mut unreachable = Vec::new();
        for n in 0..self.urls.len() {
            let at = (first + n) % self.urls.len();
            match self.post_to(&self.urls[at], report) {
                Ok(()) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(&self.urls[at]);
                }
                Err(Failure::NotConnected(why)) => unreachable.push(why),
                Err(Failure::Sent(why)) => {
                    self.current.store((at + 1) % self.urls.len(), Ordering::Relaxed);
                    return Err(why);
                }
            }
        }
        Err(unreachable.join("; "))
    }

    fn post_to(&self, url: &str, report: &AgentReport) -> Result<(), Failure> {
        let sent = |why: String| Failure::Sent(why);
        let body = serde_json::to_vec(report).map_err(|e| sent(format!("cannot encode the report: {e}")))?;
        // A credential for each host: each accountd's munged decodes a credential once.
        let authorization = match &self.signer {
            Signer::Munge(socket) => {
                let cred = slurm_ffi::munge::encode(&report_payload(&body), socket.as_deref())
                    .map_err(|e| sent(e.to_string()))?;
                format!("MUNGE {cred}")
            }
            Signer::Token(token) => {
                let at = gputokens::time::now();
                gputokens_node_report::auth::signed_authorization(token, &report.node, at, &body)
            }
        };
        let request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::AUTHORIZATION, authorization)
            .body(body);
        // reqwest's message alone leaves out the cause (connection refused, timed out, ...).
        let response = request.send().map_err(|e| {
            let connect = e.is_connect();
            let why = format!("{url}: {}", chain(&e.without_url()));
            if connect {
                Failure::NotConnected(why)
            } else {
                Failure::Sent(why)
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().unwrap_or_default();
        let text: String = text.trim().chars().take(MAX_ERROR_BODY).collect();
        Err(sent(format!("{url}: HTTP {status} {text}").trim_end().to_string()))
    }
}

/// How a post failed: before the report left (the next host may be tried), or after.
enum Failure {
    NotConnected(String),
    Sent(String),
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}
