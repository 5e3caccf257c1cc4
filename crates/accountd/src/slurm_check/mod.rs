//! `accountd config check --slurm`: the running Slurm's configuration against gputokens.toml. Each
//! problem found is one a site would otherwise learn of from its users, or not at all: GPU jobs not
//! checked at submission, GPUs recorded untyped (and so charged as GPUs of no type), a GPU type
//! without a price, a deprioritizing setting that lowers nothing.
//!
//! What Slurm says is read once ([`SlurmFacts::read`], through `slurm`, which only runs Slurm's
//! commands), then judged here: the controllers' status files (`controllers`), the plugstack
//! (`plugstack`), pools against Slurm's accounts (`pools`), and the snapshot's readability for the
//! SlurmUser (through `snapshot::access`).

pub mod controllers;
pub mod finding;
pub mod plugstack;
pub mod pools;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gputokens::config::admission::Deprioritize;
use gputokens::Config;

use crate::slurm::{Slurm, SlurmError};
use crate::slurm_check::controllers::ControllerFacts;
pub use crate::slurm_check::finding::Finding;
use crate::slurm_check::plugstack::SpankLine;
use crate::slurm_check::pools::AccountFacts;

/// What Slurm says about itself.
#[derive(Debug, Default)]
pub struct SlurmFacts {
    /// `scontrol show config`, key → value.
    pub config: BTreeMap<String, String>,
    /// GPU types (lower-case) per node, from sinfo.
    pub node_gpu_types: BTreeMap<String, BTreeSet<String>>,
    /// Each node's CPUs, memory and GPUs, from sinfo (`[prices] stranded` weighs jobs by them).
    pub node_shapes: BTreeMap<String, gputokens::stranding::NodeShape>,
    /// QOS names from sacctmgr; read only when `deprioritize = "qos"`.
    pub qos: Option<BTreeSet<String>>,
    /// The SPANK plugstack.conf of this host, and the line loading spank_gputokens.so in it.
    pub plugstack: PathBuf,
    pub spank: Option<SpankLine>,
    /// Each slurmctld host and what its plugin's status file says.
    pub controllers: ControllerFacts,
    /// Slurm's accounts and the ledger's pools; read only when pools are on.
    pub accounts: Option<AccountFacts>,
}

impl SlurmFacts {
    /// What `accountd config check --slurm` compares with gputokens.toml, as `slurm` reads it; QOS
    /// names only when asked; the controllers' status files from `status_dir` (`[paths]
    /// controller_status`). Pools' facts are left to the caller (`accounts: None`).
    pub fn read(slurm: &Slurm, with_qos: bool, status_dir: &Path) -> Result<SlurmFacts, SlurmError> {
        let config = parse_show_config(&slurm.run("scontrol", &["show", "config"])?);
        let node_gpu_types = slurm.node_gpu_types()?.into_iter().collect();
        let node_shapes = slurm.node_shapes()?.into_iter().collect();
        let qos = if with_qos {
            let names = slurm.run("sacctmgr", &["-n", "-P", "show", "qos", "format=Name"])?;
            Some(names.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect())
        } else {
            None
        };
        let plugstack = SlurmFacts::plugstack_path(&config);
        let spank = crate::slurm_check::plugstack::find_gputokens(&plugstack);
        // Says which controllers answer; it fails only when none does, which the status files show.
        let ping = slurm.run("scontrol", &["ping"]).ok();
        let controllers = ControllerFacts::read(status_dir, &config, ping.as_deref(), gputokens::time::now());
        Ok(SlurmFacts { config, node_gpu_types, node_shapes, qos, plugstack, spank, controllers, accounts: None })
    }

