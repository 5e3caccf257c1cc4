//! accountd under a flood, as a hostile user makes one: idle connections to the HTTP port and the
//! Unix socket take at most their caps, are closed once their time is up, and never keep sbalance or
//! Prometheus from being answered.

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{http_get, Site};
use crate::connection_flood::{metric, Holder};

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[test]
fn a_flood_of_idle_connections_leaves_sbalance_and_metrics_answered() {
    // Idle connections would be closed after a minute: everything below happens while alice holds them.
    let site = Site::start("", "[http]\nlisten = \"127.0.0.1:0\"\nrequest_timeout = \"60s\"\n");
    let base = site.http_url();
    let port = base.rsplit(':').next().unwrap().to_string();
    let socket = site.path("run/accountd.sock");
    let before = open_descriptors(site.pid());

    // From 127.0.0.2: another host's address, as a compute node's would be.
    let _tcp = Holder::start("alice", &["tcp", &format!("127.0.0.1:{port}"), "127.0.0.2", "1000"]);
    let _unix = Holder::start("alice", &["unix", socket.to_str().unwrap(), "200"]);

    // Each connection beyond a cap shed an older idle one of alice's: all 1,000 got in, one by one.
    let http_shed = "gputokens_connections_shed_total{listener=\"http\",reason=\"per_address\"}";
    let socket_shed = "gputokens_connections_shed_total{listener=\"socket\",reason=\"per_user\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let (status, metrics) = http_get(&format!("{base}/metrics"));
        assert_eq!(status, 200, "{metrics}");
        if metric(&metrics, http_shed) == 1000 - 64 && metric(&metrics, socket_shed) == 200 - 32 {
            break metrics;
        }
        assert!(Instant::now() < deadline, "the caps did not shed what alice holds beyond them:\n{metrics}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let refused: Vec<&str> =
        metrics.lines().filter(|l| l.starts_with("gputokens_connections_refused_total{")).collect();
    assert!(
        !refused.is_empty() && refused.iter().all(|l| l.ends_with(" 0")),
        "nothing busy, nothing refused:\n{metrics}"
    );
    // accountd holds what the caps allow, not alice's 1,200 connections.
    // A shed connection is counted before it is closed: on a busy machine the last closes may lag.
    let bound = before + 64 + 32 + 4;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut held = open_descriptors(site.pid());
    while held > bound && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        held = open_descriptors(site.pid());
    }
    assert!(held <= bound, "accountd holds {held} descriptors ({before} before the flood)");

    // bob is answered at once (not after alice's connections time out in a minute), and so is alice:
    // her newest connection sheds one of her idle ones.
    for (user, row) in [("bob", "bob|100"), ("alice", "alice|100")] {
        let asked = Instant::now();
        let out = site.sbalance(Some(user), &["-P", "-n", "-o", "User,Balance"]);
        assert_eq!((out.code, out.stdout.trim()), (0, row), "{}", out.stderr);
        assert!(asked.elapsed() < Duration::from_secs(10), "sbalance took {:?}", asked.elapsed());
    }
}

