//! One balance on several clusters: every cluster of a shared ledger (`[clusters]`) must hold the
//! same `[bucket]` rules. Otherwise a user starts, is replenished and capped by whichever cluster's
//! accountd got there first, and each cluster's plugin refuses at its own floor. Each cluster's
//! leader writes its rules to the ledger (`bucket_rules:CLUSTER`) every check cycle and names each
//! cluster whose rules differ, in its log; `config check` names them too.

use gputokens::config::Config;
use gputokens::policy::BucketRules;
use ledger::{Ledger, LedgerError};

use crate::error::AccountdResult;
use crate::resources::Resources;

const KEY: &str = "bucket_rules";

/// The rules as they are written to the ledger and compared:
/// `initial=100 daily=1 monthly=30 cap=none floor=-10`.
pub fn rules_text(rules: &BucketRules) -> String {
    let cap = rules.cap.map_or_else(|| "none".to_string(), |cap| cap.to_string());
    format!("initial={} daily={} monthly={} cap={cap} floor={}", rules.initial, rules.daily, rules.monthly, rules.floor)
}

/// A sentence for each other cluster of the ledger whose recorded rules differ from `rules` (this
/// host's cluster's).
pub fn differences(config: &Config, ledger: &Ledger, rules: &BucketRules) -> Result<Vec<String>, LedgerError> {
    let ours = rules_text(rules);
    let local = config.clusters.local().unwrap_or_default();
    let mut found = Vec::new();
    for cluster in config.clusters.names.iter().filter(|c| c.as_str() != local) {
        match ledger.meta(&format!("{KEY}:{cluster}"))? {
            Some(theirs) if theirs != ours => found.push(format!(
                "cluster {cluster}'s accountd charges this ledger with [bucket] {theirs}; cluster {local}'s with \
                 {ours}: one balance needs the same [bucket] on every cluster"
            )),
            _ => {}
        }
    }
    Ok(found)
}

/// On a ledger of several clusters, each check cycle: records this cluster's rules and logs each
/// cluster whose rules differ; returns how many do.
pub fn check(res: &mut Resources) -> AccountdResult<usize> {
    let Some(local) = res.config.clusters.local().filter(|_| res.config.clusters.names.len() > 1) else {
        return Ok(0);
    };
    let rules = *res.ledger.rules();
    res.ledger.set_meta(&format!("{KEY}:{local}"), &rules_text(&rules))?;
    let found = differences(&res.config, &res.ledger, &rules)?;
    for difference in &found {
        tracing::error!("{difference}");
    }
    Ok(found.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputokens::Tokens;

    fn config(local: &str) -> Config {
        let text = format!(
            "[ledger]\nurl = \"mysql://gputokens@db/gputokens\"\n[clusters]\nnames = [\"old\", \"new\"]\nlocal = \"{local}\"\n"
        );
        Config::parse(&text, std::path::Path::new("test.toml")).unwrap()
    }

    /// cluster old recorded a floor of -20, new runs with -10: new names old's rules and its own;
    /// old itself, and rules alike, name nothing.
    #[test]
    fn a_cluster_whose_bucket_rules_differ_is_named_with_both() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(&dir.path().join("ledger.sqlite"), BucketRules::default()).unwrap();
        let theirs = BucketRules { floor: Tokens::whole(-20), ..BucketRules::default() };
        ledger.set_meta("bucket_rules:old", &rules_text(&theirs)).unwrap();

        let found = differences(&config("new"), &ledger, &BucketRules::default()).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("cluster old's accountd charges this ledger with [bucket] initial=100 daily=1 monthly=30 cap=none floor=-20"), "{}", found[0]);
        assert!(
            found[0].contains("cluster new's with initial=100 daily=1 monthly=30 cap=none floor=-10"),
            "{}",
            found[0]
        );
        assert_eq!(differences(&config("old"), &ledger, &theirs).unwrap(), Vec::<String>::new(), "its own rules");
        assert_eq!(differences(&config("new"), &ledger, &theirs).unwrap(), Vec::<String>::new(), "the same rules");
    }
}
