//! Users' tools on the hosts that have no accountd (login and compute nodes): the site's config
//! there names no socket that exists, and `[accountd] urls` says where accountd answers. sbalance
//! asks over the network as the real non-root users, proven by MUNGE (the test cluster's munged);
//! what they see is what the socket shows them. A replayed or foreign credential is refused, changes
//! to balances wait for `[http] remote_writes`, and with TLS the client checks accountd's certificate.

use std::path::Path;
use std::process::{Command, Stdio};

use gputokens::protocol::Request;

use crate::common::{run_as, sbalance_bin, Outcome, Site};

/// A login host's config `name` for `site`: its socket is not here, its listener is at `url`.
fn login_host_config(site: &Site, name: &str, url: &str, more: &str) -> String {
    let text = format!("[paths]\nsocket = \"/nonexistent/accountd.sock\"\n[accountd]\nurls = [\"{url}\"]\n{more}");
    site.file(&format!("{name}.toml"), &text)
}

/// sbalance as `user` with the login host's config.
fn sbalance_there(config: &str, user: Option<&str>, args: &[&str]) -> Outcome {
    let mut all = vec!["--config", config];
    all.extend_from_slice(args);
    run_as(user, &sbalance_bin(), &all)
}

/// A MUNGE credential made as `user` for `payload` (the munge command, as the client makes one).
fn credential_as(user: &str, payload: &str) -> String {
    let out = run_as(Some(user), Path::new("/usr/bin/munge"), &["--string", payload]).ok();
    out.stdout.trim().to_string()
}

/// POST /v1/request with `credential`: (status, body).
fn post(url: &str, credential: &str, body: &str) -> (u16, String) {
    let client = reqwest::blocking::Client::new();
    let response = client
        .post(format!("{url}/v1/request"))
        .header("Authorization", format!("MUNGE {credential}"))
        .body(body.to_string())
        .send()
        .unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

/// The payload a credential for `body` carries: the purpose and the body's SHA-256.
fn payload_for(body: &str) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), body.as_bytes()).unwrap();
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    format!("gputokens request v1\n{}", out.split_whitespace().next().unwrap())
}

#[test]
#[ignore = "needs munged: tests/cluster/up.sh"]
fn sbalance_on_a_host_without_accountd_asks_over_the_network_as_the_real_user() {
    let site = Site::start("", "[web]\nallow_http = true\n");
    site.accountd(None, &["admin", "grant", "alice", "5", "--reason", "test"]).ok();
    let sacct = site.file(
        "sacct.txt",
        "JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State\n\
         71|alice|gres/gpu:a6000=1,gres/gpu=1|3600|2026-11-30T08:00:00|COMPLETED\n",
    );
    site.accountd(None, &["charge", "--sacct-file", &sacct]).ok();
    let config = login_host_config(&site, "login", &site.http_url(), "");

    // What the socket shows her, the network shows her: her own row, byte for byte.
    let here = site.sbalance(Some("alice"), &[]).ok().stdout;
    let there = sbalance_there(&config, Some("alice"), &[]).ok().stdout;
    assert_eq!(there, here);
    assert!(there.contains("alice") && there.contains("101"), "{there}");
    let history = sbalance_there(&config, Some("alice"), &["--history"]).ok().stdout;
    assert!(history.contains("71"), "her charge for job 71: {history}");
    let month = gputokens::time::local_date(gputokens::time::now()).format("%Y-%m").to_string();
    let statement = sbalance_there(&config, Some("alice"), &["--statement", &month]).ok().stdout;
    assert!(statement.starts_with("Statement of alice for "), "{statement}");
    let link = sbalance_there(&config, Some("alice"), &["--web"]).ok().stdout;
    assert!(link.contains("/web/login?token="), "{link}");

    // bob, from the same host, sees his own row and not hers.
    let bobs = sbalance_there(&config, Some("bob"), &["-P", "-n", "-o", "User,Balance"]).ok().stdout;
    assert_eq!(bobs, "bob|100\n");
    let hers = sbalance_there(&config, Some("bob"), &["-u", "alice"]);
    assert_eq!(hers.code, 2, "{hers:?}");
    assert!(hers.stderr.contains("only see your own balance"), "{}", hers.stderr);
    let history = sbalance_there(&config, Some("bob"), &["--history", "-u", "alice"]);
    assert_ne!(history.code, 0, "{history:?}");

    // root sees everyone there, but changes balances only on accountd's host unless the site says so.
    let all = sbalance_there(&config, None, &["-a", "-P", "-n", "-o", "User,Balance"]).ok().stdout;
    assert_eq!(all, site.sbalance(None, &["-a", "-P", "-n", "-o", "User,Balance"]).ok().stdout);
    assert!(all.contains("alice|"), "{all}");
    let grant = run_as(
        None,
        &crate::common::bin("accountd"),
        &["--config", &config, "admin", "grant", "bob", "1", "--reason", "x"],
    );
    assert_ne!(grant.code, 0, "{grant:?}");
    assert!(grant.stderr.contains("remote_writes"), "{}", grant.stderr);
    assert_eq!(site.balance("bob"), "100");
}