#[test]
fn connections_that_never_finish_a_request_are_closed() {
    let site = Site::start("", "[http]\nlisten = \"127.0.0.1:0\"\nrequest_timeout = \"1s\"\n");
    let host = site.http_url().trim_start_matches("http://").to_string();
    let closed_within = |mut stream: std::net::TcpStream| {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut answer = String::new();
        let read = stream.read_to_string(&mut answer);
        assert!(read.is_ok(), "still open after 20 s: {read:?}");
        answer
    };
    // Says nothing at all.
    let silent = std::net::TcpStream::connect(&host).unwrap();
    assert_eq!(closed_within(silent), "");
    // Half a request line and headers, never finished.
    let mut slow = std::net::TcpStream::connect(&host).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n").unwrap();
    assert_eq!(closed_within(slow), "");
    // Headers, then a body that never comes.
    let mut body = std::net::TcpStream::connect(&host).unwrap();
    body.write_all(b"POST /v1/agent/report HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{\"node\"")
        .unwrap();
    let answer = closed_within(body);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A keep-alive connection left idle after its answer.
    let mut idle = std::net::TcpStream::connect(&host).unwrap();
    idle.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let answer = closed_within(idle);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn one_address_sending_too_many_requests_is_slowed_and_others_are_not() {
    let site = Site::start("", "");
    let host = site.http_url().trim_start_matches("http://").to_string();
    // One keep-alive connection from 127.0.0.2 sending health checks as fast as it can.
    let counted = {
        let out = Command::new("perl")
            .args([
                "-MIO::Socket::INET",
                "-e",
                r#"my $s = IO::Socket::INET->new(PeerAddr => $ARGV[0], LocalAddr => "127.0.0.2") or die;
                   print $s "GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n" for 1 .. 3000;
                   print $s "GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
                   local $/; my $all = <$s>; my $ok = () = $all =~ m{HTTP/1.1 200}g;
                   my $slow = () = $all =~ m{HTTP/1.1 429}g; print "$ok $slow\n";"#,
                &host,
            ])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let counts: Vec<u64> = counted.split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(counts.len(), 2, "{counted}");
    assert!(counts[1] > 1000, "3001 requests at once: most beyond the burst of 1000 slowed: {counted}");
    assert!(counts[0] >= 1000, "the burst is served: {counted}");
    // Meanwhile another address is served at once.
    let (status, _) = http_get(&format!("{}/v1/health", site.http_url()));
    assert_eq!(status, 200);
    let (_, metrics) = http_get(&format!("{}/metrics", site.http_url()));
    assert!(
        metric(&metrics, "gputokens_connections_refused_total{listener=\"http\",reason=\"rate\"}") > 1000,
        "{metrics}"
    );
}

/// The fresh reader's M4 (issue 46): an admin's grant waits on SQLite while another writer holds
/// the ledger (a long charge cycle; here sqlite3 in a write transaction for 6 s). The grant goes
/// on the writer's own connection and lock: alice's and bob's sbalance answer meanwhile, and the
/// grant lands once the other write ends.
#[test]
fn a_grant_waiting_on_the_ledger_holds_no_sbalance() {
    let site = Site::start("", "");
    site.sbalance(Some("alice"), &["-n", "-P"]).ok();
    let ledger = site.path("lib/ledger.sqlite");
    let mut holder = Command::new("sqlite3")
        .arg(&ledger)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("sqlite3 (tests/cluster/install.sh installs it)");
    let mut stdin = holder.stdin.take().unwrap();
    // Waiting its turn if a cycle of serve's is writing just then.
    writeln!(stdin, ".timeout 10000").unwrap();
    writeln!(stdin, "BEGIN IMMEDIATE; INSERT INTO meta (key, value) VALUES ('test-hold', 'x');").unwrap();
    stdin.flush().unwrap();
    // The write lock is taken once the insert ran: a write of ours must now wait.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("sqlite3")
        .args([ledger.to_str().unwrap(), ".timeout 0", "BEGIN IMMEDIATE; ROLLBACK;"])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "sqlite3 never took the write lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let granting = {
        let (config, bin) = (site.config.clone(), crate::common::bin("accountd"));
        std::thread::spawn(move || {
            let args = ["--config", config.to_str().unwrap(), "admin", "grant", "bob", "5", "--reason", "t"];
            let out = Command::new(bin).args(args).output().unwrap();
            (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    for user in ["alice", "bob", "alice"] {
        let asked = Instant::now();
        let out = site.sbalance(Some(user), &["-n", "-P", "-o", "User"]);
        assert_eq!(out.stdout.trim(), user, "{}", out.stderr);
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{user}'s sbalance waited {:?} behind the grant",
            asked.elapsed()
        );
    }
    assert!(!granting.is_finished(), "the grant did not wait for the ledger: the test proves nothing");
    std::thread::sleep(Duration::from_secs(4));
    writeln!(stdin, "ROLLBACK;").unwrap();
    drop(stdin);
    holder.wait().unwrap();
    let (granted, stderr) = granting.join().unwrap();
    assert!(granted, "{stderr}");
    assert!(site.sbalance(Some("bob"), &["-n", "-P"]).ok().stdout.contains("|105|"));
}
