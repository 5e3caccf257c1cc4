//! Warnings about who can reach accountd: the node agents over `[http] listen`, users' browsers over
//! `[web] url`.

use super::values::url_host;
use super::warning::Advice;
use super::Config;

pub(super) fn advice(config: &Config, out: &mut Vec<Advice>) {
    let remote = config
        .agent
        .report_to
        .iter()
        .find_map(|url| url_host(url).filter(|host| !is_loopback(host)).map(|host| (url, host)));
    let (report_to, remote) = match remote {
        Some((url, host)) => (url.as_str(), Some(host)),
        None => ("", None),
    };
    let listen = config.http_listen.filter(|addr| !addr.ip().is_loopback());
    if let (Some(host), None) = (remote, listen) {
        let listening = match config.http_listen {
            Some(addr) => format!("is {addr}: only this host can connect"),
            None => "is off".to_string(),
        };
        out.push(Advice {
            keys: "http.listen, agent.report_to",
            text: format!(
                "[http] listen {listening}, but [agent] report_to is {report_to}: agents on other hosts (report_to \
                 names {host}) cannot reach it, and no GPU's utilization or health is reported. Listen on an address \
                 the nodes reach (listen = \"0.0.0.0:9817\"; /metrics and the API answer only to this host's names \
                 and [http] server_names)"
            ),
        });
    }
    if let Some(url) = config.web.url.as_ref().filter(|u| u.starts_with("http://") && !config.web.allow_http) {
        out.push(Advice {
            keys: "web.url, web.allow_http",
            text: format!(
                "[web] url is {url}: login links are made only to an https:// address unless allow_http = true (then \
                 the session cookie travels in clear), so sbalance --web fails. Give the https:// address of a TLS \
                 proxy in front of accountd"
            ),
        });
    }
}

/// `localhost`, 127.0.0.0/8 or ::1 (as a URL's host writes them).
fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice_of(text: &str) -> Vec<Advice> {
        super::super::warning::found_by(advice, text)
    }

    #[test]
    fn agents_on_other_hosts_need_a_listener_they_reach() {
        let remote = "[agent]\nreport_to = \"http://gpu-head:9817\"\n";
        let found = advice_of(remote);
        assert_eq!(found.len(), 1, "the default listen is 127.0.0.1:9817: {found:?}");
        assert_eq!(found[0].keys, "http.listen, agent.report_to");
        assert!(
            found[0].text.starts_with(
                "[http] listen is 127.0.0.1:9817: only this host can connect, but [agent] report_to is \
                 http://gpu-head:9817: agents on other hosts (report_to names gpu-head) cannot reach it"
            ),
            "{found:?}"
        );
        let off = advice_of(&format!("{remote}[http]\nlisten = \"off\"\n"));
        assert!(off[0].text.starts_with("[http] listen is off, but "), "{off:?}");
        assert!(advice_of(&format!("{remote}[http]\nlisten = \"0.0.0.0:9817\"\n")).is_empty());
        assert!(advice_of(&format!("{remote}[http]\nlisten = \"10.0.0.5:9817\"\n")).is_empty());
        for local in ["http://127.0.0.1:9817", "http://localhost:9817", "http://[::1]:9817", "http://127.0.1.1:9817"] {
            assert!(advice_of(&format!("[agent]\nreport_to = \"{local}\"\n")).is_empty(), "{local}");
        }
    }

    #[test]
    fn a_plain_http_web_url_is_named_unless_allowed() {
        let found = advice_of("[web]\nurl = \"http://gpu-head:9817\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].keys, "web.url, web.allow_http");
        assert!(found[0].text.starts_with("[web] url is http://gpu-head:9817: login links"), "{found:?}");
        assert!(advice_of("[web]\nurl = \"http://gpu-head:9817\"\nallow_http = true\n").is_empty());
        assert!(advice_of("[web]\nurl = \"https://gpu.example.org\"\n").is_empty());
    }
}
