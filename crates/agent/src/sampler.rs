//! One pass over every GPU through nvml-wrapper. Lives on the NVML thread (see `nvml`), which owns the
//! `Nvml` this borrows, so the XID event sets can be kept from one sample to the next.

use crate::map::{self, read};
use crate::source::{GpuHealth, GpuSample, MigSample, NodeSample, ProcessSample, SampleError};
use crate::{job_gpu_records, jobs};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, EventSet, GpmSample, Nvml};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// Bounds one drain of an event set, against a driver that never says "no more".
const MAX_EVENTS_PER_SAMPLE: usize = 1000;

pub struct Sampler<'n> {
    nvml: &'n Nvml,
    proc_root: PathBuf,
    jobs_dir: PathBuf,
    /// Trusted beside root as the owner of `jobs_dir` (the SlurmUser).
    jobs_dir_user: Option<String>,
    /// Whether `jobs_dir` was found untrusted at the last sample (logged when it changes).
    jobs_dir_untrusted: bool,
    /// One set per GPU, so a GPU that refuses registration costs only its own XIDs.
    events: HashMap<u32, EventSet<'n>>,
    no_events: HashSet<u32>,
    /// uuid and name last read per index, to name a GPU that has fallen off the bus.
    known: HashMap<u32, (String, String)>,
    /// The MIG devices last read per index, so that a GPU in MIG mode that has fallen off the bus
    /// still holds its slices' jobs (its fault is theirs).
    known_slices: HashMap<u32, Vec<MigSample>>,
    /// Timestamp of the newest utilization sample seen per GPU, so each sample covers only new ones.
    last_util: HashMap<u32, u64>,
    /// The last GPM sample of each MIG device (by UUID) on a GPU with GPM: the next one's SM
    /// utilization is taken between the two.
    gpm: HashMap<String, GpmSample<'n>>,
    /// What a MIG device's UUID says for as long as it exists: its profile and GPU instance (read
    /// once per device, not every sample).
    mig_identity: HashMap<String, MigIdentity>,
    jobs: jobs::JobCache,
    records: job_gpu_records::RecordCache,
}

impl<'n> Sampler<'n> {
    pub fn new(nvml: &'n Nvml, proc_root: PathBuf, jobs_dir: PathBuf, jobs_dir_user: Option<String>) -> Self {
        Sampler {
            nvml,
            proc_root,
            jobs_dir,
            jobs_dir_user,
            jobs_dir_untrusted: false,
            events: HashMap::new(),
            no_events: HashSet::new(),
            known: HashMap::new(),
            known_slices: HashMap::new(),
            last_util: HashMap::new(),
            gpm: HashMap::new(),
            mig_identity: HashMap::new(),
            jobs: jobs::JobCache::default(),
            records: job_gpu_records::RecordCache::default(),
        }
    }

    pub fn sample(&mut self) -> Result<NodeSample, SampleError> {
        let count = self.nvml.device_count().map_err(|e| SampleError::Nvml(e.to_string()))?;
        let mut gpus = Vec::new();
        let mut processes = Vec::new();
        for index in 0..count {
            let (gpu, procs) = self.gpu(index);
            gpus.push(gpu);
            processes.extend(procs);
        }
        // Checked every sample, not only at start (the audit's L8): a jobs_dir someone else can
        // write says which GPUs that someone's jobs hold, and whose process is whose.
        let untrusted =
            gputokens::file_trust::untrusted_with(&self.jobs_dir, "agent.jobs_dir", self.jobs_dir_user.as_deref());
        match (&untrusted, self.jobs_dir_untrusted) {
            (Some(why), false) => tracing::error!("{why}: its job records are not believed until that is fixed"),
            (None, true) => tracing::info!("agent.jobs_dir {} is trusted again", self.jobs_dir.display()),
            _ => {}
        }
        self.jobs_dir_untrusted = untrusted.is_some();
        let records = match untrusted {
            Some(_) => &[],
            None => self.records.read(&self.jobs_dir),
        };
        let held = job_gpu_records::holders(records, &gpus);
        let recorded = jobs::Recorded::of(records);
        for gpu in &mut gpus {
            gpu.jobs = held.gpus.get(&gpu.index).cloned().unwrap_or_default();
            for slice in &mut gpu.mig {
                slice.jobs = held.slices.get(&slice.uuid).cloned().unwrap_or_default();
            }
        }
        for p in &mut processes {
            // A process out of the agent's sight (another PID namespace) is the job's that holds its
            // GPU, or its MIG device, alone; one here that names no job (or is refused) is nobody's.
            let claim = self.jobs.job_of(&self.proc_root, p.pid);
            let holders = match &p.mig_uuid {
                Some(uuid) => held.slices.get(uuid),
                None => held.gpus.get(&p.gpu_index),
            };
            p.job_id = jobs::job_for_process(claim, holders.map(Vec::as_slice), &recorded);
        }
        self.jobs.retain(&processes.iter().map(|p| p.pid).collect());
        // A MIG device that is gone (its GPU left MIG mode, or was split again) keeps no sample.
        let slices: HashSet<&str> = gpus.iter().flat_map(|g| g.mig.iter().map(|m| m.uuid.as_str())).collect();
        self.gpm.retain(|uuid, _| slices.contains(uuid.as_str()));
        self.mig_identity.retain(|uuid, _| slices.contains(uuid.as_str()));
        Ok(NodeSample { time: chrono::Utc::now(), gpus, processes })
    }

