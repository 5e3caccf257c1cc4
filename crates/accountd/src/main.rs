#![forbid(unsafe_code)]

use std::process::ExitCode;

use accountd::answering::Answering;
use accountd::cli::admin;
use accountd::cli::{Cli, Command, ConfigCommand, TimeArg, WaitArg};
use accountd::cycles::lock::CycleLock;
use accountd::cycles::CycleState;
use accountd::cycles::{charge, check};
use accountd::daemon::file_trust::refuse_if_others_can_write;
use accountd::error::{AccountdError, AccountdResult};
use accountd::resources::Resources;
use accountd::slurm::{QueueOnce, Slurm};
use accountd::{http, socket};
use accountd::{out, outln};
use clap::Parser;
use gputokens::daemon::instance_lock::{self, InstanceLock};
use gputokens::Config;

fn main() -> ExitCode {
    let cli = Cli::parse();
    gputokens::daemon::logging::init();
    // Files accountd creates (ledger, snapshot temp files) start private.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o027));
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accountd: {e}");
            ExitCode::from(e.fault())
        }
    }
}

/// The config at `file` for `config check`: every problem of the file is reported, each on a line of
/// its own with its key, not only the first (a file that is not TOML at all is one problem); then
/// every warning, of the file as the lenient reader takes it (a bad key at its default).
fn checked_config(file: &std::path::Path) -> AccountdResult<Config> {
    let (config, problems) = Config::load_lenient(file);
    let mut problems: Vec<_> = problems.into_iter().map(|p| p.into_error()).collect();
    if problems.len() > 1 {
        for problem in &problems {
            eprintln!("accountd: {problem}");
        }
    }
    let whole_file = matches!(problems.first(), Some(gputokens::config::ConfigError::Parse { .. }));
    if problems.is_empty() {
        outln!("{}: valid", file.display());
        let accountd = gputokens_client::Accountd::of(&config, accountd::CLIENT_TIMEOUT);
        outln!("users' tools on this host ask accountd at {}: {}", accountd.describe(), accountd.proof());
        if let Some(tls) = &config.http.tls {
            outln!("accountd's listener (when it runs here) speaks TLS only, with {}", tls.certificate.display());
        }
        outln!("{}", ledger_line(&config));
        for difference in cluster_rule_differences(&config) {
            outln!("warning ([bucket], [clusters]): {difference}");
        }
    }
    if !whole_file {
        print_warnings(&config);
    }
    match problems.len() {
        0 => Ok(config),
        1 => Err(problems.remove(0).into()),
        n => Err(AccountdError::Refused(format!("{n} problems in {} (above)", file.display()))),
    }
}

/// Where the ledger is, and of a MariaDB ledger which accountd leads it (read as an admin).
fn ledger_line(config: &Config) -> String {
    let Some(url) = &config.ledger.url else {
        return format!("ledger: SQLite at {}", config.paths.ledger.display());
    };
    // Each cluster of a shared ledger has its own leader: this host's cluster's is the one named.
    let url = match config.clusters.local() {
        Some(cluster) => format!("{url} (cluster {cluster}'s cycles)"),
        None => url.clone(),
    };
    let read = tempfile::tempdir()
        .map_err(|e| AccountdError::Failed(e.to_string()))
        .and_then(|scratch| accountd::resources::read_only_ledger(config, None, scratch.path()))
        .and_then(|ledger| Ok(ledger.lease()?));
    match read {
        Ok(lease) if lease.left_ms > 0 => format!(
            "ledger: {url}, led by accountd {} (lease term {}, {:.1} s left)",
            lease.holder,
            lease.term,
            lease.left_ms as f64 / 1000.0
        ),
        Ok(lease) if lease.holder.is_empty() => format!("ledger: {url}; no accountd has led it yet"),
        Ok(lease) => format!(
            "ledger: {url}; no accountd leads it now (the lease of {} lapsed {:.1} s ago)",
            lease.holder,
            -lease.left_ms as f64 / 1000.0
        ),
        Err(e) => format!("ledger: {url}; who leads it cannot be read here: {e}"),
    }
}

/// Of a ledger several clusters share, each other cluster whose [bucket] rules differ from this
/// file's (as its accountd last recorded them); none where they cannot be read here.
fn cluster_rule_differences(config: &Config) -> Vec<String> {
    if config.clusters.names.len() < 2 {
        return Vec::new();
    }
    let Ok(scratch) = tempfile::tempdir() else { return Vec::new() };
    let Ok(ledger) = accountd::resources::read_only_ledger(config, None, scratch.path()) else { return Vec::new() };
    let rules = gputokens::policy::BucketRules::from(config);
    accountd::cycles::cluster_rules::differences(config, &ledger, &rules).unwrap_or_default()
}