    /// PlugStackConfig, else plugstack.conf beside slurm.conf (SLURM_CONF).
    pub fn plugstack_path(config: &BTreeMap<String, String>) -> PathBuf {
        match config.get("PlugStackConfig").map(String::as_str) {
            Some(path) if !path.is_empty() && path != "(null)" => PathBuf::from(path),
            _ => {
                let slurm_conf =
                    Path::new(config.get("SLURM_CONF").map(String::as_str).unwrap_or("/etc/slurm/slurm.conf"));
                slurm_conf.parent().unwrap_or(Path::new("/etc/slurm")).join("plugstack.conf")
            }
        }
    }
}

/// `scontrol show config` lines `Key = Value` (section titles and blank lines are skipped).
pub fn parse_show_config(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(" = "))
        .filter(|(key, _)| !key.trim().is_empty() && !key.trim().contains(' '))
        .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
        .collect()
}

pub fn findings(config: &Config, facts: &SlurmFacts, plugin_exists: impl Fn(&Path) -> bool) -> Vec<Finding> {
    let mut out = vec![job_submit(facts, plugin_exists), accounting(config, facts)];
    out.extend(prices(config, facts));
    out.extend(stranding(config, facts));
    out.extend([deprioritizing(config, facts), slurm_user(config, facts), spank(config, facts)]);
    out.push(snapshot_readable(config, facts));
    out.extend(controllers::findings(config, &facts.controllers));
    let enforce = facts.config.get("AccountingStorageEnforce").map(String::as_str);
    out.extend(pools::findings(config, enforce, facts.accounts.as_ref()));
    out
}

/// The snapshot, and every directory above it, readable by slurmctld's SlurmUser: else the plugin
/// cannot read it and on_error decides every GPU job.
fn snapshot_readable(config: &Config, facts: &SlurmFacts) -> Finding {
    use crate::snapshot::access::{blocked, entries, Reader};
    let path = &config.paths.snapshot;
    let setting = setting(facts, "SlurmUser");
    let Some(reader) = Reader::from_setting(setting) else {
        return Finding::Problem(format!(
            "SlurmUser '{setting}' is not known on this host: cannot check who reads {}",
            path.display()
        ));
    };
    let (found, exists) = entries(path);
    if let Some(entry) = blocked(&reader, &found) {
        let what = if entry.dir { "search" } else { "read" };
        return Finding::Problem(format!(
            "slurmctld's SlurmUser ({setting}) cannot {what} {} (owner {}, group {}, mode {:o}): the job_submit plugin \
             cannot read the snapshot {} and on_error = \"{}\" decides every GPU job; give it the SlurmUser's group \
             (accountd run as root does so when it writes it) or run accountd as the SlurmUser",
            entry.path.display(),
            entry.uid,
            entry.gid,
            entry.mode,
            path.display(),
            config.admission.on_error.as_str()
        ));
    }
    // The plugin takes balances only from a snapshot root and the SlurmUser alone can change.
    let name = setting.split('(').next().unwrap_or(setting);
    if let Some(why) = gputokens::file_trust::untrusted_with(path, "the balance snapshot", Some(name)) {
        return Finding::Problem(format!(
            "{why}: the job_submit plugin takes no balances from a snapshot others could change, and on_error = \
             \"{}\" decides every GPU job",
            config.admission.on_error.as_str()
        ));
    }
    match exists {
        true => Finding::Ok(format!("the snapshot {} is readable by the SlurmUser ({setting})", path.display())),
        false => Finding::Ok(format!(
            "the snapshot {} is not written yet; the directories above it are open to the SlurmUser ({setting})",
            path.display()
        )),
    }
}

fn setting<'f>(facts: &'f SlurmFacts, key: &str) -> &'f str {
    facts.config.get(key).map(String::as_str).unwrap_or("")
}

fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty() && *v != "(null)")
}