    fn gpu(&mut self, index: u32) -> (GpuSample, Vec<ProcessSample>) {
        let mut gpu = GpuSample::empty(index);
        let procs = match self.nvml.device_by_index(index) {
            Ok(device) => {
                metrics(&device, &mut gpu);
                self.register(index, &device, &mut gpu.health);
                match self.mig_devices(&device, &mut gpu.health) {
                    // In MIG mode processes run on MIG devices, each asked of its own (the GPU's
                    // whole list would name them again); NVML gives them no utilization.
                    Some(slices) => {
                        let mut procs = Vec::new();
                        for (slice, infos) in slices {
                            let mut on_slice = map::processes(index, infos, None);
                            on_slice.iter_mut().for_each(|p| p.mig_uuid = Some(slice.uuid.clone()));
                            procs.extend(on_slice);
                            gpu.mig.push(slice);
                        }
                        procs
                    }
                    None => self.processes(index, &device, &mut gpu.health),
                }
            }
            Err(e) => {
                map::worsen(&mut gpu.health, &e);
                Vec::new()
            }
        };
        gpu.xids = self.drain(index, &mut gpu.health);
        match (&gpu.health, gpu.mig.is_empty()) {
            (GpuHealth::Lost, true) => {
                let remembered = self.known_slices.get(&index).cloned().unwrap_or_default();
                gpu.mig = remembered.into_iter().map(|m| MigSample { sm_utilization_percent: None, ..m }).collect();
            }
            (_, false) => {
                self.known_slices.insert(index, gpu.mig.clone());
            }
            (_, true) => {
                self.known_slices.remove(&index);
            }
        }
        match (&gpu.uuid, &gpu.name) {
            (Some(uuid), Some(name)) => {
                self.known.insert(index, (uuid.clone(), name.clone()));
            }
            _ => {
                if let Some((uuid, name)) = self.known.get(&index) {
                    gpu.uuid.get_or_insert_with(|| uuid.clone());
                    gpu.name.get_or_insert_with(|| name.clone());
                }
            }
        }
        (gpu, procs)
    }

