//! Every key of gputokens.toml with its default and meaning: the one source of the key reference
//! (the gputokens.toml(5) man page and docs/configuration.md are generated from it by
//! `gputokens-dist`). Its tests hold it to the reader: every key the reader asks for is here and
//! nothing else, and every default written here reads as the reader's own default.

/// A table of the file; `name` is "" for the top level.
pub struct Table {
    pub name: &'static str,
    pub about: &'static str,
    pub keys: &'static [Key],
}

pub struct Key {
    /// The key's name in its table; `TYPE` in `[prices]` stands for any GPU type.
    pub name: &'static str,
    pub default: Default,
    pub meaning: &'static str,
}

pub enum Default {
    /// The default as a TOML value: writing `key = <this>` changes nothing.
    Toml(&'static str),
    /// A default no single value states (off, found elsewhere, derived from another key).
    Words(&'static str),
}

impl Default {
    /// As the reference shows it.
    pub fn shown(&self) -> &'static str {
        match self {
            Default::Toml(value) | Default::Words(value) => value,
        }
    }
}

impl Table {
    /// `[name]`, or "top level".
    pub fn heading(&self) -> String {
        match self.name {
            "" => "top level".to_string(),
            name => format!("[{name}]"),
        }
    }

    /// A key's name as the file's dotted path (`paths.ledger`).
    pub fn dotted(&self, key: &Key) -> String {
        match self.name {
            "" => key.name.to_string(),
            table => format!("{table}.{}", key.name),
        }
    }
}

use Default::{Toml, Words};

const fn key(name: &'static str, default: Default, meaning: &'static str) -> Key {
    Key { name, default, meaning }
}

pub const TABLES: &[Table] = &[
    Table {
        name: "",
        about: "Users' buckets, prices outside [prices], who is an admin.",
        keys: &[
            key("initial", Toml("100"), "Balance of a user the first time gputokens sees them."),
            key("daily", Toml("1"), "Added to every balance once per local day (at midnight)."),
            key("monthly", Toml("30"), "Added on the 1st of every month; 0 turns it off."),
            key(
                "cap",
                Words("none"),
                "Replenishment (daily, monthly) never raises a balance above it; charges and admin grants are not limited.",
            ),
            key(
                "floor",
                Toml("-10"),
                "At or below it new GPU jobs are refused; below 0 they are deprioritized. Must be 0 or below.",
            ),
            key(
                "default_price",
                Words("none"),
                "Tokens per GPU-hour of a GPU type missing from [prices]. Unset: the highest listed price; with no [prices] at all, 1.",
            ),
            key("balances_public", Toml("false"), "true: every user may see every balance (sbalance -a); false: users see only their own."),
            key(
                "borrow_limit",
                Toml("0"),
                "Tokens a user may borrow against next month's grant (sbalance --borrow N), at most `monthly`; repaid from that grant on the 1st. 0: no borrowing.",
            ),
            key(
                "forgive_below",
                Toml("0"),
                "At the month's turn a user's debt smaller than this is forgiven (raised to 0, journaled). 0: none.",
            ),
            key("slurm_user", Toml("\"slurm\""), "The SlurmUser of slurm.conf; it may run admin commands like root."),
        ],
    },
    Table {
        name: "prices",
        about: "Tokens per GPU-hour by the GPU type of gres.conf's Type=.",
        keys: &[
            key(
            "TYPE",
            Words("none"),
            "The price of GPU type TYPE (e.g. a6000 = 4), matched case-insensitively; 0 or more, at most 6 decimals. No [prices] at all is a warning: every GPU then costs default_price, else 1. A MIG slice type (a100_3g.20gb) without a line of its own costs its GPU type's price times its share of the GPU (3/7); a line for it, quoted (\"a100_3g.20gb\" = 1), wins.",
        ),
        key(
            "per_kwh",
            Words("none"),
            "Tokens per kWh of GPU energy, charged on top of GPU-hours: each job's share of its GPUs' NVML energy counters, as node agents report them (no agents, or a MIG GPU: no energy, no energy charge). Unset or 0: energy is measured and shown, never charged; what was measured while it was unset is never charged later.",
        ),
        key(
            "stranded",
            Toml("[]"),
            "Prices a GPU job by the larger of its own GPUs and its share of its nodes' GPUs, its share counted by what it holds of the nodes' \"cpus\" and/or \"memory\" (the larger): a job of 1 GPU and every CPU of an 8-GPU node pays for 8 GPUs, each type at its price (as Slurm's PriorityFlags=MAX_TRES bills). The charge stays on the job's own GPU types, their prices scaled alike, and its reason says which part priced it. Memory counts only where Slurm allocates it (CR_*_Memory). [] (the default): off.",
        ),
    ],
    },
    Table {
        name: "paths",
        about: "Where accountd keeps its state; every path absolute, no two the same or one inside another.",
        keys: &[
            key("ledger", Toml("\"/var/lib/gputokens/ledger.sqlite\""), "The SQLite ledger, mode 0600: every balance and entry."),
            key(
                "snapshot",
                Toml("\"/var/lib/gputokens/balances.snapshot\""),
                "The balance snapshot the job_submit plugin decides from. With a backup controller, on storage both controller hosts share.",
            ),
            key(
                "controller_status",
                Words("controllers/ beside the snapshot"),
                "Where each slurmctld's plugin writes <host>.json every 10 s (what it decides from; shadow-mode counts). Writable by the SlurmUser; never created by the plugin.",
            ),
            key(
                "socket",
                Toml("\"/run/gputokens/accountd.sock\""),
                "The Unix socket sbalance and accountd admin reach the daemon on (at most 107 bytes).",
            ),
            key(
                "admin_journal",
                Words("admin-journal.jsonl beside the ledger"),
                "Every admin change to balances, a JSON line each, for accountd admin journal-check after a restore. Put it on other storage than the ledger.",
            ),
        ],
    },
    Table {
        name: "admins",
        about: "Besides root and slurm_user, who may change balances and read every history.",
        keys: &[
            key("users", Toml("[]"), "User names of further admins."),
            key("groups", Toml("[]"), "Groups whose members are admins."),
        ],
    },
    Table {
        name: "intervals",
        about: "How often accountd's cycles run (durations: \"30s\", \"10m\", \"1h\", \"1d\").",
        keys: &[
            key("charge", Toml("\"1h\""), "Running and finished jobs are charged this often."),
            key(
                "check",
                Toml("\"30m\""),
                "Replenishment, the snapshot, holds, preemption and health run this often. Keep it below [admission] max_snapshot_age.",
            ),
        ],
    },
    Table {
        name: "slurm",
        about: "How accountd runs Slurm's commands.",
        keys: &[
            key("bin_dir", Words("found on PATH"), "Directory of sacct, squeue, sinfo, scontrol, sacctmgr and scancel."),
            key(
                "first_lookback",
                Toml("\"1d\""),
                "How far back the very first charge cycle reads sacct; runs that ended before it began are never charged.",
            ),
            key(
                "reread",
                Toml("\"1h\""),
                "Each cycle re-reads sacct this far back for records slurmdbd stored late (never double-charging). Keep it above [intervals] charge.",
            ),
            key("sacct_timeout", Toml("\"5m\""), "How long sacct may run before it is killed and the cycle fails (it is read again next cycle)."),
            key("command_timeout", Toml("\"60s\""), "The same for squeue, scontrol, sinfo, sacctmgr and scancel."),
        ],
    },
    Table {
        name: "http",
        about: "accountd's HTTP listener: /metrics, the JSON API, the status page and the agents' reports.",
        keys: &[
            key(
                "listen",
                Toml("\"127.0.0.1:9817\""),
                "Address and port, or \"off\". Agents on other hosts must reach it: set a routable address when they report.",
            ),
            key(
                "per_user_metrics",
                Toml("false"),
                "Series naming users, jobs and pools in /metrics (off: Prometheus endpoints are often readable by the whole network).",
            ),
            key(
                "admin_token_file",
                Words("none"),
                "A root-only file with a bearer token that reads the JSON API as an admin (from this host or a trusted proxy).",
            ),
            key("max_connections", Toml("1024"), "Connections held at once; at the cap an idle one is shed for the new one."),
            key("max_connections_per_address", Toml("64"), "Connections held at once from one address."),
            key(
                "request_timeout",
                Toml("\"30s\""),
                "Time to read a request's body and answer (headers: 5 s, or this when shorter).",
            ),
            key(
                "server_names",
                Toml("[]"),
                "DNS aliases of this host that the listener answers to besides its addresses, localhost, its host name and [web] url's host; other names get 421.",
            ),
            key(
                "tls_certificate",
                Words("none"),
                "The listener's certificate chain (PEM); with tls_key it speaks TLS only (users' tools on other hosts, the status page).",
            ),
            key("tls_key", Words("none"), "The certificate's private key (PEM), in a file only accountd's user reads."),
            key(
                "remote_writes",
                Toml("false"),
                "Take requests that change balances (admins', coordinators') from other hosts too; off: only on accountd's own host, over its socket.",
            ),
        ],
    },
    Table {
        name: "ledger",
        about: "Which database holds the ledger: the SQLite file at paths.ledger, or a database of the site's MariaDB (the one slurmdbd uses will do, with its own database and user), where two accountd hosts can share it.",
        keys: &[
            key(
                "url",
                Words("none: SQLite at paths.ledger"),
                "mysql://USER@HOST[:PORT]/DATABASE, or mysql://USER@localhost/DATABASE?socket=/run/mysqld/mysqld.sock. accountd makes the tables on first start (the user needs CREATE, INDEX, TRIGGER on the database); no password here.",
            ),
            key(
                "password_file",
                Words("none"),
                "The MariaDB user's password, the file's first line; a file only accountd's user reads (mode 0600 or 0640, root's or its own).",
            ),
        ],
    },
    Table {
        name: "clusters",
        about: "Several Slurm clusters charged to one balance per person: each cluster runs its own accountd (or pair) on the one MariaDB ledger, with this table the same on all but `local`.",
        keys: &[
            key(
                "names",
                Toml("[]"),
                "Every cluster charging the ledger, as Slurm names them; the first is the one that charged it alone before (its job keys stay bare IDs, the others' are CLUSTER:ID). Never reorder it.",
            ),
            key("local", Words("the first of names"), "This host's cluster (its slurm.conf ClusterName)."),
        ],
    },
    Table {
        name: "accountd",
        about: "Where users' tools reach accountd from hosts without its socket (login and compute nodes): sbalance, sbatch's balance line, --web.",
        keys: &[
            key(
                "urls",
                Toml("[]"),
                "accountd's [http] listener as every host reaches it: [\"https://HOST:PORT\"], a second for a pair; the same line on every host.",
            ),
            key("ca_file", Words("the public CAs"), "The CA certificates (PEM) accountd's certificate is checked against."),
        ],
    },
    Table {
        name: "web",
        about: "The status page (/web/ on the [http] listener), opened with sbalance --web.",
        keys: &[
            key("url", Words("none"), "The https:// address of a TLS proxy in front of the listener, put in login links."),
            key(
                "allow_http",
                Toml("false"),
                "Make plain-http links when url is unset (the session cookie then travels in clear).",
            ),
            key("link_ttl", Toml("\"5m\""), "How long a login link works (once)."),
            key("session_ttl", Toml("\"8h\""), "How long a browser stays logged in (a restart of accountd logs out)."),
            key(
                "trusted_proxies",
                Toml("[]"),
                "Addresses of a login proxy (Open OnDemand, Apache, nginx) whose user_header names the user, with the secret of proxy_secret_file.",
            ),
            key("user_header", Toml("\"X-Remote-User\""), "The header a trusted proxy names the user in."),
            key(
                "proxy_secret_file",
                Words("none"),
                "A root-only file with the secret a trusted proxy sends as X-Gputokens-Proxy-Secret.",
            ),
        ],
    },
    Table {
        name: "ondemand",
        about: "Open OnDemand's balance file (off unless the table is there).",
        keys: &[
            key("balance_file", Words("required"), "The JSON file OnDemand's dashboard reads (OOD_BALANCE_PATH), written each check cycle."),
            key("group", Words("none"), "The group that may read it (mode 0640): every OnDemand user."),
            key("world_readable", Toml("false"), "true: everyone may read it (mode 0644). Else group is needed."),
            key("unit", Toml("\"GPU tokens\""), "The unit the dashboard names."),
            key("project_type", Toml("\"account\""), "What a pool's entry is called (its Slurm account)."),
        ],
    },
    Table {
        name: "agent",
        about: "The NVML node agent, gputokens-agent, on every GPU node.",
        keys: &[
            key(
                "report_to",
                Toml("\"http://127.0.0.1:9817\""),
                "accountd's [http] listen address as the nodes reach it: http://HOST[:PORT], or https:// where it has a certificate (checked against [accountd] ca_file); without a port, the scheme's. A pair's two: [\"http://ctl1:9817\", \"http://ctl2:9817\"] (the next is tried when one cannot be connected to, and kept while it answers).",
            ),
            key("interval", Toml("\"30s\""), "How often the agent samples and reports."),
            key("nvml_library", Toml("\"libnvidia-ml.so.1\""), "The NVML library the agent loads (the NVIDIA driver's)."),
            key(
                "jobs_dir",
                Toml("\"/run/gputokens/jobs\""),
                "Where spank_gputokens.so's prolog records each job's GPUs on the node (its jobs_dir= plugstack argument).",
            ),
            key("listen", Toml("\"127.0.0.1:9818\""), "The agent's own /metrics, or \"off\"."),
            key(
                "per_job_metrics",
                Toml("false"),
                "Per-job series (gputokens_agent_job_*{job,node}) on the agent's /metrics, which every user on the node can read; per-GPU series are always there.",
            ),
            key(
                "auth",
                Toml("\"munge\""),
                "How a report proves its node: \"munge\" (a MUNGE credential, as Slurm's daemons) or \"token\" (signed with the node's token from token_file).",
            ),
            key("munge_socket", Words("libmunge's default"), "munged's socket."),
            key(
                "token_file",
                Words("none"),
                "With auth = \"token\": on accountd's host the site secret, on a node its token (accountd admin node-token NODE); mode 0600.",
            ),
            key(
                "accept_unchecked_origin",
                Toml("false"),
                "Take a MUNGE report whose origin address cannot be compared with the node's.",
            ),
            key(
                "unscheduled_gpus",
                Toml("0"),
                "GPUs a node shows beyond its Slurm Gres (one out of gres.conf, a display GPU): a report may name this many more.",
            ),
        ],
    },
    Table {
        name: "usage",
        about: "GPU utilization: where it comes from, how it weighs charges, idle jobs.",
        keys: &[
            key("source", Toml("\"agents\""), "\"agents\" (gputokens-agent on the nodes) or \"prometheus\" (dcgm-exporter; fill in [prometheus])."),
            key(
                "charge_basis",
                Toml("\"allocation\""),
                "\"allocation\": GPUs x hours held. \"measured\": weighted by measured utilization, at least measured_min_fraction of the price.",
            ),
            key("measured_min_fraction", Toml("0.25"), "The least share of a GPU's price a held GPU is charged under \"measured\" (0 to 1)."),
            key("idle_threshold_percent", Toml("5.0"), "A job whose GPUs stay below this utilization for idle_window is flagged idle."),
            key("idle_window", Toml("\"1h\""), "How long a job must stay below idle_threshold_percent to be flagged."),
            key(
                "idle_command",
                Toml("[]"),
                "A command (argv, no shell) run when a job is flagged idle; {job}, {user} and {node} are replaced.",
            ),
            key("idle_notify", Toml("false"), "Tell the job's owner once when it is flagged (the \"idle\" event of [notify] command)."),
        ],
    },
    Table {
        name: "prometheus",
        about: "With [usage] source = \"prometheus\": where utilization is read (checked whenever the table is there).",
        keys: &[
            key("url", Words("required"), "The Prometheus server, http://HOST[:PORT] (no TLS)."),
            key(
                "query",
                Toml("'avg by (hpc_job) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{hpc_job!=\"\"}[$window]))'"),
                "The PromQL query giving each job's utilization; $window becomes the check interval.",
            ),
            key("job_label", Toml("\"hpc_job\""), "The label holding the Slurm job ID."),
            key("timeout", Toml("\"10s\""), "How long a query may take."),
        ],
    },
    Table {
        name: "sharing",
        about: "GPUs shared by several jobs: gres/shard and gres/mps are charged as a fraction of a GPU.",
        keys: &[
            key("shards_per_gpu", Toml("1"), "A shard is 1/shards_per_gpu of its GPU's price (gres.conf's shard Count over the node's GPUs)."),
            key("mps_per_gpu", Toml("100"), "An MPS unit is 1/mps_per_gpu of its GPU's price."),
        ],
    },
    Table {
        name: "preemption",
        about: "Requeueing debtors' jobs where users in credit wait for the same GPU type.",
        keys: &[
            key("enabled", Toml("true"), "Preempt at all."),
            key("dry_run", Toml("false"), "Only log what would be done (start a site with it)."),
            key("min_runtime", Toml("\"10m\""), "Never preempt a job that has run less than this."),
            key("max_per_cycle", Toml("4"), "Jobs preempted in one check cycle at most."),
            key(
                "action",
                Toml("\"requeue\""),
                "\"requeue\" (scontrol requeue for requeueable batch jobs, scancel for the rest) or \"cancel\".",
            ),
            key("signal", Words("none"), "A signal sent first (e.g. \"USR1\") so the job can checkpoint, grace before it is preempted."),
            key("grace", Toml("\"60s\""), "How long after signal the job is preempted."),
            key(
                "at_floor",
                Toml("\"none\""),
                "Running GPU jobs of users at or below the floor: \"none\" (only new jobs are refused), \"requeue\" or \"cancel\".",
            ),
            key(
                "busy_percent",
                Words("0 (off)"),
                "Act on a contended GPU type only when its jobs use it at least this much on average (percent).",
            ),
            key("start_wait", Toml("\"10m\""), "A waiting job a preemption freed GPUs for causes no other for this long after (after grace)."),
        ],
    },
    Table {
        name: "lending",
        about: "Idle GPUs lent to users in debt: their runs are borrowed, requeued when a user in credit waits for the GPU type, and free when reclaimed. Replaces [preemption]'s contention rule.",
        keys: &[
            key("enabled", Toml("false"), "Lend idle GPUs to users in overdraft (their batch GPU jobs run as borrowed runs)."),
            key("at_floor", Toml("false"), "Lend to users at or below the floor too (their GPU jobs are accepted as borrowed, not refused)."),
            key("discount", Toml("0"), "Percent off the price of a borrowed run that finishes unreclaimed (0 to 100)."),
        ],
    },
    Table {
        name: "exempt",
        about: "Never preempted and never checked by the job_submit plugin.",
        keys: &[
            key("users", Toml("[]"), "User names."),
            key("accounts", Toml("[]"), "Slurm accounts (the job's -A, or the user's default account)."),
            key("qos", Toml("[]"), "QOS names the job asks for with --qos."),
        ],
    },
    Table {
        name: "accounts",
        about: "Token pools of Slurm accounts (a lab, a project, a course).",
        keys: &[
            key(
                "mode",
                Toml("\"user\""),
                "\"user\": only users hold tokens; \"account\": a job under an account with a pool is paid by the pool; \"both\": by the pool and its user.",
            ),
            key("initial", Words("the top-level initial"), "A new pool's initial balance (accountd admin account add may give another)."),
            key("daily", Words("the top-level daily"), "A pool's daily grant."),
            key("monthly", Words("the top-level monthly"), "A pool's monthly grant."),
            key("cap", Words("the top-level cap"), "A pool's cap."),
            key("floor", Words("the top-level floor"), "A pool's floor."),
        ],
    },
    Table {
        name: "health",
        about: "Draining nodes whose GPUs fail (only an admin resumes them).",
        keys: &[
            key(
                "drain",
                Toml("true"),
                "Drain a node whose GPU has an uncorrectable ECC error, a drain_xids XID, fell off the bus or stays overheated, and requeue its jobs.",
            ),
            key("max_temperature", Toml("85"), "Overheated above this (°C) for a GPU that reports neither throttling nor its slowdown threshold."),
            key("temperature_for", Toml("\"5m\""), "How long a GPU must stay overheated."),
            key("drain_xids", Toml("[48, 63, 64, 74, 79, 92, 94, 95, 119, 120]"), "The hardware XIDs drained for (others are logged and counted)."),
            key("repeat_after", Toml("\"1d\""), "The same XID on the same GPU within this long of its drain is the same fault."),
        ],
    },
    Table {
        name: "refunds",
        about: "Runs lost to the system, refunded automatically once.",
        keys: &[
            key("causes", Toml("[\"gpu_fault\", \"node_fail\"]"), "Which losses are refunded; [] = none."),
            key("max_gpu_hours", Toml("24"), "At most this many GPU-hours of one run are refunded."),
            key(
                "max_tokens_per_month",
                Toml("100"),
                "At most this many tokens are refunded automatically to one balance per month; beyond it an admin refunds by hand.",
            ),
        ],
    },
    Table {
        name: "admission",
        about: "Admission: the job_submit plugin in slurmctld reads this table at start and again within a second of any change to the file; accountd at its start.",
        keys: &[
            key(
                "contact",
                Words("none"),
                "Whom users at the floor ask for tokens (an address, a ticket queue), named in refusals and sbalance; unset: the cluster administrators.",
            ),
            key(
                "enforce",
                Toml("true"),
                "false: shadow mode. Every decision is made, logged (\"shadow mode, not enforced\") and counted, and no job is refused, deprioritized, held or preempted.",
            ),
            key(
                "hold_at_floor",
                Toml("true"),
                "accountd holds pending GPU jobs whose payer is at the floor and releases them once it is above.",
            ),
            key(
                "mode",
                Toml("\"balance\""),
                "\"balance\": refuse at the floor. \"estimate\": also when the job's maximum cost with the user's other jobs would pass the floor (needs a short [intervals] check).",
            ),
            key(
                "deprioritize",
                Toml("\"nice\""),
                "How jobs in overdraft are put behind: \"nice\" (nice_increment), \"site_factor\" (needs priority/multifactor) or \"qos\" (qos).",
            ),
            key("nice_increment", Toml("10000"), "The nice value added in overdraft; 0 = only tell the user."),
            key("site_factor", Toml("-10000"), "The site factor added to the priority in overdraft."),
            key("qos", Words("none"), "The QOS jobs in overdraft are moved to (deprioritize = \"qos\")."),
            key("on_error", Toml("\"accept\""), "GPU jobs while the snapshot is missing, unreadable, corrupt or stale: \"accept\" or \"reject\"."),
            key("max_snapshot_age", Toml("\"2h\""), "A snapshot older than this is stale; \"off\" = never."),
            key("default_time_limit", Toml("\"1d\""), "The time limit counted for a job without one whose partition has none."),
            key("max_gpus_per_user", Words("none"), "GPUs a user may hold in running and pending jobs together."),
            key("max_job_duration", Toml("\"off\""), "The longest --time a GPU job may ask for, or \"off\"."),
        ],
    },
    Table {
        name: "notify",
        about: "Notifications, the way Slurm's MailProg works.",
        keys: &[
            key(
                "command",
                Toml("[]"),
                "argv of the command run per event (an absolute path, no shell); it gets \"--\", the event and the user name as three more arguments, the message on stdin. [] = off.",
            ),
            key("warn_below", Toml("10"), "The \"warning\" event's level in tokens; 0 = no warning."),
            key("timeout", Toml("\"30s\""), "How long the command may run before it is killed and retried later."),
            key("expiry_warning", Toml("\"7d\""), "How long before a grant's end its user is told (the \"expiring\" event)."),
        ],
    },
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::super::reader::asked;
    use super::*;
    use crate::config::Config;

    /// The dotted name of every key the reference lists, but `[prices]`' open `TYPE`.
    fn listed() -> BTreeSet<String> {
        let keys = TABLES.iter().flat_map(|t| t.keys.iter().map(move |k| (t, k)));
        keys.filter(|(t, k)| !(t.name == "prices" && k.name == "TYPE")).map(|(t, k)| t.dotted(k)).collect()
    }

    /// A file with every table, so that even the tables that are off unless given are read.
    fn every_table() -> String {
        let mut text = String::new();
        for table in TABLES.iter().filter(|t| !t.name.is_empty()) {
            text.push_str(&format!("[{}]\n", table.name));
            match table.name {
                "prometheus" => text.push_str("url = \"http://127.0.0.1:9090\"\n"),
                "ondemand" => text.push_str("balance_file = \"/var/lib/ood/balances.json\"\nworld_readable = true\n"),
                _ => {}
            }
        }
        text
    }

    #[test]
    fn the_reference_lists_every_key_the_reader_asks_for_and_no_other() {
        let text = every_table();
        let table: toml::Table = text.parse().unwrap();
        let asked: BTreeSet<String> = asked::during(|| {
            Config::parse_lenient(&text, Path::new("t.toml"));
        })
        .into_iter()
        .collect();
        // The reader asks for a table by its name too.
        let tables: BTreeSet<String> = table.keys().cloned().collect();
        let asked: BTreeSet<String> = asked.difference(&tables).cloned().collect();
        let listed = listed();
        let unlisted: Vec<_> = asked.difference(&listed).collect();
        let unread: Vec<_> = listed.difference(&asked).collect();
        assert!(unlisted.is_empty(), "keys the reader knows that config/reference.rs does not list: {unlisted:?}");
        assert!(unread.is_empty(), "keys config/reference.rs lists that the reader never asks for: {unread:?}");
    }

    /// Writing every stated default into a file reads as the empty file does: the reference's
    /// defaults are the reader's.
    #[test]
    fn every_stated_default_is_the_readers_own() {
        let mut text = String::new();
        for table in TABLES {
            if !table.name.is_empty() {
                text.push_str(&format!("[{}]\n", table.name));
            }
            for key in table.keys {
                if let Default::Toml(value) = key.default {
                    text.push_str(&format!("{} = {value}\n", key.name));
                }
            }
        }
        // The two tables that are off unless given are compared as given with what they need.
        let needed = [
            ("[prometheus]\n", "url = \"http://127.0.0.1:9090\"\n"),
            ("[ondemand]\n", "balance_file = \"/o/b.json\"\ngroup = \"ood\"\n"),
        ];
        let mut required = String::new();
        for (table, keys) in needed {
            text = text.replace(table, &format!("{table}{keys}"));
            required.push_str(&format!("{table}{keys}"));
        }
        let stated = Config::parse(&text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let default = Config::parse(&required, Path::new("t.toml")).unwrap();
        let (stated, default) = (format!("{stated:#?}"), format!("{default:#?}"));
        let differ: Vec<_> = stated.lines().zip(default.lines()).filter(|(s, d)| s != d).collect();
        assert!(differ.is_empty(), "stated defaults read otherwise (stated, default): {differ:?}\n{text}");
    }

    #[test]
    fn each_key_is_listed_once_with_a_meaning() {
        let mut seen = BTreeSet::new();
        for table in TABLES {
            for key in table.keys {
                assert!(seen.insert(table.dotted(key)), "{} is listed twice", table.dotted(key));
                assert!(key.meaning.ends_with('.'), "{}: a meaning is a sentence", table.dotted(key));
            }
        }
    }
}
