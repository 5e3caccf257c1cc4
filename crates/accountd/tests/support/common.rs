//! Shared helpers: a private gputokens site (config, ledger, `accountd serve`) in a temp dir, and
//! running the real binaries as root or as the non-root test users.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// The seed's prices; everything else at its documented default unless a test says otherwise.
pub const PRICES: &str = "[prices]
rtx2080 = 0.5
rtx3090 = 1
a6000 = 4
";

/// Where the gputokens package put accountd and sbalance (tests/run.sh installs it and sets this
/// to /usr/bin): when set, the tests run the installed commands instead of the build's.
pub const INSTALLED_BIN_DIR: &str = "GPUTOKENS_INSTALLED_BIN_DIR";

/// The commands the gputokens package installs.
const PACKAGED_COMMANDS: [&str; 3] = ["accountd", "sbalance", "gputokens-agent"];

/// A built file of the workspace (`cargo build --workspace` puts them next to this test).
pub fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(path.exists(), "{} not built: run `cargo build --workspace` first", path.display());
    path
}

/// Where tests/run.sh built the Slurm plugins for the release under test (their own build in that
/// release's root filesystem); unset, they are the workspace's.
pub const PLUGIN_BUILD_DIR: &str = "GPUTOKENS_PLUGIN_BUILD_DIR";

/// The plugins, built against one Slurm release's headers.
const PLUGIN_FILES: [&str; 2] = ["libjob_submit_gputokens.so", "libspank_gputokens.so"];

/// A binary under test: accountd and sbalance from `$GPUTOKENS_INSTALLED_BIN_DIR` when it is set;
/// the plugins from `$GPUTOKENS_PLUGIN_BUILD_DIR` when that is set; anything else (the fake NVML
/// library), and all of them when neither is, from the build.
pub fn bin(name: &str) -> PathBuf {
    match std::env::var_os(INSTALLED_BIN_DIR) {
        _ if PLUGIN_FILES.contains(&name) && std::env::var_os(PLUGIN_BUILD_DIR).is_some() => {
            let path = PathBuf::from(std::env::var_os(PLUGIN_BUILD_DIR).unwrap()).join(name);
            assert!(path.is_file(), "{} is not built (${PLUGIN_BUILD_DIR}): run tests/run.sh", path.display());
            path
        }
        Some(dir) if PACKAGED_COMMANDS.contains(&name) => {
            let path = PathBuf::from(dir).join(name);
            assert!(
                path.is_file(),
                "{} is not installed (${INSTALLED_BIN_DIR}): install the gputokens package",
                path.display()
            );
            path
        }
        _ => built(name),
    }
}

/// The sbalance under test: the installed one with `$GPUTOKENS_INSTALLED_BIN_DIR`, else
/// `$GPUTOKENS_SBALANCE` (the statically linked build the README installs by hand), else the
/// workspace's own.
pub fn sbalance_bin() -> PathBuf {
    match (std::env::var_os(INSTALLED_BIN_DIR), std::env::var_os("GPUTOKENS_SBALANCE")) {
        (Some(_), _) => bin("sbalance"),
        (None, Some(path)) => PathBuf::from(path),
        (None, None) => bin("sbalance"),
    }
}

/// The non-root users the tests act as (tests/cluster/up.sh creates them too).
pub fn ensure_test_users() {
    static USERS: Once = Once::new();
    USERS.call_once(|| {
        for user in ["alice", "bob", "carol"] {
            let known = Command::new("id").arg("-u").arg(user).output().map(|o| o.status.success()).unwrap_or(false);
            if !known {
                let status = Command::new("useradd").args(["-m", "-s", "/bin/bash", user]).status().expect("useradd");
                assert!(status.success(), "useradd {user} failed");
            }
        }
    });
}

