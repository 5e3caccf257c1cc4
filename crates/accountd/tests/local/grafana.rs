//! slurm-conf/grafana/gputokens.json: a well-formed Grafana dashboard, and every metric it queries
//! (panel targets and template variables) is one a real `accountd serve` exports on `/metrics`.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use crate::common::{http_get, run_as, Site};

const DASHBOARD: &str = include_str!("../../../../slurm-conf/grafana/gputokens.json");

/// Metrics served only once something happens that needs a Slurm cluster (an agent report passes
/// the report gate only for a node and jobs Slurm shows; preemptions and drains act through Slurm):
/// the cluster tests (agent.rs, health.rs, preemption.rs) read them by these names. Here accountd's
/// registry must serve them once their families have a sample; everything else the dashboard queries
/// must be on a real serve's `/metrics`.
const SERVED_AFTER_CLUSTER_EVENTS: [&str; 6] = [
    "gputokens_gpu_utilization_percent",
    "gputokens_job_gpu_utilization_percent",
    "gputokens_job_idle",
    "gputokens_preemptions_total",
    "gputokens_node_drains_total",
    "gputokens_gpu_xids_ignored_total",
];

/// PromQL words that are not metrics: aggregation operators (`sum by (l) (...)` has no `(` right
/// after `sum`; other functions are the names before a `(`), modifiers and binary operators.
const KEYWORDS: [&str; 27] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
];

/// The metric names an expression reads: identifiers outside label matchers (`{...}`), range and
/// subquery brackets (`[...]`), strings and grouping lists (`by (...)` and the like), that are not
/// a function (followed by `(`), a keyword, a number or a Grafana variable (`$name`, `${name}`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // After a grouping keyword, its parenthesised label list is skipped.
    let mut skip_next_parens = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' | '[' | '(' if c != '(' || skip_next_parens => {
                let close = match c {
                    '{' => '}',
                    '[' => ']',
                    _ => ')',
                };
                skip_next_parens = false;
                i = skip_to(&chars, i + 1, close);
            }
            '"' | '\'' | '`' => i = skip_to(&chars, i + 1, c),
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_to(&chars, i + 1, '}');
                } else {
                    while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number, also 1e3, 0x1f or a duration such as 5m.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                let lower = word.to_ascii_lowercase();
                if ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&lower.as_str()) {
                    skip_next_parens = next == Some(&'(');
                } else if next != Some(&'(') && !KEYWORDS.contains(&lower.as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// The index just past the `close` that ends what opened before `from` (nesting of the same
/// brackets counted; strings inside skipped).
fn skip_to(chars: &[char], from: usize, close: char) -> usize {
    let open = match close {
        '}' => Some('{'),
        ']' => Some('['),
        ')' => Some('('),
        _ => None,
    };
    let mut depth = 1;
    let mut i = from;
    while i < chars.len() {
        let c = chars[i];
        if open.is_some() && (c == '"' || c == '\'' || c == '`') {
            i = skip_to(chars, i + 1, c);
            continue;
        }
        if c == '\\' && open.is_none() {
            i += 2;
            continue;
        }
        if Some(c) == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    chars.len()
}

/// The metric a template variable's query reads: `label_values(METRIC{...}, label)` (the label is
/// not a metric), `query_result(EXPR)` or `metrics(...)`-free PromQL.
fn variable_metrics(query: &str) -> BTreeSet<String> {
    let query = query.trim();
    if let Some(args) = query.strip_prefix("label_values(").and_then(|q| q.strip_suffix(')')) {
        // label_values(label) reads no metric; label_values(metric, label) the first argument.
        return match args.rsplit_once(',') {
            Some((metric, _label)) => metric_names(metric),
            None => BTreeSet::new(),
        };
    }
    let inner = query.strip_prefix("query_result(").and_then(|q| q.strip_suffix(')')).unwrap_or(query);
    metric_names(inner)
}

#[test]
fn the_tokenizer_finds_metrics_and_only_metrics() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"sum by (gpu_type) (rate(gputokens_charged_tokens_total{user=~"$user", gpu_type=~"a(b"}[$__rate_interval])) * 3600"#
        ),
        ["gputokens_charged_tokens_total"]
    );
    assert_eq!(names("time() - a_seconds > 1e3 and on(cycle) b offset 5m"), ["a_seconds", "b"]);
    assert_eq!(names("avg without (gpu, uuid) (x) / ignoring (node) group_left y"), ["x", "y"]);
    assert_eq!(names("max_over_time(up[1h:5m]) == bool 0"), ["up"]);
    assert!(variable_metrics("label_values(user)").is_empty());
    assert_eq!(
        variable_metrics(r#"label_values(gputokens_charged_tokens_total{gpu_type="a"}, user)"#)
            .into_iter()
            .collect::<Vec<_>>(),
        ["gputokens_charged_tokens_total"]
    );
}

/// Every panel (rows' nested panels included) of the dashboard.
fn all_panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        out.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

#[test]
fn the_dashboard_is_a_well_formed_grafana_dashboard() {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("gputokens.json is JSON");
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty() && u.len() <= 40), "uid");
    assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()), "title");
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "schemaVersion of Grafana 10 or later");
    // A datasource variable (so the dashboard imports on any site), used by every target.
    let variables = dashboard["templating"]["list"].as_array().expect("templating.list");
    let datasource = variables.iter().find(|v| v["name"] == "datasource").expect("a `datasource` variable");
    assert_eq!((&datasource["type"], &datasource["query"]), (&"datasource".into(), &"prometheus".into()));
    for name in ["user", "gpu_type"] {
        let v = variables.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("a `{name}` variable"));
        assert_eq!(v["datasource"]["uid"], "${datasource}", "{v}");
        let query = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap_or_default();
        assert!(query.starts_with("label_values(") && query.ends_with(&format!(", {name})")), "{query}");
    }

    let panels = all_panels(&dashboard);
    let mut ids = HashSet::new();
    let mut targets = 0;
    for panel in &panels {
        let id = panel["id"].as_u64().unwrap_or_else(|| panic!("a panel without an id: {panel}"));
        assert!(ids.insert(id), "panel id {id} twice");
        let grid = &panel["gridPos"];
        for key in ["h", "w", "x", "y"] {
            assert!(grid[key].is_u64(), "panel {id}: gridPos.{key}");
        }
        assert!(grid["x"].as_u64().unwrap() + grid["w"].as_u64().unwrap() <= 24, "panel {id} wider than the grid");
        assert!(panel["title"].as_str().is_some_and(|t| !t.is_empty()), "panel {id}: title");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "panel {id}");
        let panel_targets = panel["targets"].as_array().unwrap_or_else(|| panic!("panel {id}: targets"));
        assert!(!panel_targets.is_empty(), "panel {id} queries nothing");
        let mut refs = HashSet::new();
        for target in panel_targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "panel {id}: {target}");
            assert!(refs.insert(target["refId"].as_str().expect("refId")), "panel {id}: refId twice");
            assert!(target["expr"].as_str().is_some_and(|e| !e.trim().is_empty()), "panel {id}: expr");
            targets += 1;
        }
    }
    assert!(panels.len() >= 10 && targets >= 10, "{} panels, {targets} targets", panels.len());
    // The balance panel says that it needs per-user metrics.
    let balance =
        panels.iter().find(|p| p["targets"].to_string().contains("gputokens_balance_tokens")).expect("balances");
    assert!(balance["description"].as_str().unwrap_or_default().contains("per_user_metrics"), "{balance}");
}