    fn processes(&mut self, index: u32, device: &Device<'n>, h: &mut GpuHealth) -> Vec<ProcessSample> {
        let Some(infos) = read(h, device.running_compute_processes()) else { return Vec::new() };
        if infos.is_empty() {
            return Vec::new();
        }
        let since = self.last_util.get(&index).copied();
        let sm = match device.process_utilization_stats(since) {
            Ok(samples) => {
                if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
                    self.last_util.insert(index, newest);
                }
                Some(map::latest_sm(&samples))
            }
            // Nobody used the GPU since the last sample.
            Err(NvmlError::NotFound) => Some(HashMap::new()),
            Err(e) => {
                map::worsen(h, &e);
                None
            }
        };
        map::processes(index, infos, sm.as_ref())
    }

    /// The MIG devices of a GPU in MIG mode, each with its processes; None when MIG mode is off or
    /// the GPU (or driver) has no MIG.
    fn mig_devices(&mut self, device: &Device<'n>, h: &mut GpuHealth) -> Option<Vec<(MigSample, Vec<ProcessInfo>)>> {
        let mode = device.mig_mode().ok()?;
        if mode.current != 1 {
            return None;
        }
        // Asked quietly: a GPU without GPM (before Hopper) says nothing about its health.
        let gpm = device.gpm_support().unwrap_or(false);
        let slots = read(h, device.mig_device_count()).unwrap_or(0);
        let mut devices = Vec::new();
        for slot in 0..slots {
            // An index no MIG device has is NOT_FOUND: a GPU's instances need not be numbered densely.
            let Some(mig) = read(h, device.mig_device_by_index(slot)) else { continue };
            let Some(uuid) = read(h, mig.uuid()) else { continue };
            let identity = match self.mig_identity.get(&uuid) {
                Some(known) => known.clone(),
                None => {
                    let profile = read(h, mig.name()).as_deref().and_then(map::mig_profile);
                    let instance = crate::nvml_raw::gpu_instance_id(self.nvml, &mig).ok();
                    let identity = MigIdentity { profile, instance };
                    // Kept only once NVML named it: a failed read is asked again next sample.
                    if identity.profile.is_some() && identity.instance.is_some() {
                        self.mig_identity.insert(uuid.clone(), identity.clone());
                    }
                    identity
                }
            };
            devices.push((mig, uuid, identity));
        }
        // GPM measures a GPU instance: its figure is a MIG device's only where the instance holds
        // no other (one split into compute instances leaves their jobs unmeasured).
        let alone = |instance: u32| devices.iter().filter(|(_, _, d)| d.instance == Some(instance)).count() == 1;
        let measured: Vec<Option<u32>> =
            devices.iter().map(|(_, _, d)| d.instance.filter(|&i| gpm && alone(i))).collect();
        let mut slices = Vec::new();
        for ((mig, uuid, identity), instance) in devices.into_iter().zip(measured) {
            let memory = read(h, mig.memory_info());
            let sm_utilization_percent = match instance {
                Some(instance) => self.gpm_sm_util(device, instance, &uuid),
                None => {
                    self.gpm.remove(&uuid);
                    None
                }
            };
            let slice = MigSample {
                uuid,
                profile: identity.profile,
                memory_used_bytes: memory.as_ref().map(|m| m.used),
                memory_total_bytes: memory.as_ref().map(|m| m.total),
                sm_utilization_percent,
                jobs: Vec::new(),
            };
            let infos = read(h, mig.running_compute_processes()).unwrap_or_default();
            slices.push((slice, infos));
        }
        Some(slices)
    }

    /// The MIG device's SM utilization by GPM since its previous sample (none at its first, or where
    /// GPM does not answer: then its jobs are unmeasured).
    fn gpm_sm_util(&mut self, device: &Device<'n>, instance: u32, uuid: &str) -> Option<u32> {
        let Ok(now) = device.gpm_mig_sample(instance) else {
            self.gpm.remove(uuid);
            return None;
        };
        let before = self.gpm.insert(uuid.to_string(), now)?;
        let after = self.gpm.get(uuid)?;
        let metrics = gpm_metrics_get(self.nvml, &before, after, &[GpmMetricId::SmUtil]).ok()?;
        let value = metrics.into_iter().next()?.ok()?.value;
        value.is_finite().then(|| value.clamp(0.0, 100.0).round() as u32)
    }

    /// Registers the GPU for XID events on first use, and again after a failure other than "not
    /// supported" (e.g. while the GPU was lost).
    fn register(&mut self, index: u32, device: &Device<'n>, h: &mut GpuHealth) {
        if self.no_events.contains(&index) || self.events.contains_key(&index) {
            return;
        }
        let set = self.nvml.create_event_set().map_err(Into::into);
        match set.and_then(|set| device.register_events(EventTypes::CRITICAL_XID_ERROR, set)) {
            Ok(set) => {
                self.events.insert(index, set);
            }
            Err(e) if matches!(e.error, NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => {
                self.no_events.insert(index);
            }
            Err(e) => map::worsen(h, &e.error),
        }
    }

    /// XIDs since the last sample, also of a GPU that is now lost (falling off the bus is XID 79);
    /// `None` when the GPU is not registered.
    fn drain(&self, index: u32, h: &mut GpuHealth) -> Option<Vec<u64>> {
        let set = self.events.get(&index)?;
        let mut xids = Vec::new();
        for _ in 0..MAX_EVENTS_PER_SAMPLE {
            match set.wait(0) {
                Ok(event) => match event.event_data {
                    Some(XidError::Value(xid)) => xids.push(xid),
                    Some(XidError::Unknown) => xids.push(999),
                    None => {}
                },
                Err(NvmlError::Timeout) => break,
                Err(e) => {
                    map::worsen(h, &e);
                    break;
                }
            }
        }
        Some(xids)
    }
}

/// A MIG device's profile (from NVML's name of it) and GPU instance.
#[derive(Debug, Clone)]
struct MigIdentity {
    profile: Option<String>,
    instance: Option<u32>,
}

fn metrics(device: &Device<'_>, gpu: &mut GpuSample) {
    let h = &mut gpu.health;
    gpu.uuid = read(h, device.uuid());
    gpu.name = read(h, device.name());
    if let Some(u) = read(h, device.utilization_rates()) {
        gpu.utilization_percent = Some(u.gpu);
        gpu.memory_utilization_percent = Some(u.memory);
    }
    if let Some(m) = read(h, device.memory_info()) {
        gpu.memory_used_bytes = Some(m.used);
        gpu.memory_total_bytes = Some(m.total);
    }
    gpu.temperature_c = read(h, device.temperature(TemperatureSensor::Gpu));
    // Asked quietly: many GPUs and older drivers cannot say, which says nothing about their health.
    gpu.slowdown_temperature_c = device.temperature_threshold(TemperatureThreshold::Slowdown).ok();
    gpu.thermal_slowdown = device
        .current_throttle_reasons()
        .ok()
        .map(|r| r.intersects(ThrottleReasons::HW_THERMAL_SLOWDOWN | ThrottleReasons::SW_THERMAL_SLOWDOWN));
    gpu.power_w = read(h, device.power_usage()).map(map::power_w);
    gpu.energy_mj = read(h, device.total_energy_consumption());
    gpu.ecc_uncorrected = read(h, device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile));
}
