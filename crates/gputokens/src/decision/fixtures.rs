//! What the decision tests decide from: a snapshot with users at the floor (alice), well above it
//! (bob, who also holds GPUs in the queue) and in overdraft (carol), and the uids the plugin's
//! watcher would map their names to.

use std::collections::HashMap;

use chrono::NaiveDate;

use crate::config::Admission;
use crate::config::Exempt;
use crate::decision::{Inputs, Standing, Verdict};
use crate::estimate::Commitment;
use crate::policy::BucketRules;
use crate::pricing::PriceTable;
use crate::slurm::partitions::Partition;
use crate::snapshot::{QueueSummary, Snapshot};
use crate::Tokens;

pub const NOW: i64 = 1_795_430_400;
pub const SLURM_UID: u32 = 64030;

pub fn snapshot() -> Snapshot {
    let rules = BucketRules { monthly: Tokens::ZERO, ..BucketRules::default() };
    let mut snap = Snapshot::new(NOW - 10, rules);
    snap.balances = HashMap::from([
        ("alice".to_string(), Tokens::from_micro(-10_400_000)),
        ("bob".to_string(), Tokens::whole(50)),
        ("carol".to_string(), Tokens::from_micro(-3_500_000)),
    ]);
    let prices = [("rtx2080".to_string(), Tokens::from_micro(500_000)), ("a6000".to_string(), Tokens::whole(4))];
    snap.prices = PriceTable::new(prices.into(), None);
    snap.partitions = vec![
        Partition { name: "gpu".into(), default: true, default_time: Some(3600), max_time: None },
        Partition { name: "long".into(), default: false, default_time: None, max_time: None },
    ];
    snap.default_accounts = HashMap::from([("bob".to_string(), "physics".to_string())]);
    let committed = |g, t| Commitment { milli_gpus: g, max_cost: Tokens::whole(t) };
    snap.queue = Some(QueueSummary {
        as_of: NOW - 10,
        committed: HashMap::from([("bob".to_string(), committed(2000, 16))]),
        ..Default::default()
    });
    snap
}

/// The balances as the plugin's watcher publishes them.
pub struct World {
    pub snapshot: Snapshot,
    pub names: HashMap<u32, String>,
    pub lookups_failed: bool,
}

impl World {
    pub fn standing(&self) -> Standing<'_> {
        Standing { snapshot: &self.snapshot, names: &self.names, lookups_failed: self.lookups_failed }
    }
}

pub fn world_of(snapshot: Snapshot) -> World {
    let names = HashMap::from([(1001, "alice".to_string()), (1002, "bob".to_string()), (1003, "carol".to_string())]);
    World { snapshot, names, lookups_failed: false }
}

pub fn world() -> World {
    world_of(snapshot())
}

pub fn config() -> Admission {
    Admission::default()
}

pub fn no_local(_: u32) -> Commitment {
    Commitment::default()
}

pub fn no_local_pool(_: &str) -> Commitment {
    Commitment::default()
}

static NO_NAMES: std::sync::LazyLock<HashMap<u32, String>> = std::sync::LazyLock::new(HashMap::new);
static NO_EXEMPTIONS: Exempt = Exempt { users: Vec::new(), accounts: Vec::new(), qos: Vec::new() };

/// The inputs with `world`'s balances (None: unavailable), asked by `submit_uid`.
pub fn inputs<'a>(world: Option<&'a World>, config: &'a Admission, submit_uid: u32) -> Inputs<'a> {
    Inputs {
        config,
        exempt: &NO_EXEMPTIONS,
        standing: world.map(World::standing),
        identity: world.map(World::standing),
        exempt_names: &NO_NAMES,
        today: NaiveDate::from_ymd_opt(2026, 11, 10).unwrap(),
        now: crate::time::local_midnight(NaiveDate::from_ymd_opt(2026, 11, 10).unwrap()) + 12 * 3600,
        check_interval: 1800,
        submit_uid,
        slurm_uid: SLURM_UID,
        admitted_since: &no_local,
        admitted_to_pool: &no_local_pool,
        lending: Default::default(),
    }
}

pub fn message(v: &Verdict) -> String {
    match v {
        Verdict::Accept { message, .. } => message.clone().unwrap_or_default(),
        Verdict::Reject { message } => message.clone(),
    }
}