#[test]
#[ignore = "needs munged: tests/cluster/up.sh"]
fn a_replayed_foreign_or_misused_credential_is_refused() {
    let site = Site::start("", "");
    let url = site.http_url();
    let own = Request::Balances { users: Vec::new(), all: false };
    let body = &serde_json::to_string(&own).unwrap();
    // A credential alice made for this request: answered once, as her.
    let credential = credential_as("alice", &payload_for(body));
    let (status, reply) = post(&url, &credential, body);
    assert_eq!(status, 200, "{reply}");
    assert!(reply.contains("\"user\":\"alice\""), "{reply}");
    // The same credential again (captured on the wire): refused.
    let (status, reply) = post(&url, &credential, body);
    assert_eq!(status, 401, "{reply}");
    assert!(reply.to_lowercase().contains("replayed"), "{reply}");
    // Hers, made for one request, sent with another (everyone's rows): refused.
    let other = &serde_json::to_string(&Request::Balances { users: Vec::new(), all: true }).unwrap();
    let (status, reply) = post(&url, &credential_as("alice", &payload_for(body)), other);
    assert_eq!(status, 401, "{reply}");
    assert!(reply.contains("another request"), "{reply}");
    // One made for another purpose (the JSON API's): refused.
    let (status, reply) = post(&url, &credential_as("alice", "gputokens api v1"), body);
    assert_eq!(status, 401, "{reply}");
    // Not a credential of this site's munged at all.
    let (status, reply) = post(&url, "MUNGE:AwQFAAD2lX6Ul9g0HcQ:", body);
    assert_eq!(status, 401, "{reply}");
    // No credential: refused before the body is read.
    let response =
        reqwest::blocking::Client::new().post(format!("{url}/v1/request")).body(body.clone()).send().unwrap();
    assert_eq!(response.status().as_u16(), 401);
}

#[test]
#[ignore = "needs munged: tests/cluster/up.sh"]
fn with_tls_the_client_checks_accountds_certificate() {
    let pki = crate::pki::SiteCa::for_address("127.0.0.1");
    let site = Site::start("", &format!("[http]\nlisten = \"127.0.0.1:0\"\n{}", pki.http_keys()));
    let url = site.http_url();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    let ca_file = |ca: std::path::PathBuf| format!("ca_file = \"{}\"\n", ca.display());
    let trusted = login_host_config(&site, "trusted", &url, &ca_file(pki.ca()));
    let out = sbalance_there(&trusted, Some("alice"), &["-P", "-n", "-o", "User,Balance"]).ok();
    assert_eq!(out.stdout, "alice|100\n");
    // A certificate the host's CA did not sign, or no site CA (the public CAs'): nothing is sent.
    let config = login_host_config(&site, "wrong-ca", &url, &ca_file(pki.other_ca()));
    let wrong = sbalance_there(&config, Some("alice"), &[]);
    assert_ne!(wrong.code, 0, "{wrong:?}");
    assert!(wrong.stderr.contains(&url) && wrong.stderr.to_lowercase().contains("certificate"), "{}", wrong.stderr);
    let public = login_host_config(&site, "public-cas", &url, "");
    let unknown = sbalance_there(&public, Some("alice"), &[]);
    assert_ne!(unknown.code, 0, "{unknown:?}");
    // Plain HTTP to the TLS listener gets no answer from it.
    let plain = login_host_config(&site, "plain", &url.replace("https://", "http://"), "");
    let refused = sbalance_there(&plain, Some("alice"), &[]);
    assert_ne!(refused.code, 0, "{refused:?}");
    // config check says which is in use.
    let check = run_as(None, &crate::common::bin("accountd"), &["config", "check", "--config", &trusted]).ok();
    assert!(check.stdout.contains("TLS"), "{}", check.stdout);
}

#[test]
#[ignore = "needs munged: tests/cluster/up.sh"]
fn with_accountd_down_sbalance_names_the_address_it_tried() {
    let mut site = Site::start("", "");
    let url = site.http_url();
    let config = login_host_config(&site, "login", &url, "");
    site.stop();
    let started = std::time::Instant::now();
    let out = sbalance_there(&config, Some("alice"), &[]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("cannot reach accountd at") && out.stderr.contains(&url), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "no stale or guessed figure: {}", out.stdout);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
}