/// `config check`'s warnings: valid settings that are likely not what the site meant.
fn print_warnings(config: &Config) {
    // Users and groups are looked up here only: the plugins read the same model inside slurmctld,
    // where a directory server must not be asked.
    let group_exists = |g: &str| nix::unistd::Group::from_name(g).ok().flatten().is_some();
    let host = gputokens::config::advice::host_advice(config, gputokens::access::system_user_exists, group_exists);
    // Preemption and drain from the first cycle are named to a site that has not run yet (no ledger).
    let first_week = match config.paths.ledger.exists() {
        false => gputokens::config::advice::first_week(config),
        true => Vec::new(),
    };
    for advice in gputokens::config::advice::advice(config).into_iter().chain(first_week).chain(host) {
        outln!("warning ({}): {}", advice.keys, advice.text);
    }
}

fn run(cli: Cli) -> AccountdResult {
    let path = Config::resolve_path(cli.config.as_deref());
    match cli.command {
        Command::Config(ConfigCommand::Check { file, slurm }) => {
            let file = file.unwrap_or(path);
            let config = checked_config(&file)?;
            if slurm {
                check_slurm(&config)?;
            }
            Ok(())
        }
        Command::Config(ConfigCommand::Default) => {
            out!("{}", gputokens::config::EXAMPLE);
            Ok(())
        }
        Command::Admin(command) => admin::run(&Config::load(&path)?, command),
        Command::Agent { args } => run_agent(cli.config.as_deref(), &args),
        Command::Serve => serve(&path, trusted_config(&path)?),
        Command::Tick { time, skip_charge, wait } => {
            let mut cycle = CycleState::new(Resources::open_as_admin(trusted_config(&path)?)?);
            let now = now(&time)?;
            // Held until the preemptions' grace is over: their requeues are part of this cycle.
            let lock = cycle_lock(&cycle.res, "accountd tick", &wait)?;
            let led = led_for_command(&mut cycle, "accountd tick")?;
            // One read of the queue for both: a tick is one moment of the site.
            let slurm = Slurm::of(&cycle.res.config);
            let mut queue = QueueOnce::new(&slurm);
            if !skip_charge {
                outln!("charge: {}", charge::charge(&mut cycle, &slurm, &mut queue, now)?);
            }
            let publish = |c: &CycleState, now| accountd::snapshot::publish(&c.res, &c.slurm_view, now);
            outln!("check: {}", check::check(&mut cycle, (&slurm, &mut queue), now, publish)?);
            cycle.finish_preemptions();
            if let Some(led) = led {
                led.stop();
            }
            // With the cycle lock released: serve's cycles never wait on the OnDemand file.
            drop(lock);
            if !accountd::ondemand::flush(std::time::Duration::from_secs(30)) {
                tracing::warn!(
                    "the OnDemand balance file was not written within 30 s: the dashboard keeps the last one"
                );
            }
            Ok(())
        }
        Command::Charge { sacct_file, time, wait } => {
            let mut cycle = CycleState::new(Resources::open_as_admin(trusted_config(&path)?)?);
            let lock = cycle_lock(&cycle.res, "accountd charge", &wait)?;
            let led = led_for_command(&mut cycle, "accountd charge")?;
            outln!("{}", accountd::cli::sacct_file::charge(&mut cycle, &sacct_file, now(&time)?)?);
            if let Some(led) = led {
                led.stop();
            }
            drop(lock);
            accountd::ondemand::flush(std::time::Duration::from_secs(30));
            Ok(())
        }
    }
}

/// On a MariaDB ledger (which a pair of serves may share), the lease for a command that runs the
/// cycles' work: refused while a serve leads. A SQLite ledger's cycle lock is enough.
fn led_for_command(cycle: &mut CycleState, what: &str) -> AccountdResult<Option<accountd::leadership::Leadership>> {
    if cycle.res.config.ledger.url.is_none() {
        return Ok(None);
    }
    let keeper = cycle.res.reopen()?;
    Ok(Some(accountd::leadership::Leadership::for_command(keeper, &mut cycle.res, what)?))
}

/// `accountd agent ARGS…` of 0.1.0: `gputokens-agent ARGS…`, the program beside this one (both in
/// /usr/bin), in place of this process.
fn run_agent(config: Option<&std::path::Path>, args: &[std::ffi::OsString]) -> AccountdResult {
    use std::os::unix::process::CommandExt;
    let beside = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join("gputokens-agent")));
    let program = beside.filter(|p| p.is_file()).unwrap_or_else(|| "gputokens-agent".into());
    tracing::warn!(
        "`accountd agent` is now `gputokens-agent` (package gputokens-agent): running {}; change the unit or \
         script that runs `accountd agent`",
        program.display()
    );
    let mut command = std::process::Command::new(&program);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let e = command.args(args).exec();
    Err(AccountdError::Refused(format!(
        "cannot run {} ({e}): the node agent is the gputokens-agent package since 0.2.0; install it",
        program.display()
    )))
}

