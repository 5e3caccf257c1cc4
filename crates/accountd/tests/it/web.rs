//! The status page in a real browser: Debian's chromium in headless mode, driven through
//! chromedriver (WebDriver), against a real `accountd serve`; login links made by the real
//! `sbalance --web` run as alice and as root. The browser tests run on the host's release only
//! (the root filesystems of the Slurm release matrix have no browser; the page does not depend on
//! Slurm); there, a missing chromium is a failure, not a skip.

use std::net::{IpAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use crate::common::Site;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// alice: 24 + 40 tokens over two jobs (36 left); bob: half a token; a user whose name is markup.
const SACCT: &str = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
101|alice|billing=2,cpu=2,gres/gpu:a6000=2,gres/gpu=2,node=1|10800|2026-11-20T08:00:00|COMPLETED
102|alice|billing=4,cpu=4,gres/gpu:rtx3090=4,gres/gpu=4,node=1|36000|2026-11-21T08:00:00|COMPLETED
201|bob|billing=1,cpu=1,gres/gpu:rtx2080=1,gres/gpu=1,node=1|3600|2026-11-21T09:00:00|COMPLETED
301|<i>mallory</i>|billing=1,cpu=1,gres/gpu:rtx2080=1,gres/gpu=1,node=1|3600|2026-11-21T09:00:00|COMPLETED
";

/// The site's address in a login link (what comes before `/web/`).
fn base_of(link: &str) -> String {
    link.split("/web/").next().unwrap().to_string()
}

/// A site with alice, bob and the markup user charged; `web` is its `[web]` table.
fn web_site(web: &str) -> Site {
    // chromium here reaches the page over plain http: no TLS proxy in front.
    let site = Site::start("", &format!("[web]\nallow_http = true\n{web}"));
    let sacct = site.file("sacct.txt", SACCT);
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    // The forecast measures the fall since the users were first seen: not within the same second.
    // Their first entries' time, as the ledger holds it, is past once the clock has left its second.
    let history = site.accountd(None, &["admin", "history", "alice", "--json"]).ok().stdout;
    let entries: serde_json::Value = serde_json::from_str(&history).unwrap();
    let first_seen = entries["entries"].as_array().unwrap().iter().filter_map(|e| e["at_unix"].as_i64()).min();
    let first_seen = first_seen.unwrap_or_else(|| panic!("alice has no entries: {history}"));
    crate::cluster::wait_until(10, &format!("the clock past alice's first entry ({first_seen})"), || {
        let now = gputokens::time::now();
        if now > first_seen {
            return Ok(());
        }
        Err(format!("now {now}"))
    });
    site
}

/// `sbalance --web` as `user`: the link it printed.
fn login_link(site: &Site, user: Option<&str>) -> String {
    let out = site.sbalance(user, &["--web"]).ok().stdout;
    assert!(out.contains("it works once, and only for you"), "{out}");
    out.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("no link in {out}")).to_string()
}

