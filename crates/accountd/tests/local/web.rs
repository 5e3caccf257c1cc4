//! The status page and its JSON API over HTTP, without a browser: who a proxy may say a user is,
//! what login links need, which names accountd answers to, and where a login link logs in.

use crate::common::Site;
use crate::status_page::{base_of, get_with, login_link, proxy_settings, web_site, PROXY_SECRET};

/// A site whose proxy at 127.0.0.2 proves itself with PROXY_SECRET.
fn proxied_site() -> (Site, tempfile::NamedTempFile) {
    let (lines, secret) = proxy_settings();
    (web_site(&lines), secret)
}

#[test]
fn a_user_header_counts_only_from_the_trusted_proxy_with_its_secret() {
    let (site, _secret) = proxied_site();
    let url = format!("{}/web/api/me", site.http_url());
    let proxy = |user: &str| [("X-Remote-User", user.to_string()), ("X-Gputokens-Proxy-Secret", PROXY_SECRET.into())];
    let get = get_with;
    let (status, body) = get("127.0.0.1", &url, &proxy("alice"));
    assert_eq!(status, 401, "not a trusted proxy, secret or not: {body}");
    // A local user on the proxy's host (its address) who knows the header but not the secret.
    let (status, body) = get("127.0.0.2", &url, &[("X-Remote-User", "root".into())]);
    assert_eq!(status, 401, "no secret: {body}");
    let (status, body) =
        get("127.0.0.2", &url, &[("X-Remote-User", "root".into()), ("X-Gputokens-Proxy-Secret", "guess".into())]);
    assert_eq!(status, 401, "a wrong secret: {body}");
    // Two user headers (a proxy that appends its own to the client's): refused, not the first taken.
    let mut twice = proxy("alice").to_vec();
    twice.push(("X-Remote-User", "root".into()));
    let (status, body) = get("127.0.0.2", &url, &twice);
    assert_eq!(status, 400, "{body}");
    let (status, body) = get("127.0.0.2", &url, &proxy("alice"));
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((view["user"].as_str(), view["balance"].as_str()), (Some("alice"), Some("36")));
    assert_eq!(view["explanation"], "GPU jobs run normally.", "the status in gputokens' words: {body}");
    let (status, body) = get("127.0.0.2", &format!("{url}?user=bob"), &proxy("alice"));
    assert_eq!(status, 403, "{body}");
    let (status, body) = get("127.0.0.2", &url, &proxy("nobody-here"));
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"unknown user 'nobody-here': not in the ledger and not a user of this system\""), "{body}");
    let (status, _) = get("127.0.0.2", &format!("{}/web/api/admin", site.http_url()), &proxy("alice"));
    assert_eq!(status, 403);
    let (status, _) = get("127.0.0.2", &format!("{}/web/api/admin", site.http_url()), &proxy("root"));
    assert_eq!(status, 200);
    // The page itself says what it may load: nothing but its own script and style.
    let response = reqwest::blocking::get(format!("{}/web/", site.http_url())).unwrap();
    let policy = response.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(policy.contains("script-src 'self'") && policy.contains("default-src 'none'"), "{policy}");
}

/// Without an https address the page makes no login link (its cookie would travel in clear, and a
/// user's server on another port of the host would receive it); with one, the session cookie is a
/// `__Host-` cookie, Secure, for the whole host.
#[test]
fn login_links_need_https_unless_the_site_allows_http() {
    let site = Site::start("", "[admission]\ncontact = \"hpc-help@example.org\"\n");
    // A user cannot mend the site's config: she is told it is not set up, and whom to ask.
    let out = site.sbalance(Some("alice"), &["--web"]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stderr
            .contains("the status page is not set up for browsers on this site yet; ask hpc-help@example.org about it"),
        "{}",
        out.stderr
    );
    // An admin is told what to set.
    let out = site.sbalance(None, &["--web"]);
    assert!(out.stderr.contains("the status page has no https address"), "{}", out.stderr);
    let plain = Site::start("", "[web]\nurl = \"http://gpu.example.org:9817\"\n");
    let out = plain.sbalance(None, &["--web"]);
    assert!(out.stderr.contains("(it is http://gpu.example.org:9817)"), "{}", out.stderr);

    let site = Site::start("", "[web]\nurl = \"https://gpu.example.org\"\n");
    let out = site.sbalance(Some("alice"), &["--web"]).ok().stdout;
    let link = out.split_whitespace().find(|w| w.starts_with("https://gpu.example.org/web/login?token=")).expect(&out);
    // As the TLS proxy would pass it on to the listener.
    let local = link.replace("https://gpu.example.org", &site.http_url());
    let client = reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let token = local.split("token=").nth(1).unwrap().to_string();
    // The login page's button, as the browser sends it through the proxy.
    let response = client
        .post(format!("{}/web/login", site.http_url()))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("token", token.as_str())])
        .send()
        .unwrap();
    let cookie = response.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("__Host-gputokens_session="), "{cookie}");
    assert!(cookie.contains("; Path=/;") && cookie.contains("Secure") && cookie.contains("HttpOnly"), "{cookie}");
}

