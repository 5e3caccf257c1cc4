//! Issue 36's shadow mode as people see it: `sbalance` and the status page say the site does not
//! enforce yet and what it would have done. An admin (root, the SlurmUser, [admins]) sees each
//! controller's counts and every user's would-be refusals; a user only how many of her own. With
//! enforcement on, nothing of it is shown.

use gputokens::controller_status::{ControllerStatus, Shadow, ViewStatus};

use crate::common::Site;
use crate::status_page::{get_with, proxy_settings, PROXY_SECRET};

fn uid_of(user: &str) -> u32 {
    nix::unistd::User::from_name(user).unwrap().unwrap_or_else(|| panic!("no user {user}")).uid.as_raw()
}

/// The status file the plugin on `host` writes, `age` seconds ago; in shadow mode (`refused` by
/// uid) or, with None, enforcing.
fn write_status(site: &Site, host: &str, age: i64, refused: Option<&[(u32, u64)]>) {
    let dir = site.path("lib/controllers");
    std::fs::create_dir_all(&dir).unwrap();
    let now = gputokens::time::now();
    let shadow = refused.map(|refused| Shadow {
        since: now - 3600,
        would: [("refuse".to_string(), refused.iter().map(|(_, n)| n).sum()), ("deprioritize".to_string(), 5)].into(),
        refused_by_uid: refused.iter().copied().collect(),
    });
    let status = ControllerStatus {
        host: host.into(),
        pid: 7,
        written: now - age,
        snapshot: site.path("lib/balances.snapshot"),
        view: ViewStatus::Ready { generated: now - age, age_secs: 0, queue_as_of: None, file_modified_ns: None },
        shadow,
    };
    std::fs::write(dir.join(format!("{host}.json")), status.to_json()).unwrap();
}

/// A site with the status page behind a trusted proxy (so a test can be any user) and `tables`.
fn site(tables: &str) -> (Site, tempfile::NamedTempFile) {
    let (proxy, secret) = proxy_settings();
    (Site::start("", &format!("{tables}[web]\nallow_http = true\n{proxy}")), secret)
}

/// The status page's JSON at `path` as `user`.
fn page(site: &Site, path: &str, user: &str) -> serde_json::Value {
    let headers = [("X-Remote-User", user.to_string()), ("X-Gputokens-Proxy-Secret", PROXY_SECRET.into())];
    let (status, body) = get_with("127.0.0.2", &format!("{}{path}", site.http_url()), &headers);
    assert_eq!(status, 200, "{path} as {user}: {body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn admins_see_what_each_controller_would_have_done_and_a_user_only_her_own_count() {
    let (site, _secret) = site("[admission]\nenforce = false\n[admins]\nusers = [\"carol\"]\n");
    let (alice, bob) = (uid_of("alice"), uid_of("bob"));
    write_status(&site, "ctl1", 0, Some(&[(alice, 3), (bob, 1)]));
    write_status(&site, "ctl2", 2, Some(&[(alice, 1)]));

    for admin in [None, Some("carol")] {
        let out = site.sbalance(admin, &[]).ok().stdout;
        assert!(out.contains("\ngputokens is in shadow mode ([admission] enforce = false): no GPU job is refused"));
        assert!(
            out.contains("  ctl1 (since ") && out.contains("): refused 4, deprioritized 5, time-limited 0 GPU jobs")
        );
        assert!(out.contains("  ctl2 (since ") && out.contains("): refused 1, deprioritized 5,"), "{out}");
        assert!(
            out.contains("Submissions that would have been refused, by user: alice 4, bob 1\n"),
            "{admin:?}: {out}"
        );
    }
    let out = site.sbalance(Some("alice"), &[]).ok().stdout;
    assert!(
        out.contains("gputokens is in shadow mode") && out.ends_with("\n4 of your GPU jobs would have been refused.\n")
    );
    assert!(!out.contains("bob") && !out.contains("ctl1"), "alice sees no one else's counts: {out}");
    let out = site.sbalance(Some("bob"), &[]).ok().stdout;
    assert!(out.ends_with("\n1 of your GPU jobs would have been refused.\n"), "{out}");
    // Scripts' shapes stay as they were.
    for args in [&["-P"][..], &["-n"], &["--json"]] {
        let out = site.sbalance(Some("alice"), args).ok().stdout;
        assert!(!out.contains("shadow mode"), "{args:?}: {out}");
    }

    let admin = page(&site, "/web/api/admin", "root");
    let shadow = &admin["shadow"];
    assert_eq!((shadow["enforce"].as_bool(), shadow["everyone"].as_bool()), (Some(false), Some(true)), "{shadow}");
    assert_eq!(shadow["refused"], serde_json::json!({ "alice": 4, "bob": 1 }));
    assert_eq!(shadow["controllers"][0]["controller"], "ctl1");
    assert_eq!(shadow["controllers"][0]["would"]["refuse"], 4);
    assert_eq!(shadow["controllers"][1]["would"]["refuse"], 1);
    let own = page(&site, "/web/api/me", "alice");
    assert_eq!(own["shadow"]["refused"], serde_json::json!({ "alice": 4 }), "{}", own["shadow"]);
    assert_eq!(own["shadow"]["controllers"], serde_json::json!([]));
    // An admin looking at bob's page sees bob's count.
    assert_eq!(page(&site, "/web/api/me?user=bob", "root")["shadow"]["refused"], serde_json::json!({ "bob": 1 }));
}

/// With balances public alice may open bob's page, but whom the plugins would have refused stays his.
#[test]
fn public_balances_show_no_one_elses_shadow_count() {
    let (proxy, _secret) = proxy_settings();
    let tables = format!("[admission]\nenforce = false\n[web]\nallow_http = true\n{proxy}");
    let site = Site::start("balances_public = true", &tables);
    write_status(&site, "ctl1", 0, Some(&[(uid_of("alice"), 3), (uid_of("bob"), 1)]));
    let bobs = page(&site, "/web/api/me?user=bob", "alice");
    assert_eq!(bobs["user"], "bob", "alice sees bob's balance: {bobs}");
    assert!(bobs["shadow"].is_null(), "but not his shadow count: {}", bobs["shadow"]);
    assert_eq!(page(&site, "/web/api/me", "bob")["shadow"]["refused"], serde_json::json!({ "bob": 1 }));
}

#[test]
fn with_enforcement_on_nothing_of_shadow_mode_is_shown() {
    let (site, _secret) = site("");
    let alice = uid_of("alice");
    // The plugin enforces (its file has no counts); an old shadow file of a controller gone since.
    write_status(&site, "ctl1", 0, None);
    write_status(&site, "ctl2", 120, Some(&[(alice, 3)]));
    for user in [None, Some("alice")] {
        let out = site.sbalance(user, &[]).ok().stdout;
        assert!(!out.contains("shadow") && !out.contains("would have been"), "{user:?}: {out}");
    }
    assert!(page(&site, "/web/api/admin", "root").get("shadow").is_none());
    assert!(page(&site, "/web/api/me", "alice").get("shadow").is_none());

    // A controller whose plugin still runs in shadow mode (its config not the one accountd read) is
    // named to admins.
    write_status(&site, "ctl2", 0, Some(&[(alice, 3)]));
    let out = site.sbalance(None, &[]).ok().stdout;
    assert!(out.contains("gputokens enforces, but these controllers' plugins are in shadow mode"), "{out}");
    assert!(out.contains("  ctl2 (since ") && out.contains("by user: alice 3"), "{out}");
}
