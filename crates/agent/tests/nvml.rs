//! The agent's real nvml-wrapper code path against fake-nvml's `libnvidia_ml.so`, with processes that
//! really run, so their job is read from the real /proc.

use gputokens_agent::jobs;
use gputokens_agent::{GpuHealth, GpuSource, NodeSample, NvmlOptions, NvmlSource, OpenError};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{LazyLock, Mutex, MutexGuard};

const GIB: u64 = 1 << 30;

/// The fake reads `FAKE_NVML_STATE`, which is process-wide: it is set once, and tests using it take turns.
struct Fixture {
    _dir: tempfile::TempDir,
    state: PathBuf,
}

static FIXTURE: LazyLock<Mutex<Fixture>> = LazyLock::new(|| {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.toml");
    std::fs::write(&state, "").unwrap();
    std::env::set_var("FAKE_NVML_STATE", &state);
    Mutex::new(Fixture { _dir: dir, state })
});

fn fixture() -> MutexGuard<'static, Fixture> {
    FIXTURE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fixture {
    /// Atomically, since the fake re-reads the file on every call.
    fn write(&self, text: &str) {
        let tmp = self.state.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.state).unwrap();
    }
}

/// fake-nvml's library: target/<profile>/deps/ when cargo built it as this test's dev-dependency,
/// target/<profile>/ after `cargo build --workspace`.
fn fake_lib() -> PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_owned();
    let candidates = [deps.join("libnvidia_ml.so"), deps.parent().unwrap().join("libnvidia_ml.so")];
    let found = candidates.iter().find(|lib| lib.exists());
    found.cloned().unwrap_or_else(|| panic!("no {:?}: run `cargo build --workspace` (it builds fake-nvml)", candidates))
}

/// Children killed and reaped on drop, even when an assertion fails.
struct Sleepers(Vec<Child>);

impl Sleepers {
    fn spawn(job: Option<&str>, n: usize) -> Self {
        Sleepers(
            (0..n)
                .map(|_| {
                    let mut cmd = Command::new("sleep");
                    cmd.arg("30").env_remove("SLURM_JOB_ID");
                    if let Some(job) = job {
                        cmd.env("SLURM_JOB_ID", job);
                    }
                    cmd.spawn().unwrap()
                })
                .collect(),
        )
    }

