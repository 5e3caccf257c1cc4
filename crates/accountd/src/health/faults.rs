//! Which of a GPU's readings are faults worth draining for: pure, so the rules are unit-tested apart
//! from Slurm and the ledger.

use std::time::Duration;

use gputokens::config::Health;

use gputokens_node_report::{GpuHealth, GpuSample};

/// A fault that drains the node. `Lost`, `Ecc` and `Hot` are states: the same fault while the GPU
/// keeps reporting it. `Xid` is an event: the same fault within `[health] repeat_after` of its drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Lost,
    Ecc(u64),
    Xid(u64),
    /// Overheated (see [`overheated`]) for at least `for_at_least`: `throttled` when the GPU said it
    /// slows down for heat, else over `limit` °C (its slowdown threshold, or `[health] max_temperature`).
    Hot {
        celsius: Option<u32>,
        throttled: bool,
        limit: u32,
        for_at_least: Duration,
    },
}

impl Fault {
    /// The ledger's name of the fault (`gpu_faults.cause`).
    pub fn cause(&self) -> String {
        match self {
            Fault::Lost => LOST.into(),
            Fault::Ecc(_) => ECC.into(),
            Fault::Xid(xid) => format!("{XID_PREFIX}{xid}"),
            Fault::Hot { .. } => TEMPERATURE.into(),
        }
    }

    /// For the node's drain reason, after "GPU N".
    pub fn describe(&self) -> String {
        match self {
            Fault::Lost => "fell off the bus".into(),
            Fault::Ecc(n) => format!("has {n} uncorrectable ECC errors"),
            Fault::Xid(xid) => format!("reported XID {xid}"),
            Fault::Hot { celsius, throttled, limit, for_at_least } => {
                let d = humantime::format_duration(*for_at_least);
                let at = celsius.map_or(String::new(), |c| format!(" at {c} °C"));
                match throttled {
                    true => format!("has slowed down for heat{at} for {d}"),
                    false => format!("has been{at} (limit {limit} °C) for {d}"),
                }
            }
        }
    }
}

pub const LOST: &str = "lost";
pub const ECC: &str = "ecc";
pub const TEMPERATURE: &str = "temperature";
pub const XID_PREFIX: &str = "xid ";

/// What one GPU's sample says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub faults: Vec<Fault>,
    /// XIDs not in `drain_xids`: an application's errors, logged and counted only.
    pub ignored_xids: Vec<u64>,
}

/// Whether the sample shows the GPU overheated: when the GPU can say, only if it slows its clocks
/// down for heat (a workstation card runs at 88 °C as designed, until it throttles); else at or
/// above its slowdown threshold, or over `max_temperature` when it knows none. None: no reading.
pub fn overheated(gpu: &GpuSample, max_temperature: u32) -> Option<bool> {
    match (gpu.thermal_slowdown, gpu.temperature_c) {
        (Some(slowed), _) => Some(slowed),
        (None, Some(t)) => Some(gpu.slowdown_temperature_c.map_or(t > max_temperature, |limit| t >= limit)),
        (None, None) => None,
    }
}

/// Classifies one GPU's sample; `hot_for`: how long it has been overheated (see
/// [`crate::resources::HotSince`]), None when it is not.
pub fn classify(gpu: &GpuSample, health: &Health, hot_for: Option<Duration>) -> Findings {
    let mut found = Findings::default();
    if gpu.health == GpuHealth::Lost {
        found.faults.push(Fault::Lost);
    }
    if let Some(n) = gpu.ecc_uncorrected.filter(|n| *n > 0) {
        found.faults.push(Fault::Ecc(n));
    }
    for xid in gpu.xids.iter().flatten() {
        if health.drain_xids.contains(xid) {
            if !found.faults.contains(&Fault::Xid(*xid)) {
                found.faults.push(Fault::Xid(*xid));
            }
        } else if !found.ignored_xids.contains(xid) {
            found.ignored_xids.push(*xid);
        }
    }
    if hot_for.is_some_and(|d| d >= health.temperature_for) {
        found.faults.push(Fault::Hot {
            celsius: gpu.temperature_c,
            throttled: gpu.thermal_slowdown == Some(true),
            limit: gpu.slowdown_temperature_c.unwrap_or(health.max_temperature),
            for_at_least: health.temperature_for,
        });
    }
    found
}