/// chromedriver, and the browser profile it is given (removed with it, so no run leaves one in /tmp).
struct Driver(Child, tempfile::TempDir);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn browser() -> (Driver, Client) {
    for program in [CHROMEDRIVER, CHROMIUM] {
        assert!(
            std::path::Path::new(program).exists(),
            "{program} is missing: the status page's browser tests need Debian's chromium and chromium-driver \
             (bash tests/cluster/install.sh installs them)"
        );
    }
    let port = free_port();
    let driver = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver");
    let profile = tempfile::Builder::new().prefix("gputokens-chromium-").tempdir().unwrap();
    let driver = Driver(driver, profile);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({ "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     format!("--user-data-dir={}", driver.1.path().display())] }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a chromium session");
    (driver, client)
}

/// Opens login link `link` and presses its page's button (opening a link alone logs no one in).
async fn log_in(client: &Client, link: &str) {
    client.goto(link).await.unwrap();
    client.find(Locator::Css("#login")).await.unwrap_or_else(|e| panic!("no login button: {e}")).click().await.unwrap();
}

/// Waits for the page's script to finish (`data-loaded` on the body); returns how it ended.
async fn loaded(client: &Client) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = client.execute("return document.body ? (document.body.dataset.loaded || '') : ''", vec![]).await;
        if let Ok(serde_json::Value::String(s)) = state {
            if !s.is_empty() {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "the page did not load: {}", client.source().await.unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens `url` as a new document and waits for it to load. Going from `/web/` to `/web/#admin` would
/// only change the hash (the script then reloads): `loaded` could read the old document's state.
async fn open_fresh(client: &Client, url: &str) -> String {
    client.goto("about:blank").await.unwrap();
    client.goto(url).await.unwrap();
    loaded(client).await
}

async fn text(client: &Client, css: &str) -> String {
    client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).text().await.unwrap()
}

async fn column(client: &Client, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for cell in client.find_all(Locator::Css(css)).await.unwrap() {
        out.push(cell.text().await.unwrap());
    }
    out
}

fn run<F: std::future::Future<Output = ()>>(test: F) {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(test);
}

#[test]
#[ignore = "needs Chromium: tests/run.sh browser"]
fn alice_sees_her_page_and_not_bobs_and_links_work_once() {
    let site = web_site("");
    run(async {
        let (_driver, client) = browser().await;
        let link = login_link(&site, Some("alice"));
        client.goto(&link).await.unwrap();
        assert_eq!(text(&client, "#login-name").await, "alice", "the link's page names whom it logs in as");
        log_in(&client, &link).await;
        assert_eq!(loaded(&client).await, "true");
        assert!(client.current_url().await.unwrap().as_str().ends_with("/web/"), "the button leads to the page");
        assert_eq!(text(&client, "#user-name").await, "alice");
        assert_eq!(text(&client, "#balance").await, "36");
        assert_eq!(text(&client, "#status").await, "ok");
        assert_eq!(text(&client, "#status-text").await, "GPU jobs run normally.", "what the server sent");
        assert_eq!(column(&client, "#jobs tbody td:first-child").await, ["102", "101"]);
        assert_eq!(column(&client, "#per-type tbody td:first-child").await, ["a6000", "rtx3090"]);
        assert!(text(&client, "#forecast").await.starts_with("At the last 7 days' rate you reach the floor on "));
        // The chart is drawn: a line through the start, her entries and now.
        let chart = client.find(Locator::Css("#chart path.line")).await.unwrap();
        let points: usize = chart.attr("data-points").await.unwrap().unwrap().parse().unwrap();
        assert!(points >= 4, "{points} points");
        assert!(chart.attr("d").await.unwrap().unwrap().starts_with('M'));
        let page = client.source().await.unwrap();
        assert!(!page.contains("bob") && !page.contains("mallory"), "nobody else's data on her page");

        // Another user's data is refused, also when asked for by name.
        let base = base_of(&link);
        client.goto(&format!("{base}/web/?user=bob")).await.unwrap();
        assert_eq!(loaded(&client).await, "error");
        assert_eq!(text(&client, "#message").await, "alice may not see the data of 'bob'");

        // The link worked once; a forged one never; an unused one expires.
        client.goto(&link).await.unwrap();
        assert!(text(&client, ".refused").await.starts_with("this login link is not valid"));
        let forged = format!("{}{}", link.split("token=").next().unwrap(), "token=".to_string() + &"ab".repeat(32));
        client.goto(&forged).await.unwrap();
        assert!(text(&client, ".refused").await.starts_with("this login link is not valid"));
        // Links of the default 5 min would make the test wait that long: a site whose links last 2 s.
        let short = web_site("link_ttl = \"2s\"\n");
        let late = login_link(&short, Some("alice"));
        // accountd issued it by this second, so it expires by this second + 2 on the clock it reads.
        let expires_by = gputokens::time::now() + 2;
        while gputokens::time::now() < expires_by {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        client.goto(&late).await.unwrap();
        assert_eq!(text(&client, ".refused").await, "this login link has expired.");

        // Another site's page cannot log her out (no Origin of this site); the page's button does.
        let forged = reqwest::Client::new()
            .post(format!("{base}/web/logout"))
            .header("Origin", "http://evil.example.org")
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status().as_u16(), 403);
        let cross = reqwest::Client::new()
            .post(format!("{base}/web/logout"))
            .header("Sec-Fetch-Site", "cross-site")
            .header("Origin", "null")
            .send()
            .await
            .unwrap();
        assert_eq!(cross.status().as_u16(), 403);
        client.goto(&format!("{base}/web/")).await.unwrap();
        assert_eq!(loaded(&client).await, "true");
        client.find(Locator::Css("#logout")).await.unwrap().click().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(text(&client, ".refused").await, "You are logged out.");
        // Logged out, the page has nothing to show.
        client.goto(&format!("{base}/web/")).await.unwrap();
        assert_eq!(loaded(&client).await, "error");
        assert!(text(&client, "#message").await.starts_with("not logged in: run `sbalance --web`"));
        client.close().await.unwrap();
    });
}

#[test]
#[ignore = "needs Chromium: tests/run.sh browser"]
fn the_admin_view_lists_every_user_sorted_and_filtered() {
    let site = web_site("");
    run(async {
        let (_driver, client) = browser().await;
        let link = login_link(&site, None);
        let base = base_of(&link);
        log_in(&client, &link).await;
        assert_eq!(loaded(&client).await, "true");
        assert_eq!(open_fresh(&client, &format!("{base}/web/#admin")).await, "true");
        let users = || column(&client, "#users tbody td:first-child");
        assert_eq!(users().await, ["<i>mallory</i>", "alice", "bob"], "by name");
        assert!(client.find_all(Locator::Css("#users i")).await.unwrap().is_empty(), "a name is text, never markup");
        client.find(Locator::Css("#users th[data-key=balance]")).await.unwrap().click().await.unwrap();
        assert_eq!(column(&client, "#users tbody td:nth-child(2)").await, ["36", "99.5", "99.5"]);
        client.find(Locator::Css("#users th[data-key=balance]")).await.unwrap().click().await.unwrap();
        assert_eq!(column(&client, "#users tbody td:nth-child(2)").await, ["99.5", "99.5", "36"], "descending");
        client.find(Locator::Css("#filter")).await.unwrap().send_keys("ali").await.unwrap();
        assert_eq!(users().await, ["alice"]);
        assert_eq!(text(&client, "#shown").await, "1 of 3 users");
        assert_eq!(column(&client, "#usage tbody td:first-child").await, ["a6000", "rtx2080", "rtx3090"]);
        client.close().await.unwrap();
    });
    // alice is no admin: the admins' data is refused to her session.
    run(async {
        let (_driver, client) = browser().await;
        let link = login_link(&site, Some("alice"));
        let base = base_of(&link);
        log_in(&client, &link).await;
        loaded(&client).await;
        assert_eq!(open_fresh(&client, &format!("{base}/web/#admin")).await, "error");
        assert_eq!(text(&client, "#message").await, "alice is not a gputokens admin");
        client.close().await.unwrap();
    });
}

/// GET `url` from local address `from` with `headers`: (status, body).
pub(crate) fn get_with(from: &str, url: &str, headers: &[(&str, String)]) -> (u16, String) {
    let client = reqwest::blocking::Client::builder().local_address(from.parse::<IpAddr>().ok()).build().unwrap();
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

pub(crate) const PROXY_SECRET: &str = "pr0xy-s3cret";

/// The `[web]` lines of a site whose proxy at 127.0.0.2 proves itself with PROXY_SECRET, and the
/// secret's file (removed when dropped).
pub(crate) fn proxy_settings() -> (String, tempfile::NamedTempFile) {
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{PROXY_SECRET}\n")).unwrap();
    std::fs::set_permissions(secret.path(), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let lines = format!(
        "trusted_proxies = [\"127.0.0.2\"]\nuser_header = \"X-Remote-User\"\nproxy_secret_file = \"{}\"\n",
        secret.path().display()
    );
    (lines, secret)
}

/// `user`'s page data, as the proxy of `proxy_settings` asks for it.
pub(crate) fn page_of(site: &Site, user: &str) -> serde_json::Value {
    let headers = [("X-Remote-User", user.to_string()), ("X-Gputokens-Proxy-Secret", PROXY_SECRET.into())];
    let (status, body) = get_with("127.0.0.2", &format!("{}/web/api/me", site.http_url()), &headers);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

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
    let site = Site::start("", "");
    let out = site.sbalance(Some("alice"), &["--web"]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(out.stderr.contains("the status page has no https address"), "{}", out.stderr);
    let plain = Site::start("", "[web]\nurl = \"http://gpu.example.org:9817\"\n");
    let out = plain.sbalance(Some("alice"), &["--web"]);
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