/// The config of a command that acts on it (serve, tick, charge): refused when users other
/// than root and accountd's own could have written it, or the snapshot's directory.
fn trusted_config(path: &std::path::Path) -> AccountdResult<Config> {
    refuse_if_others_can_write(path, "the config file", None)?;
    let config = Config::load(path)?;
    if let Some(dir) = config.paths.snapshot.parent().filter(|d| !d.as_os_str().is_empty()) {
        refuse_if_others_can_write(dir, "the balance snapshot's directory", Some(&config.slurm_user))?;
    }
    Ok(config)
}

/// The cycle lock for an admin's command, waiting for a running cycle as long as `--wait` says;
/// says on stderr whom it waited for.
fn cycle_lock(res: &Resources, what: &str, wait: &WaitArg) -> AccountdResult<CycleLock> {
    let lock = CycleLock::acquire(&res.config.paths.ledger, what, wait.wait)?;
    if let Some(note) = lock.waited_note() {
        tracing::info!("{note}");
    }
    Ok(lock)
}

/// Prints what `slurm_check` finds; exit 2 when it finds a problem.
fn check_slurm(config: &Config) -> AccountdResult {
    let with_qos = matches!(config.admission.deprioritize, gputokens::config::admission::Deprioritize::Qos(_));
    let slurm = Slurm::of(config);
    let mut facts = accountd::slurm_check::SlurmFacts::read(&slurm, with_qos, &config.paths.controller_status)?;
    if config.accounts.mode != gputokens::pools::PoolMode::User {
        facts.accounts = Some(account_facts(config, &slurm));
    }
    let findings = accountd::slurm_check::findings(config, &facts, |p| p.is_file());
    for finding in &findings {
        outln!("slurm: {finding}");
    }
    outln!("{}", answers_from_here(config));
    let problems = findings.iter().filter(|f| matches!(f, accountd::slurm_check::Finding::Problem(_))).count();
    match problems {
        0 => Ok(()),
        n => Err(AccountdError::Refused(format!("{n} problem(s) in Slurm's configuration for gputokens"))),
    }
}

/// Whether accountd answers users' tools from this host, to whom, and how the caller was proven: a
/// login node's config check. Not a problem of Slurm's configuration when it does not (accountd may
/// not run yet while a site is set up).
fn answers_from_here(config: &Config) -> String {
    use gputokens::protocol::{Reply, Request};
    let accountd = gputokens_client::Accountd::of(config, accountd::CLIENT_TIMEOUT);
    match accountd.call(&Request::Balances { users: Vec::new(), all: false }) {
        Ok(Reply::Balances { rows, .. }) => {
            let who = rows.first().map_or("you".to_string(), |r| r.user.clone());
            format!(
                "accountd: ok: answers from this host at {}, to {who}, proven by {}",
                accountd.describe(),
                accountd.proof()
            )
        }
        Ok(other) => format!("accountd: warning: unexpected reply at {}: {other:?}", accountd.describe()),
        Err(e) => format!("accountd: warning: does not answer from this host: {e}"),
    }
}

/// Slurm's accounts (sacctmgr) and the pools accountd serve shows the caller, each or why not.
fn account_facts(config: &Config, slurm: &Slurm) -> accountd::slurm_check::pools::AccountFacts {
    use gputokens::protocol::{Reply, Request};
    let slurm_accounts = slurm.account_tree().map(|t| t.members.into_keys().collect()).map_err(|e| e.to_string());
    let pools = match gputokens_client::Accountd::of(config, accountd::CLIENT_TIMEOUT)
        .call(&Request::Pools { account: None })
    {
        Ok(Reply::Pools { rows, .. }) => Ok(rows.into_iter().map(|r| r.account).collect()),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    };
    accountd::slurm_check::pools::AccountFacts { slurm_accounts, pools }
}

fn now(time: &TimeArg) -> AccountdResult<i64> {
    accountd::cli::now_arg::resolve(time.now.as_deref(), gputokens::time::now())
}

/// Descriptors besides the listeners' connections: the ledger, logs, munged, Slurm commands' pipes.
const OTHER_OPEN_FILES: u64 = 64;

