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

pub struct Reporter {
    client: reqwest::blocking::Client,
    pub url: String,
    signer: Signer,
}

impl Reporter {
    /// Must not be called, nor the reporter dropped, inside an async runtime (reqwest's blocking client
    /// runs one of its own).
    /// An `https://` `report_to` is checked against `ca_file` (the site's CA, `[accountd] ca_file`),
    /// else the public CAs.
    pub fn new(report_to: &str, ca_file: Option<&std::path::Path>, signer: Signer) -> Result<Self, String> {
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(TIMEOUT)
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
        Ok(Reporter { client, url: format!("{}{REPORT_PATH}", report_to.trim_end_matches('/')), signer })
    }

    pub fn post(&self, report: &AgentReport) -> Result<(), String> {
        let body = serde_json::to_vec(report).map_err(|e| format!("cannot encode the report: {e}"))?;
        let authorization = match &self.signer {
            Signer::Munge(socket) => {
                let cred =
                    slurm_ffi::munge::encode(&report_payload(&body), socket.as_deref()).map_err(|e| e.to_string())?;
                format!("MUNGE {cred}")
            }
            Signer::Token(token) => {
                let at = gputokens::time::now();
                gputokens_node_report::auth::signed_authorization(token, &report.node, at, &body)
            }
        };
        let request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::AUTHORIZATION, authorization)
            .body(body);
        // reqwest's message alone leaves out the cause (connection refused, timed out, ...).
        let response = request.send().map_err(|e| format!("{}: {}", self.url, chain(&e.without_url())))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().unwrap_or_default();
        let text: String = text.trim().chars().take(MAX_ERROR_BODY).collect();
        Err(format!("{}: HTTP {status} {text}", self.url).trim_end().to_string())
    }
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