/// Whether this sample shows the GPU without the state fault `cause` (so a recorded one has cleared):
/// back on the bus, an ECC count of 0 (the volatile count restarts with the driver), no longer
/// overheated. A reading the GPU could not give clears nothing; XIDs never clear this way.
pub fn cleared(gpu: &GpuSample, cause: &str, max_temperature: u32) -> bool {
    match cause {
        LOST => gpu.health != GpuHealth::Lost,
        ECC => gpu.ecc_uncorrected == Some(0),
        TEMPERATURE => overheated(gpu, max_temperature) == Some(false),
        _ => false,
    }
}

/// The name a GPU's faults are kept under: its UUID, or `index N` when it has none (or a UUID no real
/// GPU has: the report comes from the network).
pub fn gpu_key(gpu: &GpuSample) -> String {
    match gpu.uuid.as_deref() {
        Some(uuid)
            if !uuid.is_empty()
                && uuid.len() <= 96
                && uuid.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':')) =>
        {
            uuid.to_string()
        }
        _ => format!("index {}", gpu.index),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HotSince;

    fn health() -> Health {
        gputokens::Config::parse("", std::path::Path::new("t.toml")).unwrap().health
    }

    fn gpu(xids: &[u64]) -> GpuSample {
        let mut g = GpuSample::empty(2);
        g.uuid = Some("GPU-2".into());
        g.temperature_c = Some(50);
        g.ecc_uncorrected = Some(0);
        g.xids = Some(xids.to_vec());
        g
    }

    #[test]
    fn only_hardware_xids_are_faults() {
        let h = health();
        for xid in [48, 63, 64, 74, 79, 92, 94, 95, 119, 120] {
            let found = classify(&gpu(&[xid]), &h, None);
            assert_eq!(found.faults, vec![Fault::Xid(xid)], "XID {xid}");
            assert_eq!(found.faults[0].cause(), format!("xid {xid}"));
        }
        for xid in [13, 31, 43, 45, 999] {
            let found = classify(&gpu(&[xid]), &h, None);
            assert_eq!(found, Findings { faults: vec![], ignored_xids: vec![xid] }, "XID {xid}");
        }
        let found = classify(&gpu(&[13, 79, 13, 79, 31]), &h, None);
        assert_eq!(found, Findings { faults: vec![Fault::Xid(79)], ignored_xids: vec![13, 31] });
        assert_eq!(classify(&gpu(&[]), &h, None), Findings::default());
    }

    #[test]
    fn drain_xids_is_the_site_s_list() {
        let h = Health { drain_xids: [13].into_iter().collect(), ..health() };
        assert_eq!(classify(&gpu(&[13]), &h, None).faults, vec![Fault::Xid(13)]);
        assert_eq!(classify(&gpu(&[79]), &h, None).ignored_xids, vec![79]);
    }

    #[test]
    fn lost_and_ecc_drain_as_before() {
        let h = health();
        let mut g = gpu(&[79]);
        g.health = GpuHealth::Lost;
        g.ecc_uncorrected = None;
        g.temperature_c = None;
        assert_eq!(classify(&g, &h, None).faults, vec![Fault::Lost, Fault::Xid(79)]);
        let mut g = gpu(&[]);
        g.ecc_uncorrected = Some(2);
        let found = classify(&g, &h, None);
        assert_eq!(found.faults, vec![Fault::Ecc(2)]);
        assert_eq!(found.faults[0].describe(), "has 2 uncorrectable ECC errors");
    }

    #[test]
    fn heat_drains_only_when_it_lasts() {
        let h = health(); // 85 °C for 5m
        let mut hot = HotSince::default();
        let mut seen = |t: Option<u32>, at: i64| {
            let mut g = gpu(&[]);
            g.temperature_c = t;
            hot.observe("n1", "GPU-2", overheated(&g, h.max_temperature), at)
        };
        assert_eq!(seen(Some(90), 1000), Some(Duration::ZERO));
        assert_eq!(seen(Some(95), 1200), Some(Duration::from_secs(200)));
        assert_eq!(seen(None, 1250), None, "no reading: no verdict");
        assert_eq!(seen(Some(95), 1300), Some(Duration::from_secs(300)), "and the clock keeps running");
        assert_eq!(seen(Some(85), 1310), None, "at the limit resets");
        assert_eq!(seen(Some(86), 1320), Some(Duration::ZERO));
        assert_eq!(seen(Some(86), 1310), Some(Duration::ZERO), "an older sample counts as no time");

        let mut g = gpu(&[]);
        g.temperature_c = Some(95);
        assert_eq!(classify(&g, &h, Some(Duration::from_secs(299))).faults, vec![]);
        let found = classify(&g, &h, Some(Duration::from_secs(300)));
        assert_eq!(found.faults.len(), 1);
        assert_eq!(found.faults[0].cause(), "temperature");
        assert_eq!(found.faults[0].describe(), "has been at 95 °C (limit 85 °C) for 5m");
        // Each GPU has its own clock.
        let mut hot = HotSince::default();
        hot.observe("n1", "GPU-2", Some(true), 0);
        assert_eq!(hot.observe("n1", "GPU-3", Some(true), 100), Some(Duration::ZERO));
        assert_eq!(hot.observe("n2", "GPU-2", Some(true), 100), Some(Duration::ZERO));
        assert_eq!(hot.observe("n1", "GPU-2", Some(true), 100), Some(Duration::from_secs(100)));
    }

    #[test]
    fn a_gpu_that_can_say_is_overheated_only_when_it_slows_down_for_heat() {
        let h = health();
        let mut g = gpu(&[]);
        // A workstation card at 88 °C, below its slowdown threshold, not throttling: fine.
        g.temperature_c = Some(88);
        g.slowdown_temperature_c = Some(93);
        assert_eq!(overheated(&g, h.max_temperature), Some(false), "under its own threshold");
        g.thermal_slowdown = Some(false);
        g.temperature_c = Some(95);
        assert_eq!(overheated(&g, h.max_temperature), Some(false), "hot, but not slowing down");
        g.thermal_slowdown = Some(true);
        assert_eq!(overheated(&g, h.max_temperature), Some(true));
        let found = classify(&g, &h, Some(Duration::from_secs(300)));
        assert_eq!(found.faults[0].describe(), "has slowed down for heat at 95 °C for 5m");
        assert!(!cleared(&g, TEMPERATURE, 85));
        g.thermal_slowdown = Some(false);
        assert!(cleared(&g, TEMPERATURE, 85), "no longer throttling");
        // No throttle reasons, but a threshold: at or above it.
        g.thermal_slowdown = None;
        g.temperature_c = Some(93);
        assert_eq!(overheated(&g, h.max_temperature), Some(true));
        assert_eq!(
            classify(&g, &h, Some(Duration::from_secs(300))).faults[0].describe(),
            "has been at 93 °C (limit 93 °C) for 5m"
        );
    }

    #[test]
    fn a_state_fault_clears_when_a_sample_shows_the_gpu_without_it() {
        let mut g = gpu(&[]);
        assert!(cleared(&g, LOST, 85) && cleared(&g, ECC, 85) && cleared(&g, TEMPERATURE, 85));
        assert!(!cleared(&g, "xid 79", 85), "XIDs expire, they do not clear");
        g.health = GpuHealth::Lost;
        g.ecc_uncorrected = None;
        g.temperature_c = None;
        assert!(!cleared(&g, LOST, 85) && !cleared(&g, ECC, 85) && !cleared(&g, TEMPERATURE, 85));
        g.ecc_uncorrected = Some(1);
        g.temperature_c = Some(86);
        assert!(!cleared(&g, ECC, 85) && !cleared(&g, TEMPERATURE, 85));
    }

    #[test]
    fn gpus_are_kept_by_uuid_else_by_index() {
        let mut g = gpu(&[]);
        assert_eq!(gpu_key(&g), "GPU-2");
        g.uuid = None;
        assert_eq!(gpu_key(&g), "index 2");
        g.uuid = Some("GPU-1 state=resume".into());
        assert_eq!(gpu_key(&g), "index 2");
    }
}
