//! Slurm's account tree as slurmdbd keeps it: which account sits under which, who may run jobs
//! under each (users' associations), each user's default account, and each account's coordinators
//! (`sacctmgr add coordinator`), who manage the accounts under theirs too.

use std::collections::{BTreeMap, BTreeSet};

/// The columns asked of `sacctmgr -n -P show assoc format=...`.
pub const ASSOC_FORMAT: &str = "format=Account,ParentName,User";
/// The columns asked of `sacctmgr -n -P show account withcoord format=...`.
pub const COORD_FORMAT: &str = "format=Account,Coordinators";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountTree {
    /// account → the account above it (`root` has none).
    pub parents: BTreeMap<String, String>,
    /// account → the users associated with it.
    pub members: BTreeMap<String, BTreeSet<String>>,
    /// account → its own coordinators.
    pub coordinators: BTreeMap<String, BTreeSet<String>>,
}

impl AccountTree {
    /// Reads `sacctmgr -n -P show assoc format=Account,ParentName,User` (account rows have a
    /// parent and no user; user rows a user) and `show account withcoord format=Account,Coordinators`.
    pub fn parse(assoc: &str, coords: &str) -> AccountTree {
        let mut tree = AccountTree::default();
        for line in assoc.lines() {
            let mut f = line.split('|').map(str::trim);
            let (Some(account), parent, user) = (f.next().filter(|a| !a.is_empty()), f.next(), f.next()) else {
                continue;
            };
            match user.filter(|u| !u.is_empty()) {
                Some(user) => {
                    tree.members.entry(account.to_string()).or_default().insert(user.to_string());
                }
                None => {
                    tree.members.entry(account.to_string()).or_default();
                    if let Some(parent) = parent.filter(|p| !p.is_empty() && *p != account) {
                        tree.parents.insert(account.to_string(), parent.to_string());
                    }
                }
            }
        }
        for line in coords.lines() {
            let Some((account, names)) = line.split_once('|') else { continue };
            let names: BTreeSet<String> =
                names.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect();
            if !names.is_empty() {
                tree.coordinators.insert(account.trim().to_string(), names);
            }
        }
        tree
    }

    /// `account` and the accounts above it, nearest first (a cycle in damaged data ends the walk).
    pub fn ancestry<'a>(&'a self, account: &'a str) -> Vec<&'a str> {
        let mut out = vec![account];
        let mut at = account;
        while let Some(parent) = self.parents.get(at) {
            if out.contains(&parent.as_str()) {
                break;
            }
            out.push(parent);
            at = parent;
        }
        out
    }

    /// Whether `user` coordinates `account` or an account above it.
    pub fn coordinates(&self, user: &str, account: &str) -> bool {
        self.ancestry(account).iter().any(|a| self.coordinators.get(*a).is_some_and(|c| c.contains(user)))
    }

    /// Who coordinates `account`: its own coordinators, else the nearest above it that has some.
    pub fn coordinators_of(&self, account: &str) -> Vec<String> {
        let nearest = self.ancestry(account).into_iter().find_map(|a| self.coordinators.get(a));
        nearest.map(|c| c.iter().cloned().collect()).unwrap_or_default()
    }

    /// Each user's accounts.
    pub fn accounts_by_user(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (account, users) in &self.members {
            for user in users {
                out.entry(user.clone()).or_default().push(account.clone());
            }
        }
        out
    }

    /// Whether `user` is associated with `account`.
    pub fn is_member(&self, user: &str, account: &str) -> bool {
        self.members.get(account).is_some_and(|m| m.contains(user))
    }

    /// The accounts directly under `account`.
    pub fn children(&self, account: &str) -> Vec<&str> {
        self.parents.iter().filter(|(_, p)| p.as_str() == account).map(|(a, _)| a.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASSOC: &str = "root|||\nroot||root\nphysics|root|\nlab|physics|\nlab||alice\nlab||bob\ncourse|root|\n\
                         course||bob\ncourse||carol\n";
    const COORDS: &str = "root|\nphysics|pi\nlab|\ncourse|carol\n";

    #[test]
    fn reads_the_tree_members_and_coordinators() {
        let t = AccountTree::parse(ASSOC, COORDS);
        assert_eq!(t.ancestry("lab"), ["lab", "physics", "root"]);
        assert!(t.coordinates("pi", "lab"), "a coordinator of the account above");
        assert!(t.coordinates("carol", "course") && !t.coordinates("carol", "lab"));
        assert!(!t.coordinates("alice", "lab"));
        assert_eq!(t.coordinators_of("lab"), ["pi"]);
        assert_eq!(t.accounts_by_user()["bob"], ["course", "lab"]);
        assert!(t.is_member("alice", "lab") && !t.is_member("alice", "course"));
        assert_eq!(t.children("root"), ["course", "physics"]);
    }

    #[test]
    fn a_cycle_in_damaged_data_ends_the_walk() {
        let t = AccountTree::parse("a|b|\nb|a|\n", "");
        assert_eq!(t.ancestry("a"), ["a", "b"]);
        assert!(!t.coordinates("x", "a"));
    }
}