fn job_submit(facts: &SlurmFacts, plugin_exists: impl Fn(&Path) -> bool) -> Finding {
    let plugins = setting(facts, "JobSubmitPlugins");
    if !list(plugins).any(|p| p == "gputokens" || p == "job_submit/gputokens") {
        return Finding::Problem(format!(
            "JobSubmitPlugins is '{plugins}', without gputokens: GPU jobs are not checked at submission \
             (see slurm-conf/slurm.conf.gputokens)"
        ));
    }
    let dirs = setting(facts, "PluginDir");
    let found = dirs.split(':').map(|d| Path::new(d).join("job_submit_gputokens.so")).find(|p| plugin_exists(p));
    match found {
        Some(path) => Finding::Ok(format!("JobSubmitPlugins includes gputokens ({})", path.display())),
        None => Finding::Problem(format!(
            "JobSubmitPlugins includes gputokens but no job_submit_gputokens.so is in PluginDir ({dirs}): \
             slurmctld will not start"
        )),
    }
}

/// Node → type pairs as "type (node, node)" lines, for messages.
fn with_nodes(facts: &SlurmFacts, types: &BTreeSet<&str>) -> String {
    let named: Vec<String> = types
        .iter()
        .map(|t| {
            let nodes: Vec<&str> =
                facts.node_gpu_types.iter().filter(|(_, ts)| ts.contains(*t)).map(|(n, _)| n.as_str()).collect();
            format!("{t} (on {})", nodes.join(","))
        })
        .collect();
    named.join(", ")
}

fn node_types(facts: &SlurmFacts) -> BTreeSet<&str> {
    facts.node_gpu_types.values().flatten().map(String::as_str).collect()
}

fn accounting(config: &Config, facts: &SlurmFacts) -> Finding {
    let types = node_types(facts);
    if facts.node_gpu_types.values().all(BTreeSet::is_empty) && !list(setting(facts, "GresTypes")).any(|g| g == "gpu") {
        return Finding::Problem("no node has GPUs (sinfo %G) and GresTypes lacks gpu: nothing to charge".into());
    }
    let recorded: BTreeSet<String> =
        list(setting(facts, "AccountingStorageTRES")).map(str::to_ascii_lowercase).collect();
    if !recorded.contains("gres/gpu") {
        return Finding::Problem(
            "AccountingStorageTRES lacks gres/gpu: slurmdbd records no GPU time, so no job is charged".into(),
        );
    }
    let missing: BTreeSet<&str> =
        types.iter().copied().filter(|t| !recorded.contains(&format!("gres/gpu:{t}"))).collect();
    if missing.is_empty() {
        let all: Vec<&str> = types.into_iter().collect();
        return Finding::Ok(format!("AccountingStorageTRES records every GPU type of the nodes ({})", all.join(", ")));
    }
    let want: Vec<String> = missing.iter().map(|t| format!("gres/gpu:{t}")).collect();
    Finding::Problem(format!(
        "AccountingStorageTRES lacks {}: sacct records those GPUs of {} untyped, so they are charged as GPUs of \
         no type ({}/GPU-hour: default_price, else the highest price)",
        want.join(","),
        with_nodes(facts, &missing),
        config.prices.applied(gputokens::slurm::sacct::UNTYPED).per_gpu_hour
    ))
}

