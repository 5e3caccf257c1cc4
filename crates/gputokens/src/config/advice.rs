//! Settings that are valid each on its own but, together, likely not what a site meant: `config
//! check` prints each as a warning naming the keys and what to change (exit 0: the file works).

pub use super::warning::Advice;
use super::{Config, OnDemandReaders};

pub fn advice(config: &Config) -> Vec<Advice> {
    let mut out = Vec::new();
    if let Some(ondemand) = config.ondemand.as_ref().filter(|_| !config.balances_public) {
        let readers = match &ondemand.readers {
            OnDemandReaders::Everyone => "every user".to_string(),
            OnDemandReaders::Group(group) => format!("every member of group {group}"),
        };
        out.push(Advice {
            keys: "balances_public, ondemand.balance_file",
            text: format!(
                "balances_public is false, but {} holds every user's and pool's balance and {readers} can read it: \
                 OnDemand's dashboard needs every user to read it. Turn [ondemand] off to keep balances private, or \
                 set balances_public = true to say they are not",
                ondemand.balance_file.display()
            ),
        });
    }
    if !config.admission.enforce {
        out.push(Advice {
            keys: "admission.enforce",
            text: "shadow mode: every decision is made, logged (\"shadow mode, not enforced\" in slurmctld's log and \
                   accountd's) and counted (gputokens_shadow_decisions), and no GPU job is refused, deprioritized, \
                   limited, held or preempted. Set enforce = true once the site has seen whom it would stop"
                .into(),
        });
    }
    if config.prices.listed_types().next().is_none() {
        let price = config.prices.highest();
        out.push(Advice {
            keys: "prices, default_price",
            text: format!(
                "[prices] lists no GPU type: every GPU is charged {price} token(s) per GPU-hour{}. List each \
                 type Slurm names (sinfo -o %G), e.g. a6000 = 4",
                if config.prices.default_price().is_some() { " (default_price)" } else { ", the built-in price" }
            ),
        });
    }
    if let Some(signal) = config.preemption.signal.as_deref().filter(|s| !super::values::known_signal(s)) {
        out.push(Advice {
            keys: "preemption.signal",
            text: format!(
                "'{signal}' is not a signal scancel is known to take ({}, SIG in front or not, or a number from \
                 1 to 64): if scancel refuses it, every preemption that signals first fails",
                super::values::signal_names()
            ),
        });
    }
    if !config.prices.stranded().is_empty() && config.admission.mode == super::admission::Mode::Estimate {
        out.push(Advice {
            keys: "prices.stranded, admission.mode",
            text: "the estimate counts what a job asks for beside its GPUs (--cpus-per-task, --cpus-per-gpu, --mem, \
                   --exclusive, ...) against the worst node with its GPU type, not what Slurm gives it unasked \
                   (DefCpuPerGPU, DefMemPerCPU, DefMemPerGPU, a partition's OverSubscribe=EXCLUSIVE): such a job is \
                   charged more than it was admitted for, and can take its balance below the floor. Limit CPUs and \
                   memory per GPU in Slurm (MaxCPUsPerGPU, MaxMemPerGPU on the partition) where the floor must hold"
                .into(),
        });
    }
    super::advice_timing::advice(config, &mut out);
    super::advice_reach::advice(config, &mut out);
    out
}

/// What acts on jobs and nodes from the first cycle: a new site starts watching instead. For a first
/// config only (`config check` asks while there is no ledger yet): a site that turned them on after
/// watching is not told again at every start.
pub fn first_week(config: &Config) -> Vec<Advice> {
    let mut out = Vec::new();
    // In shadow mode accountd preempts nothing (a dry run whatever dry_run says).
    if config.preemption.enabled && !config.preemption.dry_run && config.admission.enforce {
        out.push(Advice {
            keys: "preemption.enabled, preemption.dry_run",
            text: "preemption requeues jobs from the first cycle: start with dry_run = true, read what it would have \
                   done (accountd admin actions, gputokens_preemptions_total), then set dry_run = false"
                .into(),
        });
    }
    if config.health.drain {
        out.push(Advice {
            keys: "health.drain",
            text: "drain = true drains a node and requeues the jobs on its GPU at the first fault the agents report \
                   (an XID of drain_xids, ECC, overheating): start a new site with drain = false until the agents' \
                   reports are trusted, then turn it on"
                .into(),
        });
    }
    out
}