/// Every metric name the dashboard reads, from its targets and its template variables.
fn queried_metrics() -> BTreeSet<String> {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
    let mut names = BTreeSet::new();
    for panel in all_panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            names.extend(metric_names(target["expr"].as_str().unwrap_or_default()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] == "query" {
            let query = variable["query"]["query"].as_str().or(variable["query"].as_str()).unwrap_or_default();
            names.extend(variable_metrics(query));
        }
    }
    names
}

/// `name` is on `/metrics`: a sample of it, or its family (a counter's family is named without
/// `_total`).
fn served(metrics: &str, name: &str) -> bool {
    metrics.lines().any(|l| {
        l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            || l.strip_prefix("# TYPE ").and_then(|t| t.split_once(' ')).is_some_and(|(family, kind)| {
                family == name || (kind == "counter" && name.strip_suffix("_total") == Some(family))
            })
    })
}

#[test]
fn every_metric_the_dashboard_queries_is_served() {
    let queried = queried_metrics();
    assert!(queried.len() >= 12, "{queried:?}");
    for name in &queried {
        assert!(name.starts_with("gputokens_"), "the tokenizer took {name:?} for a metric");
    }

    // A Slurm of scripts: sacct shows two finished GPU jobs once and then fails (a charge cycle that
    // charged, then one that failed); squeue shows an empty queue, scontrol answers nothing. The jobs
    // end a second after sacct is asked, so after the site began charging: it charges them.
    let slurm = tempfile::Builder::new().prefix("gputokens-it-slurm-").tempdir().unwrap();
    let d = slurm.path().display();
    let sacct = format!(
        "#!/bin/sh\n[ -e {d}/sacct.done ] && {{ echo 'sacct: slurmdbd down' >&2; exit 1; }}\ntouch {d}/sacct.done\n\
         now=$(date +%s)\n\
         echo 'JobIDRaw|User|AllocTRES|ElapsedRaw|Start|State|NodeList'\n\
         echo \"5|alice|gres/gpu:a6000=2,gres/gpu=2|5400|$((now - 5399))|COMPLETED|vm\"\n\
         echo \"6|bob|gres/gpu:rtx3090=1,gres/gpu=1|3600|$((now - 3599))|COMPLETED|vm\"\n"
    );
    for (command, text) in [
        ("sacct", sacct.as_str()),
        ("squeue", "#!/bin/sh\ncase \"$*\" in *--json*) echo '{\"jobs\": []}';; esac\n"),
        ("scontrol", "#!/bin/sh\n"),
    ] {
        let path = slurm.path().join(command);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let site = Site::start(
        "",
        &format!(
            "[http]\nlisten = \"127.0.0.1:0\"\nper_user_metrics = true\nmax_connections_per_address = 2\n\
             [slurm]\nbin_dir = \"{d}\"\n[intervals]\ncharge = \"2s\"\n"
        ),
    );
    let base = site.http_url();
    // An agent report without a credential: refused, and counted by reason.
    let refused = run_as(
        None,
        std::path::Path::new("/usr/bin/curl"),
        &[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            "--data",
            "{}",
            &format!("{base}/v1/agent/report"),
        ],
    );
    assert!(refused.stdout.starts_with('4'), "{}{}", refused.stdout, refused.stderr);
    // More connections from one address than max_connections_per_address (2): an idle one is shed
    // for a newer one, and so is one whose request's body never comes (never busy: it is not whole).
    let host = base.trim_start_matches("http://");
    let connect = || std::net::TcpStream::connect(host).unwrap();
    let busy = |mut stream: std::net::TcpStream| {
        let head = "POST /v1/agent/report HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{";
        std::io::Write::write_all(&mut stream, head.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        stream
    };
    let idle = connect();
    std::thread::sleep(Duration::from_millis(300));
    let first_busy = busy(connect());
    let second_busy = busy(connect()); // sheds `idle`; the next ones shed these
    let refused: Vec<std::net::TcpStream> = (0..3).map(|_| connect()).collect();
    std::thread::sleep(Duration::from_millis(500));
    drop((idle, first_busy, second_busy, refused));

    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let (status, metrics) = http_get(&format!("{base}/metrics"));
        let pending: Vec<&String> = queried
            .iter()
            .filter(|n| !SERVED_AFTER_CLUSTER_EVENTS.contains(&n.as_str()) && !served(&metrics, n))
            .collect();
        if status == 200 && pending.is_empty() {
            break metrics;
        }
        assert!(Instant::now() < deadline, "the dashboard queries {pending:?}, not served:\n{metrics}\n{}", site.log());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(metrics.contains("gputokens_balance_tokens{user=\"alice\"} 88.0"), "{metrics}");

    // The rest are served under those names (counters get `_total`) once what they count happens:
    // accountd's own registry, given a sample in each of their families, encodes them. And they are
    // still queried: a dashboard that dropped one leaves a stale entry here.
    let after_events = metrics_after_cluster_events();
    for name in SERVED_AFTER_CLUSTER_EVENTS {
        assert!(queried.contains(name), "the dashboard no longer queries {name}: drop it from the list");
        assert!(served(&after_events, name), "{name} is not what accountd's registry serves:\n{after_events}");
    }
}

/// What accountd's metrics registry encodes once a GPU and a job were reported, a job was
/// preempted, a node drained and an XID ignored: one sample in each family those events fill.
fn metrics_after_cluster_events() -> String {
    use accountd::metrics::{GpuLabels, JobLabels, Metrics, NodeLabels, XidLabels};
    let m = Metrics::new();
    let gpu = GpuLabels { node: "n1".into(), gpu: "0".into(), uuid: "GPU-0".into() };
    m.gpu_utilization.get_or_create(&gpu).set(50.0);
    let job = JobLabels { job: "7".into(), user: String::new(), node: "n1".into() };
    m.job_gpu_utilization.get_or_create(&job).set(50.0);
    m.job_idle.get_or_create(&job).set(0);
    m.record_preemption("a6000", "requeue", false);
    m.drains.get_or_create(&NodeLabels { node: "n1".into() }).inc();
    m.xids_ignored.get_or_create(&XidLabels { node: "n1".into(), xid: "13".into() }).inc();
    m.encode()
}