fn prices(config: &Config, facts: &SlurmFacts) -> Vec<Finding> {
    let types = node_types(facts);
    // A MIG slice without a line of its own is priced from its GPU type's: not unpriced.
    let unpriced: BTreeSet<&str> = types.iter().copied().filter(|t| !config.prices.applied(t).listed).collect();
    let mut out = Vec::new();
    let from_parent: Vec<String> = types
        .iter()
        .filter_map(|t| Some((t, config.prices.applied(t).slice?, config.prices.slice_parent_line(t)?)))
        .map(|(t, share, parent)| format!("{t} ({}/{} of {parent})", share.slices, share.of))
        .collect();
    if !from_parent.is_empty() {
        out.push(Finding::Ok(format!("[prices] prices MIG slices by their GPU type: {}", from_parent.join(", "))));
    }
    // NVML counts energy per GPU, never per MIG slice: nothing tells a slice's part apart.
    let slices: Vec<&str> = types.iter().copied().filter(|t| gputokens::mig::parse(t).is_some()).collect();
    if let (Some(per_kwh), false) = (config.prices.per_kwh(), slices.is_empty()) {
        out.push(Finding::Problem(format!(
            "[prices] per_kwh = {per_kwh} charges no energy to jobs on MIG slices ({}): NVML measures energy per \
             GPU, not per slice; their GPU time is charged as usual. Price the slices' energy into their \
             [prices] lines if it matters",
            slices.join(", ")
        )));
    }
    if unpriced.is_empty() {
        out.push(Finding::Ok("[prices] lists every GPU type of the nodes".into()));
    } else {
        let price = config.prices.applied(unpriced.first().copied().unwrap_or_default()).per_gpu_hour;
        let text = format!("[prices] lists no price for {}", with_nodes(facts, &unpriced));
        out.push(match config.prices.default_price() {
            Some(_) => Finding::Ok(format!("{text}: charged at default_price, {price}/GPU-hour")),
            None => Finding::Problem(format!(
                "{text}: charged at the highest listed price, {price}/GPU-hour (set a price, or default_price)"
            )),
        });
    }
    // A type whose MIG slices the nodes have is in use, whole GPUs of it or not.
    let sliced: BTreeSet<String> =
        types.iter().filter_map(|t| config.prices.slice_parent_line(t)).map(str::to_ascii_lowercase).collect();
    let unused: Vec<&str> =
        config.prices.listed_types().filter(|t| !types.contains(t) && !sliced.contains(*t)).collect();
    if !unused.is_empty() {
        out.push(Finding::Ok(format!("[prices] also lists types no node has: {}", unused.join(", "))));
    }
    out
}

/// `[prices] stranded`: what each shape of GPU node makes a job holding all of it pay, as Slurm
/// says the nodes are; memory counted where Slurm allocates none is a problem.
fn stranding(config: &Config, facts: &SlurmFacts) -> Vec<Finding> {
    use gputokens::stranding::Part;
    let parts = config.prices.stranded();
    if parts.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let select = setting(facts, "SelectTypeParameters");
    if parts.contains(&Part::Memory) && !select.to_ascii_lowercase().contains("memory") {
        out.push(Finding::Problem(format!(
            "[prices] stranded counts memory, but SelectTypeParameters={select} allocates none: jobs hold no \
             memory to count; use CR_Core_Memory or CR_CPU_Memory, or count \"cpus\" alone"
        )));
    }
    // Nodes alike described once: `vm` or `gpu[01-04]`-style lists stay short.
    let mut shapes: Vec<(&gputokens::stranding::NodeShape, Vec<&str>)> = Vec::new();
    for (node, shape) in facts.node_shapes.iter().filter(|(_, s)| s.gpus() > 0) {
        match shapes.iter_mut().find(|(known, _)| *known == shape) {
            Some((_, nodes)) => nodes.push(node),
            None => shapes.push((shape, vec![node])),
        }
    }
    if shapes.is_empty() {
        out.push(Finding::Problem("[prices] stranded is on, but sinfo shows no node with GPUs".into()));
    }
    for (shape, nodes) in &shapes {
        let per_hour: gputokens::Tokens = shape
            .milli_gpus
            .iter()
            .map(|(t, m)| {
                gputokens::pricing::cost_of(config.prices.applied(t).per_gpu_hour, *m, 3600).unwrap_or_default()
            })
            .sum();
        let named = match nodes.len() {
            1..=4 => nodes.join(", "),
            n => format!("{} and {} more", nodes[..3].join(", "), n - 3),
        };
        out.push(Finding::Ok(format!(
            "[prices] stranded: {named}: {} CPUs, {} MB, {} GPUs ({per_hour}/h): a GPU job holding all of a \
             node's {} pays {per_hour}/h",
            shape.cpus,
            shape.mem_mb,
            shape.gpus(),
            parts.iter().map(|p| p.name()).collect::<Vec<_>>().join(" or ")
        )));
    }
    out
}