fn serve(path: &std::path::Path, config: Config) -> AccountdResult {
    let socket = config.paths.socket.clone();
    let http_listen = config.http_listen;
    let limits = config.http.clone();
    // Before anything is opened or bound: a second serve must leave the running one's socket alone.
    socket::make_socket_dir(&socket)
        .map_err(AccountdError::io(format!("cannot create the directory of {}", socket.display())))?;
    let _socket_lock = InstanceLock::acquire(
        &instance_lock::beside(&socket),
        &format!("accountd serve with socket {}", socket.display()),
    )?;
    // The HTTP address before the socket, for the same reason: one taken fails this serve alone.
    let tcp = http_listen.map(bind_http).transpose()?;
    gputokens::daemon::conn_caps::raise_open_file_limit(
        (limits.max_connections + socket::MAX_CONNECTIONS) as u64 + OTHER_OPEN_FILES,
        "raise LimitNOFILE in accountd's unit or lower [http] max_connections",
    );
    let ledger = config.paths.ledger.clone();
    let ledger_shown = config.ledger.url.clone().unwrap_or_else(|| ledger.display().to_string());
    // Opening the ledger (which makes its directory as it should be) changes nothing another serve
    // would notice; two serves must not run cycles on one ledger, though.
    let answering = Answering::new(Resources::open_as_admin(config)?)?;
    let _ledger_lock = InstanceLock::acquire(
        &instance_lock::beside(&ledger),
        &format!("accountd serve with ledger {}", ledger.display()),
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AccountdError::io("cannot start the runtime"))?;
    // The listener's certificate and key read before anything is bound: a mistake in either stops
    // serve with its name, and leaves no socket behind.
    let tls = match &limits.tls {
        Some(files) => Some(http::tls::acceptor(files).map_err(AccountdError::Refused)?),
        None => None,
    };
    runtime.block_on(async {
        let listener =
            socket::bind(&socket).map_err(AccountdError::io(format!("cannot listen on {}", socket.display())))?;
        tracing::info!(
            "accountd {} with config {} and ledger {}: listening on {}",
            accountd::version(),
            path.display(),
            ledger_shown,
            socket.display()
        );
        let shared = std::sync::Arc::new(std::sync::Mutex::new(answering));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        // Of a pair on one MariaDB ledger, the one holding the lease runs the cycles (at once when
        // it comes to lead) and writes the snapshot; on SQLite this one always does. Known before
        // any listener answers: a follower's change must not write the snapshot.
        let lead = std::sync::Arc::new(tokio::sync::Notify::new());
        let leadership = {
            let answering = accountd::answering::lock(&shared);
            let leadership = match answering.res.config.ledger.url {
                None => {
                    answering.res.metrics.leading.set(1);
                    accountd::leadership::Leadership::sole()
                }
                Some(_) => {
                    let lead = lead.clone();
                    let keeper = answering.res.reopen()?;
                    accountd::leadership::Leadership::start(keeper, answering.publisher.clone(), move || {
                        lead.notify_one()
                    })
                }
            };
            let asked = leadership.clone();
            answering.publisher.only_while(std::sync::Arc::new(move || asked.leading()));
            leadership
        };
        if let Some(tcp) = tcp {
            let tcp = tokio::net::TcpListener::from_std(tcp).map_err(AccountdError::io("http listener"))?;
            let bound = tcp.local_addr().map_err(AccountdError::io("http listener"))?;
            let scheme = if limits.tls.is_some() { "https" } else { "http" };
            tracing::info!("metrics and JSON API on {scheme}://{bound}");
            accountd::answering::lock(&shared).http_address = Some(bound);
            let state = http::AppState::new(shared.clone())?;
            let metrics = state.metrics();
            let app = http::router(state);
            let stopped = stopped.clone();
            tokio::spawn(
                async move { accountd::http::listener::serve(tcp, app, &limits, metrics, tls, stopped).await },
            );
        }
        let cycles = accountd::cycles::serve::Cycles::open(&shared, leadership.clone())?;
        let journal = accountd::answering::lock(&shared).res.reopen()?;
        let every = journal.config.intervals.check;
        accountd::admin_journal::start_exporter(journal, every)
            .map_err(AccountdError::io("cannot start the admin journal's exporter"))?;
        socket::launch(listener, shared.clone(), cycles, lead, gputokens::daemon::signals::shutdown_signal()).await;
        leadership.stop();
        let _ = stop.send(true);
        let _ = std::fs::remove_file(&socket);
        Ok(())
    })
}

/// Binds accountd's HTTP address; one in use is refused naming the process that holds it.
fn bind_http(addr: std::net::SocketAddr) -> AccountdResult<std::net::TcpListener> {
    Ok(gputokens::daemon::port_owner::bind_tcp(addr, "http")?)
}
