//! The status page and JSON API from outside: a charged site to look at, login links as `sbalance --web`
//! prints them, and GETs as a proxy or a browser makes them (the local, cluster and browser tests' share).

use std::net::IpAddr;

use super::common::Site;

/// alice: 24 + 40 tokens over two jobs (36 left); bob: half a token; a user whose name is markup.
pub const SACCT: &str = "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State
101|alice|billing=2,cpu=2,gres/gpu:a6000=2,gres/gpu=2,node=1|10800|2026-11-20T08:00:00|COMPLETED
102|alice|billing=4,cpu=4,gres/gpu:rtx3090=4,gres/gpu=4,node=1|36000|2026-11-21T08:00:00|COMPLETED
201|bob|billing=1,cpu=1,gres/gpu:rtx2080=1,gres/gpu=1,node=1|3600|2026-11-21T09:00:00|COMPLETED
301|<i>mallory</i>|billing=1,cpu=1,gres/gpu:rtx2080=1,gres/gpu=1,node=1|3600|2026-11-21T09:00:00|COMPLETED
";

/// The site's address in a login link (what comes before `/web/`).
pub fn base_of(link: &str) -> String {
    link.split("/web/").next().unwrap().to_string()
}

/// A site with alice, bob and the markup user charged; `web` is its `[web]` table.
pub fn web_site(web: &str) -> Site {
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
    super::cluster::wait_until(10, &format!("the clock past alice's first entry ({first_seen})"), || {
        let now = gputokens::time::now();
        if now > first_seen {
            return Ok(());
        }
        Err(format!("now {now}"))
    });
    site
}

/// `sbalance --web` as `user`: the link it printed.
pub fn login_link(site: &Site, user: Option<&str>) -> String {
    let out = site.sbalance(user, &["--web"]).ok().stdout;
    assert!(out.contains("it works once, and only for you"), "{out}");
    out.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("no link in {out}")).to_string()
}

/// GET `url` from local address `from` with `headers`: (status, body).
pub fn get_with(from: &str, url: &str, headers: &[(&str, String)]) -> (u16, String) {
    let client = reqwest::blocking::Client::builder().local_address(from.parse::<IpAddr>().ok()).build().unwrap();
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

pub const PROXY_SECRET: &str = "pr0xy-s3cret";

/// The `[web]` lines of a site whose proxy at 127.0.0.2 proves itself with PROXY_SECRET, and the
/// secret's file (removed when dropped).
pub fn proxy_settings() -> (String, tempfile::NamedTempFile) {
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
pub fn page_of(site: &Site, user: &str) -> serde_json::Value {
    let headers = [("X-Remote-User", user.to_string()), ("X-Gputokens-Proxy-Secret", PROXY_SECRET.into())];
    let (status, body) = get_with("127.0.0.2", &format!("{}/web/api/me", site.http_url()), &headers);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}