/// A page elsewhere that rebinds its own name to accountd's address gets nothing: the status page,
/// /metrics and the API answer only to accountd's own names (`[http] server_names` adds aliases);
/// an agent's report, which carries a credential no page has, is not asked its name.
#[test]
fn the_status_page_metrics_and_api_answer_only_to_accountds_names() {
    let site = Site::start(
        "",
        "[web]\nallow_http = true\nurl = \"https://gpu.example.org\"\n[http]\nlisten = \"127.0.0.1:0\"\n\
         server_names = [\"Metrics.Cluster.example\"]\n",
    );
    let host = site.http_url().trim_start_matches("http://").to_string();
    let request = |method: &str, path: &str, name: &str| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&host).unwrap();
        write!(stream, "{method} {path} HTTP/1.1\r\nHost: {name}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let rebound = request("GET", "/web/api/me", "evil.example.org:9817");
    assert!(rebound.starts_with("HTTP/1.1 421"), "{rebound}");
    assert!(rebound.contains("does not answer to &#39;evil.example.org:9817&#39;"), "{rebound}");
    for ours in [host.as_str(), "gpu.example.org", "localhost"] {
        let answer = request("GET", "/web/api/me", ours);
        assert!(answer.starts_with("HTTP/1.1 401"), "{ours}: not logged in, but answered: {answer}");
    }
    for path in ["/metrics", "/v1/health", "/v1/balances", "/v1/balances/alice"] {
        let rebound = request("GET", path, "evil.example.org");
        assert!(rebound.starts_with("HTTP/1.1 421"), "{path}: {rebound}");
        assert!(
            rebound.contains("accountd does not answer to 'evil.example.org': add the name to [http] server_names"),
            "{path}: {rebound}"
        );
        assert!(!rebound.contains("gputokens_"), "{path}: {rebound}");
    }
    for ours in [host.as_str(), "metrics.cluster.example:9110", "METRICS.CLUSTER.EXAMPLE", "gpu.example.org"] {
        let answer = request("GET", "/metrics", ours);
        assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("gputokens_"), "{ours}: {answer}");
    }
    // The report is judged by its credential (none here), whatever name it was sent to.
    let report = request("POST", "/v1/agent/report", "evil.example.org");
    assert!(!report.starts_with("HTTP/1.1 421"), "{report}");
    assert!(report.starts_with("HTTP/1.1 401") || report.starts_with("HTTP/1.1 403"), "{report}");
    assert!(site.log().contains("sent to the name \"evil.example.org\" refused (421)"), "{}", site.log());
}

/// The old audit's L2 (login CSRF): opening a login link logs no one in, only the button of its own
/// page does. Another site that makes a visitor open mallory's link, or posts it for them, cannot
/// log them into mallory's session; the link stays usable for its owner.
#[test]
fn a_login_link_logs_in_only_from_its_own_page() {
    let site = Site::start("", "[web]\nallow_http = true\n");
    let link = login_link(&site, Some("alice"));
    let token = link.split("token=").nth(1).unwrap().to_string();
    let client = reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = client.get(&link).send().unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.headers().get("set-cookie").is_none(), "opening the link sets no cookie");
    assert!(page.text().unwrap().contains("as <b id=\"login-name\">alice</b>?"));
    let post = |headers: &[(&str, &str)]| {
        let mut request = client.post(format!("{}/web/login", base_of(&link))).form(&[("token", token.as_str())]);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().unwrap()
    };
    let cross_site: [&[(&str, &str)]; 3] =
        [&[("Origin", "http://evil.example.org")], &[("Sec-Fetch-Site", "cross-site"), ("Origin", "null")], &[]];
    for headers in cross_site {
        let refused = post(headers);
        assert_eq!(refused.status().as_u16(), 403, "{headers:?}");
        assert!(refused.headers().get("set-cookie").is_none(), "{headers:?}");
    }
    // The page's own button: the session starts, once.
    let pressed = post(&[("Sec-Fetch-Site", "same-origin")]);
    assert_eq!(pressed.status().as_u16(), 303);
    assert!(pressed.headers().get("set-cookie").is_some());
    assert_eq!(post(&[("Sec-Fetch-Site", "same-origin")]).status().as_u16(), 401, "used");
    assert_eq!(client.get(&link).send().unwrap().status().as_u16(), 401);
}

/// The audit's N5: an unauthenticated login POST announcing 2 MB is refused once it passes a few
/// KiB, not buffered whole (16 nodes × 64 connections × 2 MB was 2 GiB held for 5 s at a time).
#[test]
fn a_large_login_body_is_refused_before_it_is_read_whole() {
    use std::io::{Read, Write};
    let site = web_site("");
    let addr = site.http_url().trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(3))).unwrap();
    let head = format!(
        "POST /web/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 2000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    // 64 KiB of the 2 MB, then nothing: the answer must come without the rest.
    let _ = stream.write_all(&[b'a'; 64 << 10]);
    let mut answer = vec![0u8; 512];
    let n = stream.read(&mut answer).expect("no answer within 3 s: the body is being waited for");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}
