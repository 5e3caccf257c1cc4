//! The names accountd's HTTP listener answers to. A web page elsewhere that rebinds its own name to
//! accountd's address (DNS rebinding) makes a browser on the site's network send requests with that
//! name in Host, and read the answers as its own: /metrics and the status page are refused to any
//! name but an address, localhost, this host's name, `[web] url`'s host and `[http] server_names`.
//! Agents' reports are not checked: they carry a MUNGE credential, which no page can.

use std::collections::HashSet;
use std::sync::Mutex;

/// Refused names logged, at most: a scanner cannot fill the log.
const LOGGED_NAMES: usize = 64;

pub struct HostNames {
    this_host: String,
    /// Lower-case names: `[web] url`'s host and `[http] server_names`.
    configured: Vec<String>,
    logged: Mutex<HashSet<String>>,
}

impl HostNames {
    pub fn new(web_url: Option<&str>, server_names: &[String]) -> HostNames {
        let this_host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
        let url_host = web_url
            .and_then(|u| u.split_once("://"))
            .map(|(_, rest)| rest.split(['/', ':']).next().unwrap_or("").to_string());
        let configured =
            url_host.into_iter().chain(server_names.iter().cloned()).map(|n| n.to_ascii_lowercase()).collect();
        HostNames { this_host, configured, logged: Mutex::new(HashSet::new()) }
    }

    /// Whether `host` (a Host header: name or address, maybe a port) names accountd.
    pub fn answers_to(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            Some(v6) => return v6.split(']').next().is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
            None => host.rsplit_once(':').map_or(host, |(name, _)| name),
        };
        // `name.` is the same name, fully qualified.
        let name = name.strip_suffix('.').unwrap_or(name);
        if name.parse::<std::net::Ipv4Addr>().is_ok() || name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let short = |n: &str| n.split('.').next().unwrap_or(n).to_ascii_lowercase();
        let name_lower = name.to_ascii_lowercase();
        name.eq_ignore_ascii_case(&self.this_host)
            || (!self.this_host.is_empty() && short(name) == short(&self.this_host) && !name.contains('.'))
            || self.configured.contains(&name_lower)
    }

    /// Logs a refused name the first time it is seen (of the first few).
    pub fn refused(&self, host: &str, path: &str) {
        let mut logged = self.logged.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if logged.len() < LOGGED_NAMES && logged.insert(host.to_ascii_lowercase()) {
            tracing::warn!(
                "HTTP request for {} sent to the name {:?} refused (421): if that is a name of this host (a DNS \
                 alias Prometheus or the page is reached by), add it to [http] server_names",
                gputokens::free_text::printable(path),
                gputokens::free_text::printable(host)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_this_host_and_configured_names_only() {
        let names = HostNames::new(Some("https://Tokens.Example.org/web/"), &["metrics-alias.cluster".into()]);
        for ok in ["127.0.0.1:9110", "[::1]:9110", "localhost:9817", "TOKENS.example.org", "METRICS-ALIAS.cluster.:80"]
        {
            assert!(names.answers_to(ok), "{ok}");
        }
        let this = nix::unistd::gethostname().unwrap().into_string().unwrap();
        assert!(names.answers_to(&format!("{this}:9110")), "this host's own name");
        assert!(HostNames::new(None, &[]).answers_to(&this));
        for refused in
            ["evil.example.com:9817", "tokens.example.org.evil.com", "[evil]", "example.org", "metrics-alias"]
        {
            assert!(!names.answers_to(refused), "{refused}");
        }
    }
}
