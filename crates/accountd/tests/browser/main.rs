//! The status page in a real browser: Debian's chromium in headless mode, driven through
//! chromedriver (WebDriver), against a real `accountd serve`; login links made by the real
//! `sbalance --web` run as alice and as root. The browser tests run on the host's release only
//! (the root filesystems of the Slurm release matrix have no browser; the page does not depend on
//! Slurm); there, a missing chromium is a failure, not a skip.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

#[path = "../support/mod.rs"]
mod support;
use support::status_page;

use status_page::{base_of, login_link, web_site};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

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
