//! Settings that are valid each on its own but, together, likely not what a site meant: `config
//! check` prints each as a warning naming the keys and what to change (exit 0: the file works).

use super::{Config, OnDemandReaders};

/// One warning: the keys it is about, and what they do together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    pub keys: &'static str,
    pub text: String,
}

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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn shadow_mode_is_named() {
        let parse = |text: &str| Config::parse(text, Path::new("t.toml")).unwrap();
        let found = advice(&parse("[prices]\na6000 = 4\n[admission]\nenforce = false\n"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].keys == "admission.enforce" && found[0].text.starts_with("shadow mode: "), "{found:?}");
    }

    /// The newcomer review: a config with no `[prices]` charged 1 token per GPU-hour without a word.
    #[test]
    fn no_prices_are_named() {
        let parse = |text: &str| Config::parse(text, Path::new("t.toml")).unwrap();
        let found = advice(&parse(""));
        assert!(found.iter().any(|a| a.keys == "prices, default_price" && a.text.contains("charged 1 token(s)")));
        assert!(advice(&parse("[prices]\na6000 = 4\n")).iter().all(|a| a.keys != "prices, default_price"));
    }

    #[test]
    fn the_ondemand_file_with_private_balances_is_named() {
        let parse = |text: &str| Config::parse(text, Path::new("t.toml")).unwrap();
        let on = "[prices]\na6000 = 4\n[ondemand]\nbalance_file = \"/var/lib/ood/gputokens.json\"\ngroup = \"ood\"\n";
        let found = advice(&parse(on));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].text.contains("/var/lib/ood/gputokens.json holds every user's and pool's balance and every member of group ood can read it"), "{found:?}");
        assert!(advice(&parse(&format!("balances_public = true\n{on}"))).is_empty());
        assert!(advice(&parse("[prices]\na6000 = 4\n")).is_empty());
    }
}