fn deprioritizing(config: &Config, facts: &SlurmFacts) -> Finding {
    let priority = setting(facts, "PriorityType");
    let multifactor = priority == "priority/multifactor";
    match &config.admission.deprioritize {
        Deprioritize::Nice(n) => Finding::Ok(format!("deprioritize = nice (+{n}): every priority plugin honours it")),
        Deprioritize::SiteFactor(_) if !multifactor => Finding::Problem(format!(
            "deprioritize = site_factor needs PriorityType=priority/multifactor (it is {priority}): overdraft jobs \
             are not lowered"
        )),
        Deprioritize::SiteFactor(f) => {
            Finding::Ok(format!("deprioritize = site_factor ({f}) under priority/multifactor"))
        }
        Deprioritize::Qos(qos) => {
            let exists = facts.qos.as_ref().is_some_and(|all| all.contains(qos));
            let weight: u64 = setting(facts, "PriorityWeightQOS").parse().unwrap_or(0);
            if !exists {
                Finding::Problem(format!(
                    "deprioritize = qos, but QOS '{qos}' does not exist (sacctmgr add qos {qos} Priority=0): \
                     overdraft jobs are refused by Slurm"
                ))
            } else if !multifactor || weight == 0 {
                Finding::Problem(format!(
                    "deprioritize = qos ('{qos}') lowers nothing without priority/multifactor and PriorityWeightQOS \
                     (PriorityType is {priority}, PriorityWeightQOS {weight})"
                ))
            } else {
                Finding::Ok(format!("deprioritize = qos: '{qos}' exists and PriorityWeightQOS is {weight}"))
            }
        }
    }
}

fn spank(config: &Config, facts: &SlurmFacts) -> Finding {
    let plugstack = facts.plugstack.display();
    let Some(line) = &facts.spank else {
        return Finding::Problem(format!(
            "{plugstack} (on this host) loads no spank_gputokens.so: sbatch shows no balance line, and the agent \
             learns a job's GPUs only from processes it can see (see slurm-conf/plugstack.conf.d/gputokens.conf)"
        ));
    };
    let records = Path::new(line.arg("jobs_dir").unwrap_or(gputokens::config::DEFAULT_JOBS_DIR));
    let kind = if line.required { "required" } else { "optional" };
    if records != config.agent.jobs_dir {
        return Finding::Problem(format!(
            "spank_gputokens.so ({}) records job GPUs in {} but [agent] jobs_dir is {}: the agent finds no records",
            line.file.display(),
            records.display(),
            config.agent.jobs_dir.display()
        ));
    }
    Finding::Ok(format!(
        "spank_gputokens.so ({kind}, {}) records job GPUs in {}, where [agent] jobs_dir reads them",
        line.file.display(),
        records.display()
    ))
}