/// Warnings that look at this host: users the config names that do not exist here. Only `config
/// check` calls it: the plugins read the same model inside slurmctld, where a lookup in the
/// directory server must not happen.
pub fn host_advice(
    config: &Config,
    user_exists: impl Fn(&str) -> bool,
    group_exists: impl Fn(&str) -> bool,
) -> Vec<Advice> {
    let mut out = Vec::new();
    if !user_exists(&config.slurm_user) {
        out.push(Advice {
            keys: "slurm_user",
            text: format!(
                "there is no user '{}' on this host: slurm_user must be slurm.conf's SlurmUser (the user slurmctld \
                 runs as), which may run admin commands and owns the state directory",
                config.slurm_user
            ),
        });
    }
    let missing: Vec<&str> = config.admins.users.iter().map(String::as_str).filter(|u| !user_exists(u)).collect();
    if !missing.is_empty() {
        out.push(Advice {
            keys: "admins.users",
            text: format!("no such user on this host: {} (a typo? each may change every balance)", missing.join(", ")),
        });
    }
    let missing: Vec<&str> = config.admins.groups.iter().map(String::as_str).filter(|g| !group_exists(g)).collect();
    if !missing.is_empty() {
        out.push(Advice {
            keys: "admins.groups",
            text: format!(
                "no such group on this host: {} (a typo? its members may change every balance)",
                missing.join(", ")
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A config no warning is about: prices listed, preemption a dry run, drain off.
    const QUIET: &str = "[prices]\na6000 = 4\n[preemption]\ndry_run = true\n[health]\ndrain = false\n";

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new("t.toml")).unwrap()
    }

    fn keys(found: &[Advice]) -> Vec<&'static str> {
        found.iter().map(|a| a.keys).collect()
    }

    #[test]
    fn a_quiet_config_has_no_warning() {
        assert!(advice(&parse(QUIET)).is_empty(), "{:?}", advice(&parse(QUIET)));
    }

    #[test]
    fn shadow_mode_is_named() {
        let found = advice(&parse(&format!("{QUIET}[admission]\nenforce = false\n")));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].keys == "admission.enforce" && found[0].text.starts_with("shadow mode: "), "{found:?}");
    }

    /// The newcomer review: a config with no `[prices]` charged 1 token per GPU-hour without a word.
    /// Stranding prices beside the estimate: the estimate foresees what a job asks for, not what
    /// Slurm gives it unasked, and says so.
    #[test]
    fn stranding_prices_with_the_estimate_are_warned_of() {
        let both = parse("[prices]\na6000 = 4\nstranded = [\"cpus\"]\n[admission]\nmode = \"estimate\"\n");
        assert!(advice(&both).iter().any(|a| a.keys == "prices.stranded, admission.mode"));
        let stranded_only = parse("[prices]\na6000 = 4\nstranded = [\"cpus\"]\n");
        assert!(advice(&stranded_only).iter().all(|a| a.keys != "prices.stranded, admission.mode"));
    }

    #[test]
    fn no_prices_are_named() {
        let found = advice(&parse(""));
        assert!(found.iter().any(|a| a.keys == "prices, default_price" && a.text.contains("charged 1 token(s)")));
        assert!(advice(&parse("[prices]\na6000 = 4\n")).iter().all(|a| a.keys != "prices, default_price"));
    }

    #[test]
    fn the_ondemand_file_with_private_balances_is_named() {
        let on = format!("{QUIET}[ondemand]\nbalance_file = \"/var/lib/ood/gputokens.json\"\ngroup = \"ood\"\n");
        let found = advice(&parse(&on));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].text.contains("/var/lib/ood/gputokens.json holds every user's and pool's balance and every member of group ood can read it"), "{found:?}");
        assert!(advice(&parse(&format!("balances_public = true\n{on}"))).is_empty());
    }

    /// The newcomer review: preemption and drain act from the first cycle of a new site.
    #[test]
    fn live_preemption_and_drain_are_named_for_a_first_week() {
        let found = first_week(&parse("[prices]\na6000 = 4\n"));
        assert_eq!(keys(&found), ["preemption.enabled, preemption.dry_run", "health.drain"], "the defaults act");
        assert!(found[0].text.starts_with("preemption requeues jobs from the first cycle: start with dry_run = true"));
        assert!(found[1].text.contains("start a new site with drain = false"), "{found:?}");
        let off = first_week(&parse("[prices]\na6000 = 4\n[preemption]\nenabled = false\n[health]\ndrain = false\n"));
        assert!(off.is_empty(), "{off:?}");
        // Shadow mode preempts nothing: only shadow mode itself is named.
        let shadow = parse("[prices]\na6000 = 4\n[health]\ndrain = false\n[admission]\nenforce = false\n");
        assert_eq!(keys(&[advice(&shadow), first_week(&shadow)].concat()), ["admission.enforce"]);
    }

    #[test]
    fn users_and_groups_missing_on_this_host_are_named() {
        let config = parse(&format!(
            "slurm_user = \"slrum\"\n{QUIET}[admins]\nusers = [\"alice\", \"nosuchadmin\", \"bob\"]\ngroups = [\"ops\", \"opps\"]\n"
        ));
        let known_users = ["alice", "bob", "slurm"];
        let found = host_advice(&config, |u| known_users.contains(&u), |g| g == "ops");
        assert_eq!(keys(&found), ["slurm_user", "admins.users", "admins.groups"]);
        assert!(found[0].text.starts_with("there is no user 'slrum' on this host: "), "{found:?}");
        assert!(found[1].text.starts_with("no such user on this host: nosuchadmin ("), "{found:?}");
        assert!(found[2].text.starts_with("no such group on this host: opps ("), "{found:?}");
        assert!(host_advice(&parse(QUIET), |u| u == "slurm", |_| false).is_empty());
    }
}
