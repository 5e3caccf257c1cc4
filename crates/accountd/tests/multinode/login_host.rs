//! A login host (login1): munged and the site's files, no daemon of Slurm's or gputokens'. alice and
//! bob log in there; sbalance and sbatch's balance line ask accountd on ctl1 over the lab's network,
//! proven by MUNGE, and what they show is what accountd's own host shows. With accountd stopped,
//! sbatch is not held up and sbalance says where it asked. With TLS, nothing of a request crosses
//! the lab's bridge in clear.

use std::io::BufReader;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{mn_dir, Outcome};
use crate::{Cluster, Settings};

const ACCOUNTD: &str = "http://10.78.0.2:9817";

/// What a packet capture on login1's port of the lab's bridge (the switch namespace) saw of
/// accountd's port: everything between login1 and ctl1 crosses it.
struct Capture {
    tcpdump: Child,
    file: std::path::PathBuf,
}

impl Capture {
    fn start(name: &str) -> Capture {
        use std::io::BufRead;
        let file = mn_dir().join(format!("{name}.pcap"));
        let mut tcpdump = Command::new("ip")
            .args(["netns", "exec", "gtmn-switch", "tcpdump"])
            .args(["--immediate-mode", "-i", "v-login1", "-U", "-s", "0", "-w"])
            .arg(&file)
            .args(["tcp", "port", "9817"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (bash tests/cluster/install.sh installs it)");
        // It says so once it captures (the file exists before that).
        let mut said = String::new();
        let mut stderr = BufReader::new(tcpdump.stderr.take().unwrap());
        while !said.contains("listening on") {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "tcpdump stopped: {said}");
            said.push_str(&line);
        }
        Capture { tcpdump, file }
    }

    /// Everything captured (headers and payloads, as bytes).
    fn stop(mut self) -> Vec<u8> {
        // --immediate-mode and -U: each packet is written as it arrives (libpcap's ring otherwise
        // holds them up to a second, and SIGINT drops what it holds).
        std::thread::sleep(Duration::from_millis(300));
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.tcpdump.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let _ = self.tcpdump.wait();
        std::fs::read(&self.file).unwrap()
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn sbalance(cluster: &Cluster, user: &str, args: &[&str]) -> Outcome {
    let mut argv = vec!["sbalance"];
    argv.extend_from_slice(args);
    cluster.on("login1", Some(user), &argv)
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_on_a_login_host_alice_sees_her_balance_and_why_she_is_refused() {
    // The key lands in up.sh's last table, [admission].
    let cluster = Cluster::up(Settings { config: "contact = \"hpc-help@example.org\"\n", ..Settings::default() });
    assert!(!mn_dir().join("hosts/login1/gputokens/accountd.sock").exists(), "no socket on the login host");
    cluster.accountd(None, &["admin", "grant", "alice", "5", "--reason", "test"]).ok();

    // Her sbalance there is what accountd's host shows her; over plain HTTP, the lab's bridge sees it.
    let capture = Capture::start("plain");
    let there = sbalance(&cluster, "alice", &[]).ok().stdout;
    let seen = capture.stop();
    let here = cluster.on("ctl1", Some("alice"), &["sbalance"]).ok().stdout;
    assert_eq!(there, here);
    assert!(there.contains("alice") && there.contains("105"), "{there}");
    assert!(contains(&seen, "MUNGE:"), "plain HTTP carries the credential in clear ({} bytes seen)", seen.len());
    let history = sbalance(&cluster, "alice", &["--history"]).ok().stdout;
    assert!(history.contains("grant"), "{history}");
    let month = gputokens::time::local_date(gputokens::time::now()).format("%Y-%m").to_string();
    let statement = sbalance(&cluster, "alice", &["--statement", &month]).ok().stdout;
    assert!(statement.starts_with("Statement of alice for "), "{statement}");
    // A login link works once for whoever holds it: over plain HTTP it is not sent.
    let web = sbalance(&cluster, "alice", &["--web"]);
    assert!(web.stderr.contains("sbalance --web gives a login link on this host only over TLS"), "{web:?}");
    // An admin on the login host learns whether accountd answers there, and how she was proven.
    let check = cluster.on("login1", None, &["accountd", "config", "check", "--slurm"]).stdout;
    let answers = format!("accountd: ok: answers from this host at {ACCOUNTD}, to root, proven by a MUNGE credential");
    assert!(check.contains(&answers), "{check}");

    // bob, from the same host, cannot read her rows.
    let hers = sbalance(&cluster, "bob", &["-u", "alice"]);
    assert_eq!(hers.code, 2, "{hers:?}");
    assert!(hers.stderr.contains("only see your own balance"), "{}", hers.stderr);
    let history = sbalance(&cluster, "bob", &["--history", "-u", "alice"]);
    assert_ne!(history.code, 0, "{history:?}");
    assert!(!history.stdout.contains("grant"), "{history:?}");

    // Her sbatch there prints her balance line (the SPANK plugin asks accountd over the network).
    let out = mn_dir().join("jobs/%j.out");
    let out = out.to_str().unwrap();
    let submitted = cluster.on("login1", Some("alice"), &["sbatch", "--output", out, "--wrap", "true"]).ok();
    assert!(submitted.stderr.contains("sbatch: gputokens: balance 105 tokens (ok)"), "{submitted:?}");

    // At the floor: refused, with why, when she recovers, what still runs and whom to ask.
    cluster.accountd(None, &["admin", "adjust", "alice", "-116", "--reason", "at the floor"]).ok();
    cluster.wait_controllers_past("alice at -11", |text| text.lines().any(|l| l == "user alice -11000000"));
    let refused =
        cluster.on("login1", Some("alice"), &["sbatch", "--output", out, "--gres=gpu:rtx3090:1", "--wrap", "true"]);
    assert_ne!(refused.code, 0, "{refused:?}");
    for words in [
        "gputokens: your GPU token balance is -11 (floor -10); GPU jobs are refused until it is above the floor again",
        "CPU-only jobs still run; ask hpc-help@example.org for tokens sooner.",
    ] {
        assert!(refused.stderr.contains(words), "{words}: {}", refused.stderr);
    }
    let told = sbalance(&cluster, "alice", &[]).ok().stdout;
    assert!(
        told.contains(
            "alice: blocked: GPU jobs are refused until the balance is above the floor -10 again (recovers on "
        ),
        "{told}"
    );
    // Her CPU job still runs.
    cluster.on("login1", Some("alice"), &["sbatch", "--output", out, "--wrap", "true"]).ok();
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_with_accountd_stopped_a_login_hosts_sbatch_is_not_held_up() {
    let cluster = Cluster::up(Settings::default());
    cluster.mn(&["stop", "accountd", "ctl1"]).ok();
    let out = mn_dir().join("jobs/%j.out");
    let started = Instant::now();
    let submitted =
        cluster.on("login1", Some("alice"), &["sbatch", "--output", out.to_str().unwrap(), "--wrap", "true"]);
    let took = started.elapsed();
    assert_eq!(submitted.code, 0, "{submitted:?}");
    assert!(!submitted.stderr.contains("balance"), "no balance line, and no guessed one: {submitted:?}");
    // nsenter and runuser take a few milliseconds; the balance line's bound is a second.
    assert!(took < Duration::from_millis(1500), "sbatch took {took:?} with accountd stopped");
    let asked = sbalance(&cluster, "alice", &[]);
    assert_eq!(asked.code, 1, "{asked:?}");
    assert!(asked.stderr.contains(&format!("cannot reach accountd at {ACCOUNTD}")), "{}", asked.stderr);
    assert!(asked.stdout.is_empty(), "no stale figure: {}", asked.stdout);
}

#[test]
#[ignore = "needs the multi-node cluster: tests/run.sh"]
fn multinode_with_tls_no_credential_crosses_the_bridge_in_clear() {
    let pki = crate::support::pki::SiteCa::for_address("10.78.0.2");
    let (http, accountd) = (pki.http_keys(), format!("ca_file = \"{}\"", pki.ca().display()));
    let url = "https://10.78.0.2:9817";
    let cluster =
        Cluster::up(Settings { http: &http, accountd_url: Some(url), accountd: &accountd, ..Settings::default() });

    cluster.accountd(None, &["admin", "grant", "alice", "5", "--reason", "test"]).ok();
    let capture = Capture::start("tls");
    let there = sbalance(&cluster, "alice", &["-P", "-n", "-o", "User,Balance"]).ok().stdout;
    let history = sbalance(&cluster, "alice", &["--history"]).ok().stdout;
    let seen = capture.stop();
    assert_eq!(there, "alice|105\n");
    assert!(history.contains("grant"), "{history}");
    // Over TLS her login link is made, to the listener's own https address.
    let link = sbalance(&cluster, "alice", &["--web"]).ok().stdout;
    assert!(link.contains(&format!("{url}/web/login?token=")), "{link}");
    assert!(seen.len() > 1000, "the capture saw the exchange ({} bytes)", seen.len());
    for clear in ["MUNGE:", "Authorization", "gputokens request", "\"op\"", "alice", "balances"] {
        assert!(!contains(&seen, clear), "'{clear}' crossed the bridge in clear");
    }
    let check = cluster.on("login1", None, &["accountd", "config", "check"]).ok().stdout;
    assert!(check.contains("TLS, accountd's certificate checked against"), "{check}");
    // The agents report over the same TLS (report_to is the same https:// address).
    let ca = pki.ca().display().to_string();
    crate::wait_until(30, "node1's agent reporting over https", || {
        let metrics = cluster.on("ctl1", None, &["curl", "-sf", "--cacert", &ca, &format!("{url}/metrics")]).stdout;
        metrics.contains(&crate::last_report("node1")).then_some(())
    });
}