fn slurm_user(config: &Config, facts: &SlurmFacts) -> Finding {
    // `SlurmUser = slurm(64030)`
    let running = setting(facts, "SlurmUser").split('(').next().unwrap_or("").trim();
    if running == config.slurm_user {
        Finding::Ok(format!("slurm_user '{running}' is slurmctld's SlurmUser"))
    } else {
        Finding::Problem(format!(
            "slurm_user is '{}' but slurmctld runs as '{running}' (SlurmUser): set slurm_user = \"{running}\" \
             so that the SlurmUser may run admin commands",
            config.slurm_user
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of `scontrol show config` as 22.05 prints them (the test cluster's).
    const SHOW_CONFIG: &str = "Configuration data as of 2026-11-22T09:40:00
AccountingStorageTRES   = cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,gres/gpu:a6000,gres/gpu:rtx2080
GresTypes               = gpu
JobSubmitPlugins        = gputokens
PluginDir               = /usr/lib/x86_64-linux-gnu/slurm-wlm
PriorityType            = priority/basic
PriorityWeightQOS       = 0
SlurmUser               = slurm(64030)

Cgroup Support Configuration:
AllowedRAMSpace         = 100.0%
";

    fn config(extra: &str) -> Config {
        let text = format!("slurm_user = \"slurm\"\n[prices]\nrtx2080 = 0.5\na6000 = 4\nh100 = 8\n{extra}");
        Config::parse(&text, Path::new("test.toml")).unwrap()
    }

    fn facts(show_config: &str) -> SlurmFacts {
        let types = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        SlurmFacts {
            config: parse_show_config(show_config),
            node_gpu_types: BTreeMap::from([
                ("n1".to_string(), types(&["rtx2080", "rtx3090"])),
                ("n2".to_string(), types(&["a6000"])),
                ("n3".to_string(), types(&["rtx3090"])),
            ]),
            node_shapes: gputokens::slurm::sinfo::node_shapes(
                "n1|16|8000|gpu:rtx2080:4,gpu:rtx3090:2\nn2|32|64000|gpu:a6000:2\nn3|32|64000|gpu:a6000:2\n",
            )
            .into_iter()
            .collect(),
            qos: Some(types(&["normal", "low"])),
            plugstack: PathBuf::from("/etc/slurm/plugstack.conf"),
            spank: Some(SpankLine {
                file: PathBuf::from("/etc/slurm/plugstack.conf.d/gputokens.conf"),
                required: false,
                args: vec![],
            }),
            controllers: ControllerFacts::default(),
            accounts: None,
        }
    }

    fn problems(findings: &[Finding]) -> Vec<&str> {
        findings
            .iter()
            .filter_map(|f| match f {
                Finding::Problem(text) => Some(text.as_str()),
                Finding::Ok(_) => None,
            })
            .collect()
    }

    /// `[prices] stranded`: what a job holding a whole node of each shape pays; memory counted under
    /// a Slurm that allocates none is a problem.
    #[test]
    fn stranding_prices_name_each_node_shape() {
        let found = findings(&config("stranded = [\"cpus\", \"memory\"]\n"), &facts(SHOW_CONFIG), |_| true);
        let texts: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(
            texts.contains(&"ok: [prices] stranded: n2, n3: 32 CPUs, 64000 MB, 2 GPUs (8/h): a GPU job holding all of a node's cpus or memory pays 8/h".to_string()),
            "{texts:#?}"
        );
        // rtx3090 is not listed: the highest price (8) prices it.
        assert!(
            texts.iter().any(|t| t.starts_with("ok: [prices] stranded: n1: 16 CPUs, 8000 MB, 6 GPUs (18/h)")),
            "{texts:#?}"
        );
        assert!(problems(&found).iter().any(|p| p.contains("counts memory, but SelectTypeParameters=")), "{texts:#?}");
        let cpus_only = findings(&config("stranded = [\"cpus\"]\n"), &facts(SHOW_CONFIG), |_| true);
        assert!(!problems(&cpus_only).iter().any(|p| p.contains("stranded")), "{cpus_only:#?}");
        let off = findings(&config(""), &facts(SHOW_CONFIG), |_| true);
        assert!(!off.iter().any(|f| f.to_string().contains("stranded")), "{off:#?}");
    }

    #[test]
    fn show_config_is_read_as_key_value_pairs() {
        let parsed = parse_show_config(SHOW_CONFIG);
        assert_eq!(parsed["SlurmUser"], "slurm(64030)");
        assert_eq!(parsed["AllowedRAMSpace"], "100.0%");
        assert!(!parsed.keys().any(|k| k.contains(' ')));
    }

    #[test]
    fn every_problem_names_the_setting_and_its_cost() {
        let found = findings(&config(""), &facts(SHOW_CONFIG), |_| true);
        let problems = problems(&found);
        assert_eq!(problems.len(), 2, "{found:#?}");
        // rtx3090 is on n1 and n3, neither recorded by type nor priced.
        assert!(problems[0].starts_with("AccountingStorageTRES lacks gres/gpu:rtx3090"), "{}", problems[0]);
        assert!(problems[0].contains("rtx3090 (on n1,n3)") && problems[0].contains("no type (8/GPU-hour"));
        assert!(problems[1].starts_with("[prices] lists no price for rtx3090 (on n1,n3)"), "{}", problems[1]);
        assert!(found.contains(&Finding::Ok("[prices] also lists types no node has: h100".into())));
        assert!(found.contains(&Finding::Ok("slurm_user 'slurm' is slurmctld's SlurmUser".into())));
    }

    #[test]
    fn a_default_price_is_a_deliberate_fallback() {
        let text = "slurm_user = \"slurm\"\ndefault_price = 2\n[prices]\nrtx2080 = 0.5\na6000 = 4\n";
        let config = Config::parse(text, Path::new("test.toml")).unwrap();
        let found = findings(&config, &facts(SHOW_CONFIG), |_| true);
        assert!(found.contains(&Finding::Ok(
            "[prices] lists no price for rtx3090 (on n1,n3): charged at default_price, 2/GPU-hour".into()
        )));
    }

    #[test]
    fn a_mig_slice_of_a_priced_gpu_type_is_priced() {
        let show = SHOW_CONFIG.replace("gres/gpu:rtx2080", "gres/gpu:rtx2080,gres/gpu:rtx3090,gres/gpu:h100_3g.40gb");
        let mut facts = facts(&show);
        let slices = ["h100_3g.40gb", "h100_1g.10gb+me", "a100_3g.20gb"].map(String::from);
        facts.node_gpu_types.insert("m1".into(), slices.into());
        let found = findings(&config("rtx3090 = 1"), &facts, |_| true);
        let slices =
            "[prices] prices MIG slices by their GPU type: h100_1g.10gb+me (1/7 of h100), h100_3g.40gb (3/7 of h100)";
        assert!(found.contains(&Finding::Ok(slices.into())), "{found:#?}");
        // The a100's slice has no a100 price to come from: unpriced, as any unknown type.
        let unpriced = problems(&found).into_iter().find(|p| p.starts_with("[prices] lists no price for"));
        assert!(
            unpriced.is_some_and(|p| p.starts_with("[prices] lists no price for a100_3g.20gb (on m1):")),
            "{found:#?}"
        );
        // The h100 is in use, by its slices.
        assert!(!found.iter().any(|f| matches!(f, Finding::Ok(t) if t.contains("types no node has"))), "{found:#?}");
        let energy_free =
            |found: &[Finding]| problems(found).into_iter().any(|p| p.contains("no energy to jobs on MIG"));
        assert!(!energy_free(&found), "energy is not priced");
        // The audit's N7: with energy priced, the slices' jobs pay none of it, and config check says so.
        let priced = findings(&config("rtx3090 = 1\nper_kwh = 0.5"), &facts, |_| true);
        assert!(energy_free(&priced), "{priced:#?}");
    }

    #[test]
    fn the_plugin_must_be_configured_and_installed() {
        let off = SHOW_CONFIG.replace("JobSubmitPlugins        = gputokens", "JobSubmitPlugins        = lua");
        let found = findings(&config(""), &facts(&off), |_| true);
        assert!(problems(&found)[0].starts_with("JobSubmitPlugins is 'lua', without gputokens"), "{found:#?}");
        let found = findings(&config(""), &facts(SHOW_CONFIG), |_| false);
        assert!(problems(&found)[0].contains("no job_submit_gputokens.so is in PluginDir"), "{found:#?}");
    }

    #[test]
    fn no_gpu_accounting_at_all() {
        let off = SHOW_CONFIG.replace(",gres/gpu,gres/gpu:a6000,gres/gpu:rtx2080", "");
        let found = findings(&config(""), &facts(&off), |_| true);
        assert!(problems(&found)[0].contains("lacks gres/gpu: slurmdbd records no GPU time"), "{found:#?}");
    }

    #[test]
    fn deprioritizing_must_lower_something() {
        let site_factor = config("[admission]\ndeprioritize = \"site_factor\"\n");
        let found = findings(&site_factor, &facts(SHOW_CONFIG), |_| true);
        assert!(problems(&found).iter().any(|p| p.starts_with("deprioritize = site_factor needs")), "{found:#?}");

        let multifactor = SHOW_CONFIG.replace("priority/basic", "priority/multifactor");
        let qos = config("[admission]\ndeprioritize = \"qos\"\nqos = \"low\"\n");
        let found = findings(&qos, &facts(&multifactor), |_| true);
        assert!(problems(&found).iter().any(|p| p.contains("lowers nothing")), "{found:#?}");
        let weighted = multifactor.replace("PriorityWeightQOS       = 0", "PriorityWeightQOS       = 1000");
        let found = findings(&qos, &facts(&weighted), |_| true);
        assert!(found.contains(&Finding::Ok("deprioritize = qos: 'low' exists and PriorityWeightQOS is 1000".into())));
        let missing = config("[admission]\ndeprioritize = \"qos\"\nqos = \"debtors\"\n");
        let found = findings(&missing, &facts(&weighted), |_| true);
        assert!(problems(&found).iter().any(|p| p.contains("QOS 'debtors' does not exist")), "{found:#?}");
    }

    #[test]
    fn slurm_user_must_be_slurmctlds() {
        let root = SHOW_CONFIG.replace("slurm(64030)", "root(0)");
        let found = findings(&config(""), &facts(&root), |_| true);
        assert!(problems(&found).iter().any(|p| p.starts_with("slurm_user is 'slurm' but slurmctld runs as 'root'")));
    }

    #[test]
    fn the_spank_plugin_must_record_where_the_agent_reads() {
        let found = findings(&config(""), &facts(SHOW_CONFIG), |_| true);
        assert!(found.contains(&Finding::Ok(
            "spank_gputokens.so (optional, /etc/slurm/plugstack.conf.d/gputokens.conf) records job GPUs in \
             /run/gputokens/jobs, where [agent] jobs_dir reads them"
                .into()
        )));
        let mut elsewhere = facts(SHOW_CONFIG);
        elsewhere.spank.as_mut().unwrap().args = vec!["jobs_dir=/var/spool/gpu-jobs".into()];
        let found = findings(&config(""), &elsewhere, |_| true);
        assert!(
            problems(&found)
                .iter()
                .any(|p| p
                    .contains("records job GPUs in /var/spool/gpu-jobs but [agent] jobs_dir is /run/gputokens/jobs")),
            "{found:#?}"
        );
        let mut none = facts(SHOW_CONFIG);
        none.spank = None;
        let found = findings(&config(""), &none, |_| true);
        assert!(problems(&found)
            .iter()
            .any(|p| p.starts_with("/etc/slurm/plugstack.conf (on this host) loads no spank_gputokens.so")));
    }

    #[test]
    fn plugstack_is_beside_slurm_conf_unless_named() {
        let mut config = parse_show_config(
            "PlugStackConfig         = (null)\nSLURM_CONF              = /opt/slurm/etc/slurm.conf\n",
        );
        assert_eq!(SlurmFacts::plugstack_path(&config), Path::new("/opt/slurm/etc/plugstack.conf"));
        config.insert("PlugStackConfig".into(), "/etc/spank.conf".into());
        assert_eq!(SlurmFacts::plugstack_path(&config), Path::new("/etc/spank.conf"));
    }
}