    fn pid(&self, i: usize) -> u32 {
        self.0[i].id()
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Children inherit this test's cgroup; were it a Slurm job's, that job would rightly win over the environment.
fn expected_job(from_env: Option<&str>) -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    // (a SLUID's job the agent finds only in spank_gputokens.so's records, which this test has none of)
    match jobs::job_from_cgroup(&own) {
        Some(cgroup) => cgroup.job_id().map(str::to_owned),
        None => from_env.map(str::to_owned),
    }
}

/// GPUs 0-3 are A6000s (ECC, an energy counter), 4-7 RTX 2080 Tis (neither: left out). GPU `lost` is off the bus (and logged
/// XID 79, as real ones do); `xids` are GPU 2's XID log.
fn state(lost: Option<usize>, xids: &[u64], procs: &[(u32, u32, u64, Option<u32>)]) -> String {
    let mut s = String::new();
    for i in 0..8u64 {
        let (name, total, ecc) = if i < 4 {
            ("NVIDIA RTX A6000", 48 * GIB, format!("ecc_uncorrected = {i}\nenergy_mj = {}\n", 1_000_000 * (i + 1)))
        } else {
            ("NVIDIA GeForce RTX 2080 Ti", 11 * GIB, String::new())
        };
        s += &format!(
            "[[gpu]]\nuuid = \"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd\"\nname = \"{name}\"\n\
             util_gpu = {}\nutil_mem = {}\nmem_used = {}\nmem_total = {total}\ntemp = {}\npower_mw = {}\n{ecc}\
             lost = {}\nxids = {:?}\n",
            10 + 10 * i,
            5 * i,
            i * GIB,
            40 + i,
            100_000 + 1_500 * i,
            lost == Some(i as usize),
            match i {
                2 => xids,
                _ if lost == Some(i as usize) => &[79],
                _ => &[],
            },
        );
    }
    for (pid, gpu, mem, sm) in procs {
        s += &format!("[[process]]\npid = {pid}\ngpu = {gpu}\nused_memory = {mem}\n");
        if let Some(sm) = sm {
            s += &format!("sm_util = {sm}\n");
        }
    }
    s
}

fn open() -> NvmlSource {
    NvmlSource::open(NvmlOptions::with_lib_path(fake_lib())).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn eight_gpus_their_processes_and_jobs() {
    let fx = fixture();
    let job = Sleepers::spawn(Some("4242"), 3);
    let outside = Sleepers::spawn(None, 1);
    let procs = [
        (job.pid(0), 0, 3 * GIB, Some(55)),
        (job.pid(1), 1, GIB, None), // idle in the window
        (job.pid(2), 5, GIB, Some(90)),
        (job.pid(0), 3, 2 * GIB, Some(10)), // one process on two GPUs
        (outside.pid(0), 7, GIB, Some(1)),
    ];
    fx.write(&state(None, &[13], &procs));
    // The prolog's record of job 4242 (root's here, as the test's processes are): its processes'
    // SLURM_JOB_ID is taken for a job recorded on the node for their owner.
    let records = tempfile::tempdir().unwrap();
    std::fs::write(records.path().join("4242"), "gpus=0,1,3,5\nuid=0\n").unwrap();
    let options = NvmlOptions { jobs_dir: records.path().to_owned(), ..NvmlOptions::with_lib_path(fake_lib()) };
    let mut source = NvmlSource::open(options).unwrap_or_else(|e| panic!("{e}"));

    let first = source.sample().unwrap();
    assert_eq!(first.gpus.len(), 8);
    for (i, gpu) in first.gpus.iter().enumerate() {
        let n = i as u64;
        assert_eq!(gpu.index as usize, i);
        assert_eq!(gpu.health, GpuHealth::Ok, "GPU {i}");
        assert_eq!(gpu.uuid.as_deref(), Some(format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd").as_str()));
        assert_eq!(gpu.name.as_deref(), Some(if i < 4 { "NVIDIA RTX A6000" } else { "NVIDIA GeForce RTX 2080 Ti" }));
        assert_eq!(gpu.utilization_percent, Some(10 + 10 * i as u32));
        assert_eq!(gpu.memory_utilization_percent, Some(5 * i as u32));
        assert_eq!(gpu.memory_used_bytes, Some(n * GIB));
        assert_eq!(gpu.memory_total_bytes, Some(if i < 4 { 48 * GIB } else { 11 * GIB }));
        assert_eq!(gpu.temperature_c, Some(40 + i as u32));
        assert_eq!(gpu.power_w, Some(100.0 + 1.5 * i as f64));
        assert_eq!(gpu.ecc_uncorrected, if i < 4 { Some(n) } else { None }, "not supported is no fault");
        assert_eq!(gpu.energy_mj, if i < 4 { Some(1_000_000 * (n + 1)) } else { None });
        assert_eq!(gpu.xids, Some(vec![]), "XIDs from before registration are not reported");
    }

    let want_job = expected_job(Some("4242"));
    let mut got: Vec<_> =
        first.processes.iter().map(|p| (p.pid, p.gpu_index, p.used_memory_bytes, p.sm_utilization_percent)).collect();
    got.sort();
    let mut want: Vec<_> =
        procs.iter().map(|&(pid, gpu, mem, sm)| (pid, gpu, Some(mem), Some(sm.unwrap_or(0)))).collect();
    want.sort();
    assert_eq!(got, want);
    for p in &first.processes {
        let expected = if p.pid == outside.pid(0) { expected_job(None) } else { want_job.clone() };
        assert_eq!(p.job_id, expected, "pid {}", p.pid);
    }

    // GPU 5 falls off the bus and GPU 2 logs two XIDs, while the source keeps running.
    fx.write(&state(Some(5), &[13, 79, 48], &procs));
    let second = source.sample().unwrap();
    let lost = &second.gpus[5];
    assert_eq!(lost.health, GpuHealth::Lost);
    assert_eq!(lost.uuid, first.gpus[5].uuid, "a lost GPU is still named by what was last read");
    assert_eq!((lost.utilization_percent, lost.memory_used_bytes, lost.power_w), (None, None, None));
    assert_eq!(lost.xids, Some(vec![79]), "its event set still answers");
    assert!(second.processes.iter().all(|p| p.gpu_index != 5), "no processes read from a lost GPU");
    assert_eq!(second.processes.len(), procs.len() - 1);
    assert_eq!(second.gpus[2].xids, Some(vec![79, 48]));
    assert!(second.gpus.iter().filter(|g| g.index != 2 && g.index != 5).all(|g| g.xids == Some(vec![])));
    assert_eq!(second.gpus.iter().filter(|g| g.health != GpuHealth::Ok).count(), 1);

    let third = source.sample().unwrap();
    assert_eq!(third.gpus[2].xids, Some(vec![]), "each XID is reported once");

    let json = serde_json::to_string(&second).unwrap();
    assert_eq!(serde_json::from_str::<NodeSample>(&json).unwrap(), second);
}

/// As NVML gave them on an H100 that two busy processes time-sliced: 53 % and 47 %, beside an idle one.
#[test]
fn processes_sharing_a_gpu_each_get_their_own_sm_utilization() {
    let fx = fixture();
    let procs = Sleepers::spawn(None, 3);
    let on_gpu0 = [(procs.pid(0), 0, GIB, Some(53)), (procs.pid(1), 0, GIB, Some(47)), (procs.pid(2), 0, GIB, Some(0))];
    fx.write(&state(None, &[], &on_gpu0));
    let mut source = open();
    let sample = source.sample().unwrap();
    let mut got: Vec<_> = sample.processes.iter().map(|p| (p.pid, p.sm_utilization_percent)).collect();
    got.sort();
    let mut want: Vec<_> = on_gpu0.iter().map(|&(pid, _, _, sm)| (pid, sm)).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn missing_library_is_a_clear_error() {
    let path = "/nonexistent/libnvidia-ml.so.1";
    let err = NvmlSource::open(NvmlOptions::with_lib_path(path)).err().expect("no library, no source");
    assert!(matches!(err, OpenError::NoLibrary { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with(&format!("no NVML library found at {path}: ")), "{message}");
}

#[test]
fn driver_not_loaded_is_an_init_error() {
    let fx = fixture();
    fx.write("init_error = 9\n");
    let err = NvmlSource::open(NvmlOptions::with_lib_path(fake_lib())).err().expect("init fails");
    let message = err.to_string();
    assert!(matches!(err, OpenError::Init { .. }), "{err:?}");
    assert!(message.contains("the NVIDIA driver is not loaded"), "{message}");
}

#[test]
fn no_gpus_is_an_empty_sample() {
    let fx = fixture();
    fx.write("");
    let sample = open().sample().unwrap();
    assert!(sample.gpus.is_empty() && sample.processes.is_empty());
}

/// A PID with no /proc entry here, as a process in another PID namespace (a container) looks.
fn unseen_pid() -> u32 {
    (4_000_000..).find(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()).unwrap()
}

#[test]
fn recorded_gpus_belong_to_their_jobs_while_the_records_last() {
    let fx = fixture();
    let visible = Sleepers::spawn(Some("4242"), 1);
    let hidden = unseen_pid();
    // A process on job 77's GPU 3 whose environment claims job 78 (another user's, on GPU 5).
    let liar = Sleepers::spawn(Some("78"), 1);
    let procs =
        [(visible.pid(0), 0, GIB, Some(50)), (hidden, 2, 2 * GIB, Some(70)), (liar.pid(0), 3, 3 * GIB, Some(5))];
    fx.write(&state(None, &[], &procs));
    let records = tempfile::tempdir().unwrap();
    // Job 77 holds GPUs 2 and 3, named by UUID; job 78's record names Slurm's index 9, but its UUID
    // is NVML's GPU 5, which wins.
    std::fs::write(
        records.path().join("77"),
        "gpus=2,3\nuuids=GPU-00000002-aaaa-bbbb-cccc-dddddddddddd,GPU-00000003-aaaa-bbbb-cccc-dddddddddddd\n",
    )
    .unwrap();
    // Job 78 is bob's (uid 1002); job 4242 root's, on GPU 0.
    std::fs::write(records.path().join("78"), "gpus=9\nuuids=GPU-00000005-aaaa-bbbb-cccc-dddddddddddd\nuid=1002\n")
        .unwrap();
    std::fs::write(records.path().join("4242"), "gpus=0\nuid=0\n").unwrap();
    let options = NvmlOptions { jobs_dir: records.path().to_owned(), ..NvmlOptions::with_lib_path(fake_lib()) };
    let mut source = NvmlSource::open(options).unwrap_or_else(|e| panic!("{e}"));

    let sample = source.sample().unwrap();
    let held: Vec<(u32, Vec<String>)> =
        sample.gpus.iter().filter(|g| !g.jobs.is_empty()).map(|g| (g.index, g.jobs.clone())).collect();
    let held_by = |job: &str| vec![job.to_string()];
    assert_eq!(held, [(0, held_by("4242")), (2, held_by("77")), (3, held_by("77")), (5, held_by("78"))]);
    let job_of = |pid: u32| sample.processes.iter().find(|p| p.pid == pid).and_then(|p| p.job_id.clone());
    assert_eq!(job_of(hidden).as_deref(), Some("77"), "the process the agent cannot see is its GPU's job's");
    assert_eq!(job_of(visible.pid(0)), expected_job(Some("4242")));
    // Its environment is its own word, refused: it is nobody's, not the job holding its GPU (the
    // audit's N2: that job would pay for another user's work). Only the unseen process is 77's.
    assert_eq!(job_of(liar.pid(0)), expected_job(None));

    // GPU utilization is 10 + 10 × index; memory in use i GiB (state above).
    let jobs = gputokens_node_report::job_use::job_use(&sample);
    let j77 = &jobs["77"];
    assert_eq!((j77.percent, j77.gpus), (None, 2), "unmeasured: nobody's process uses its GPU 3");
    assert_eq!(j77.memory_bytes, 2 * GIB + 3 * GIB, "its process on GPU 2, GPU 3's in use (none of its in sight)");
    assert_eq!((jobs["78"].percent, jobs["78"].memory_bytes), (Some(60.0), 5 * GIB));

    // Job 77 ends: its epilog removes the record, and its GPUs are nobody's again.
    std::fs::remove_file(records.path().join("77")).unwrap();
    let sample = source.sample().unwrap();
    assert!(sample.gpus.iter().filter(|g| g.index != 5 && g.index != 0).all(|g| g.jobs.is_empty()));
    assert_eq!(sample.processes.iter().find(|p| p.pid == hidden).unwrap().job_id, None);
    assert!(!gputokens_node_report::job_use::job_use(&sample).contains_key("77"));
}

/// The audit's L8: the agent checked `jobs_dir` only at start. A directory made writable by others
/// later (or a parent of it) could tell the agent any job holds any GPU: its records are not
/// believed from the next sample on, and again once it is fixed.
#[test]
fn records_in_a_jobs_dir_others_may_write_are_not_believed() {
    use std::os::unix::fs::PermissionsExt;
    let fx = fixture();
    fx.write(&state(None, &[], &[]));
    let records = tempfile::tempdir().unwrap();
    std::fs::write(records.path().join("4242"), "gpus=0\nuid=0\n").unwrap();
    let options = NvmlOptions { jobs_dir: records.path().to_owned(), ..NvmlOptions::with_lib_path(fake_lib()) };
    let mut source = NvmlSource::open(options).unwrap_or_else(|e| panic!("{e}"));
    let holders = |source: &mut NvmlSource| source.sample().unwrap().gpus[0].jobs.clone();
    assert_eq!(holders(&mut source), ["4242"]);
    std::fs::set_permissions(records.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(holders(&mut source).is_empty(), "a jobs_dir every user may write is believed");
    std::fs::set_permissions(records.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(holders(&mut source), ["4242"]);
}

/// An A100 in MIG mode beside a whole GPU: the agent reports each MIG device (UUID, profile from
/// NVML's name, memory), the jobs recorded on each by its `MIG-…` UUID, their processes on it
/// (asked of the MIG device, as the GPU's own list would name them twice), the GPU holding every
/// slice's job (its faults are theirs), and each slice's job measured by GPM between two samples
/// of its GPU instance where the GPU has GPM, else unmeasured; never given the GPU's figure.
#[test]
fn mig_devices_their_processes_and_jobs() {
    let fx = fixture();
    let on_slice = unseen_pid();
    let on_whole = Sleepers::spawn(Some("31"), 1);
    fx.write(&format!(
        r#"
        [[gpu]]
        uuid = "GPU-a100"
        name = "NVIDIA A100-SXM4-40GB"
        util_gpu = 97
        mem_used = 9000
        mem_total = 40000
        mig_mode = true
        gpm = true
        [[gpu.mig]]
        uuid = "MIG-11111111-2222-3333-4444-555555555555"
        profile = "3g.20gb"
        gpu_instance = 1
        mem_used = 6000
        mem_total = 20000
        gpm_sm_util = 62.4
        [[gpu.mig]]
        uuid = "MIG-66666666-7777-8888-9999-000000000000"
        profile = "2g.10gb"
        gpu_instance = 5
        mem_used = 0
        mem_total = 10000
        [[gpu]]
        uuid = "GPU-whole"
        name = "NVIDIA A100-SXM4-40GB"
        util_gpu = 40
        mem_used = 100
        mem_total = 40000
        mig_mode = false
        [[process]]
        pid = {on_slice}
        gpu = 0
        mig = 0
        used_memory = 5000
        [[process]]
        pid = {whole}
        gpu = 1
        used_memory = 100
        sm_util = 40
        "#,
        whole = on_whole.pid(0)
    ));
    let records = tempfile::tempdir().unwrap();
    std::fs::write(records.path().join("29"), "gpus=0\nuuids=MIG-11111111-2222-3333-4444-555555555555\nuid=0\n")
        .unwrap();
    std::fs::write(records.path().join("30"), "gpus=1\nuuids=MIG-66666666-7777-8888-9999-000000000000\n").unwrap();
    std::fs::write(records.path().join("31"), "gpus=2\nuuids=GPU-whole\nuid=0\n").unwrap();
    let options = NvmlOptions { jobs_dir: records.path().to_owned(), ..NvmlOptions::with_lib_path(fake_lib()) };
    let mut source = NvmlSource::open(options).unwrap_or_else(|e| panic!("{e}"));
    let first = source.sample().unwrap();
    assert_eq!(first.gpus[0].mig[0].sm_utilization_percent, None, "GPM needs two samples");
    assert_eq!(gputokens_node_report::job_use::job_use(&first)["29"].percent, None);
    let sample = source.sample().unwrap();

    let a100 = &sample.gpus[0];
    assert_eq!(a100.health, GpuHealth::Ok);
    assert_eq!(a100.jobs, ["29", "30"], "the GPU holds its slices' jobs");
    let slices: Vec<String> = a100
        .mig
        .iter()
        .map(|m| format!("{} {:?} {:?} {:?}", m.uuid, m.profile, m.memory_total_bytes, m.jobs))
        .collect();
    assert_eq!(
        slices,
        [
            r#"MIG-11111111-2222-3333-4444-555555555555 Some("3g.20gb") Some(20000) ["29"]"#,
            r#"MIG-66666666-7777-8888-9999-000000000000 Some("2g.10gb") Some(10000) ["30"]"#,
        ]
    );
    assert!(sample.gpus[1].mig.is_empty() && sample.gpus[1].jobs == ["31"]);
    let proc_on_slice = sample.processes.iter().find(|p| p.pid == on_slice).expect("the slice's process");
    assert_eq!(proc_on_slice.mig_uuid.as_deref(), Some("MIG-11111111-2222-3333-4444-555555555555"));
    assert_eq!(proc_on_slice.job_id.as_deref(), Some("29"), "out of sight: the job holding its slice");
    assert_eq!(sample.processes.len(), 2, "{:?}", sample.processes);

    let jobs = gputokens_node_report::job_use::job_use(&sample);
    assert_eq!(a100.mig[0].sm_utilization_percent, Some(62), "GPM between the two samples");
    assert_eq!((jobs["29"].percent, jobs["29"].memory_bytes), (Some(62.0), 5000), "GPM's figure, its process's memory");
    assert_eq!(a100.mig[1].sm_utilization_percent, None, "GPM has no figure for it");
    assert_eq!((jobs["30"].percent, jobs["30"].memory_bytes), (None, 0), "unmeasured: an idle slice is not told idle");
    assert_eq!(jobs["31"].percent, Some(40.0), "the whole GPU: its own figure");
}

/// A GPU instance split into two compute instances: GPM measures the instance, so neither MIG
/// device's job gets its figure. And a GPU in MIG mode that falls off the bus still holds its
/// slices' jobs (from the slices last seen), so its fault is theirs.
#[test]
fn gpm_is_a_slices_only_alone_and_a_lost_mig_gpu_keeps_its_slices_jobs() {
    let fx = fixture();
    let state = |lost: bool| {
        format!(
            r#"
            [[gpu]]
            uuid = "GPU-h100"
            name = "NVIDIA H100 80GB HBM3"
            lost = {lost}
            mig_mode = true
            gpm = true
            [[gpu.mig]]
            uuid = "MIG-aaaa"
            profile = "1c.3g.40gb"
            gpu_instance = 2
            compute_instance = 0
            gpm_sm_util = 90.0
            [[gpu.mig]]
            uuid = "MIG-bbbb"
            profile = "1c.3g.40gb"
            gpu_instance = 2
            compute_instance = 1
            gpm_sm_util = 90.0
            [[gpu.mig]]
            uuid = "MIG-cccc"
            profile = "3g.40gb"
            gpu_instance = 3
            gpm_sm_util = 15.0
            "#
        )
    };
    fx.write(&state(false));
    let records = tempfile::tempdir().unwrap();
    for (job, uuid) in [("41", "MIG-aaaa"), ("42", "MIG-bbbb"), ("43", "MIG-cccc")] {
        std::fs::write(records.path().join(job), format!("gpus=0\nuuids={uuid}\n")).unwrap();
    }
    let options = NvmlOptions { jobs_dir: records.path().to_owned(), ..NvmlOptions::with_lib_path(fake_lib()) };
    let mut source = NvmlSource::open(options).unwrap_or_else(|e| panic!("{e}"));
    source.sample().unwrap();
    let sample = source.sample().unwrap();
    let gpm: Vec<Option<u32>> = sample.gpus[0].mig.iter().map(|m| m.sm_utilization_percent).collect();
    assert_eq!(gpm, [None, None, Some(15)], "a GPU instance of two compute instances measures neither");
    let jobs = gputokens_node_report::job_use::job_use(&sample);
    assert_eq!((jobs["41"].percent, jobs["42"].percent, jobs["43"].percent), (None, None, Some(15.0)));

    fx.write(&state(true));
    let lost = source.sample().unwrap();
    assert_eq!(lost.gpus[0].health, GpuHealth::Lost);
    assert_eq!(lost.gpus[0].jobs, ["41", "42", "43"], "its slices' jobs, from the slices last seen");
    assert_eq!(lost.gpus[0].mig.len(), 3);
}
