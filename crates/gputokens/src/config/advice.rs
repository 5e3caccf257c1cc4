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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_ondemand_file_with_private_balances_is_named() {
        let parse = |text: &str| Config::parse(text, Path::new("t.toml")).unwrap();
        let on = "[ondemand]\nbalance_file = \"/var/lib/ood/gputokens.json\"\ngroup = \"ood\"\n";
        let found = advice(&parse(on));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].text.contains("/var/lib/ood/gputokens.json holds every user's and pool's balance and every member of group ood can read it"), "{found:?}");
        assert!(advice(&parse(&format!("balances_public = true\n{on}"))).is_empty());
        assert!(advice(&parse("")).is_empty());
    }
}