#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Outcome {
    fn from(o: Output) -> Self {
        Outcome {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Outcome {
    #[track_caller]
    pub fn ok(self) -> Outcome {
        assert_eq!(self.code, 0, "command failed:\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        self
    }
}

/// Runs `program args` as `user` (None = root, the test's own user).
pub fn run_as(user: Option<&str>, program: &Path, args: &[&str]) -> Outcome {
    let mut cmd = match user {
        None => Command::new(program),
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--"]).arg(program);
            c
        }
    };
    cmd.args(args).env_remove("GPUTOKENS_CONF").current_dir("/tmp").stdin(Stdio::null());
    cmd.output().expect("spawn").into()
}

/// A site's directory: open to every user, as /var/lib is (accountd sets the modes below it).
fn site_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("gputokens-it-").tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    dir
}

/// A gputokens site of its own: config, ledger and socket in a temp dir, `accountd serve` running.
pub struct Site {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    serve: Option<Child>,
}

impl Site {
    /// Writes a config (`top` keys, the seed's PRICES, `tables`, the site's paths) and starts
    /// `accountd serve`.
    pub fn start(top: &str, tables: &str) -> Site {
        Site::with_prices(top, PRICES, tables)
    }

    /// Like `start`, with a `[prices]` table of the test's own.
    pub fn with_prices(top: &str, prices: &str, tables: &str) -> Site {
        let dir = site_dir();
        let d = dir.path().display();
        // Sites charge from the real cluster only when a test asks: otherwise its jobs would leak in.
        let mut slurm =
            if tables.contains("[slurm]") { String::new() } else { format!("[slurm]\nbin_dir = \"{d}/no-slurm\"\n") };
        // Parallel sites each get a free port; `http_url` reads it from the log.
        if !tables.contains("[http]") {
            slurm.push_str("[http]\nlisten = \"127.0.0.1:0\"\n");
        }
        let text = format!(
            "{top}\n{prices}{tables}\n{slurm}[paths]\nledger = \"{d}/lib/ledger.sqlite\"\nsnapshot = \"{d}/lib/balances.snapshot\"\nsocket = \"{d}/run/accountd.sock\"\n"
        );
        Site::serve(dir, &text)
    }

    /// A site whose config is `text` with its `[paths]` values moved into the site's dir and the
    /// HTTP listener on a free port: e.g. the example config as shipped.
    pub fn from_config(text: &str) -> Site {
        let dir = site_dir();
        let d = dir.path().display();
        let moved: Vec<String> = text
            .lines()
            .map(|line| match line.split_once(" = ").map(|(key, _)| key.trim()) {
                Some("ledger") => format!("ledger = \"{d}/lib/ledger.sqlite\""),
                Some("snapshot") => format!("snapshot = \"{d}/lib/balances.snapshot\""),
                Some("socket") => format!("socket = \"{d}/run/accountd.sock\""),
                Some("listen") if line.contains(":9817") => "listen = \"127.0.0.1:0\"".to_string(),
                _ => line.to_string(),
            })
            .collect();
        Site::serve(dir, &moved.join("\n"))
    }

    fn serve(dir: tempfile::TempDir, text: &str) -> Site {
        ensure_test_users();
        let config = dir.path().join("gputokens.toml");
        std::fs::write(&config, text).unwrap();
        let serve = spawn_serve(&config, &dir.path().join("serve.log"), None);
        let site = Site { config, serve: Some(serve), dir };
        site.wait_for_socket();
        site.wait_for_startup_check();
        site
    }

    /// Stops `accountd serve` (if it runs) and starts another on the same config and ledger, as after a reboot.
    /// The old log is kept as `serve.log.old` (appended to), so `log` and `http_url` read the new one.
    pub fn restart(&mut self) {
        self.restart_at(None);
    }

    /// `restart`, with the new serve's clock set back to `at` (local `YYYY-MM-DDTHH:MM:SS`, from where
    /// it runs on) by libfaketime: for what must have happened before a day the test cannot wait for.
    pub fn restart_at(&mut self, at: Option<&str>) {
        if self.serve.is_some() {
            self.stop();
        }
        let old = std::fs::read_to_string(self.path("serve.log")).unwrap_or_default();
        let mut kept = std::fs::OpenOptions::new().create(true).append(true).open(self.path("serve.log.old")).unwrap();
        std::io::Write::write_all(&mut kept, old.as_bytes()).unwrap();
        // The socket of the stopped serve may still be there: wait for the new one's.
        let _ = std::fs::remove_file(self.path("run/accountd.sock"));
        self.serve = Some(spawn_serve(&self.config, &self.path("serve.log"), at));
        self.wait_for_socket();
        self.wait_for_startup_check();
    }

    /// The PID of the running `accountd serve`.
    pub fn pid(&self) -> u32 {
        self.serve.as_ref().expect("serve running").id()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn wait_for_socket(&self) {
        let socket = self.path("run/accountd.sock");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "accountd serve did not start: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Serve runs a check cycle (replenishment included) as it starts: on a site without Slurm it
    /// ends in milliseconds, and a test's first entries must come after it, or a loaded machine
    /// replenishes days the test put in the past (a cluster site's cycles are the test's own to wait on).
    fn wait_for_startup_check(&self) {
        let config = std::fs::read_to_string(&self.config).unwrap_or_default();
        if !config.contains("/no-slurm\"") {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log().lines().any(|l| {
            l.contains("check cycle (") || l.contains("check cycle failed") || l.contains("check cycle skipped")
        }) {
            assert!(Instant::now() < deadline, "serve's first check cycle did not end: {}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGTERM to `accountd serve` and returns its exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.serve.take().expect("serve running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        child.wait().unwrap()
    }

    /// Base URL of the site's HTTP listener, from serve's log line.
    pub fn http_url(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(url) = self.log().lines().find_map(|l| l.split("JSON API on ").nth(1)) {
                return url.trim().to_string();
            }
            assert!(Instant::now() < deadline, "no http listener in the log: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("serve.log")).unwrap_or_default()
    }

    /// `accountd --config <site> args...` as `user`.
    pub fn accountd(&self, user: Option<&str>, args: &[&str]) -> Outcome {
        let mut all = vec!["--config", self.config.to_str().unwrap()];
        all.extend_from_slice(args);
        run_as(user, &bin("accountd"), &all)
    }

    /// `sbalance --config <site> args...` as `user`.
    pub fn sbalance(&self, user: Option<&str>, args: &[&str]) -> Outcome {
        let mut all = vec!["--config", self.config.to_str().unwrap()];
        all.extend_from_slice(args);
        run_as(user, &sbalance_bin(), &all)
    }

    /// Writes `text` to a file in the site dir readable by everyone, returns its path.
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// `user`'s history rows (sbalance -P), as the user asks: kind, amount, job, reason.
    pub fn history_rows(&self, user: &str) -> Vec<(String, String, String, String)> {
        let out = self.sbalance(Some(user), &["--history", "100", "-P", "-n"]).ok().stdout;
        out.lines()
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f[1].to_string(), f[2].to_string(), f[4].to_string(), f[5..].join("|"))
            })
            .collect()
    }

    /// The Balance column of `sbalance -u USER -P -n`, asked as root.
    pub fn balance(&self, user: &str) -> String {
        let out = self.sbalance(None, &["-u", user, "-P", "-n", "-o", "Balance"]).ok();
        out.stdout.trim().to_string()
    }
}

/// `accountd --config CONFIG serve`, logging at debug level to `log` (truncated).
fn spawn_serve(config: &Path, log: &Path, clock_at: Option<&str>) -> Child {
    let log = std::fs::File::create(log).unwrap();
    let mut serve = Command::new(bin("accountd"));
    serve.arg("--config").arg(config).arg("serve").env("GPUTOKENS_LOG", "debug");
    if let Some(at) = clock_at {
        // The wall clock only: tokio's timers keep the real monotonic one.
        serve
            .env("LD_PRELOAD", faketime_library())
            .env("FAKETIME", format!("@{}", at.replace('T', " ")))
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    serve.stdout(Stdio::null()).stderr(log).spawn().expect("start accountd serve")
}

/// libfaketime's library for threaded programs (tests/cluster/install.sh installs it).
fn faketime_library() -> PathBuf {
    let dirs = std::fs::read_dir("/usr/lib").unwrap().filter_map(|e| e.ok()).map(|e| e.path());
    dirs.map(|d| d.join("faketime/libfaketimeMT.so.1"))
        .find(|lib| lib.is_file())
        .expect("libfaketime is not installed (bash tests/cluster/install.sh installs it)")
}

/// A plain HTTP/1.0 GET: status code and body.
pub fn http_get(url: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, body.to_string())
}

impl Drop for Site {
    fn drop(&mut self) {
        if let Some(mut child) = self.serve.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }
}
