//! `NvmlSource`: samples through nvml-wrapper on a thread of its own. The thread owns the `Nvml` (the
//! event sets borrow it, so they can live across samples without a self-referential struct), and a
//! driver call that hangs, as they can on a wedged GPU, costs a `Timeout` instead of the agent.

use crate::sampler::Sampler;
use crate::source::{GpuSource, NodeSample, SampleError};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// The driver's NVML, found by the dynamic linker. (nvml-wrapper's own default, `libnvidia-ml.so`,
/// comes only with the development package.)
pub const DEFAULT_LIB_PATH: &str = "libnvidia-ml.so.1";

#[derive(Debug, Clone)]
pub struct NvmlOptions {
    /// A file name searched the dynamic linker's way, or a path.
    pub lib_path: PathBuf,
    /// Where `<pid>/cgroup` and `<pid>/environ` are read to map processes to jobs.
    pub proc_root: PathBuf,
    /// Where spank_gputokens.so records the GPUs of each job on the node (`[agent] jobs_dir`).
    pub jobs_dir: PathBuf,
    /// Who besides root may own `jobs_dir` (the SlurmUser): it is checked at every sample, and its
    /// records are not believed while anyone else could change them.
    pub jobs_dir_user: Option<String>,
    /// How long one sample may take.
    pub timeout: Duration,
}

impl Default for NvmlOptions {
    fn default() -> Self {
        NvmlOptions {
            lib_path: DEFAULT_LIB_PATH.into(),
            proc_root: "/proc".into(),
            jobs_dir: gputokens::config::DEFAULT_JOBS_DIR.into(),
            jobs_dir_user: None,
            timeout: Duration::from_secs(30),
        }
    }
}

impl NvmlOptions {
    pub fn with_lib_path(lib_path: impl Into<PathBuf>) -> Self {
        NvmlOptions { lib_path: lib_path.into(), ..Self::default() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("no NVML library found at {}: {detail}", path.display())]
    NoLibrary { path: PathBuf, detail: String },
    #[error("NVML library at {} failed to initialize: {detail}", path.display())]
    Init { path: PathBuf, detail: String },
    #[error("cannot start the NVML thread: {0}")]
    Thread(String),
}

impl OpenError {
    fn from_nvml(path: &Path, e: NvmlError) -> Self {
        let path = path.to_owned();
        match e {
            NvmlError::LibloadingError(e) => OpenError::NoLibrary { path, detail: e.to_string() },
            NvmlError::DriverNotLoaded => OpenError::Init { path, detail: "the NVIDIA driver is not loaded".into() },
            other => OpenError::Init { path, detail: other.to_string() },
        }
    }
}

type Reply = mpsc::SyncSender<Result<NodeSample, SampleError>>;

pub struct NvmlSource {
    requests: mpsc::Sender<Reply>,
    timeout: Duration,
}

impl NvmlSource {
    /// Loads and initializes NVML. Dropping the source ends its thread (and shuts NVML down) once the
    /// thread is idle.
    pub fn open(options: NvmlOptions) -> Result<Self, OpenError> {
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let (requests, request_rx) = mpsc::channel::<Reply>();
        let timeout = options.timeout;
        std::thread::Builder::new()
            .name("nvml".into())
            .spawn(move || serve(options, ready_tx, request_rx))
            .map_err(|e| OpenError::Thread(e.to_string()))?;
        // Init is not timed: a driver that hangs here gives nothing to sample anyway.
        ready_rx.recv().map_err(|_| OpenError::Thread("it ended during NVML init".into()))??;
        Ok(NvmlSource { requests, timeout })
    }
}

fn serve(options: NvmlOptions, ready: mpsc::SyncSender<Result<(), OpenError>>, requests: mpsc::Receiver<Reply>) {
    let nvml = match Nvml::builder().lib_path(options.lib_path.as_os_str()).init() {
        Ok(nvml) => nvml,
        Err(e) => {
            let _ = ready.send(Err(OpenError::from_nvml(&options.lib_path, e)));
            return;
        }
    };
    let mut sampler = Sampler::new(&nvml, options.proc_root, options.jobs_dir, options.jobs_dir_user);
    let _ = ready.send(Ok(()));
    for reply in requests {
        // The asker may have timed out and gone; nothing to do about that.
        let _ = reply.send(sampler.sample());
    }
}

impl GpuSource for NvmlSource {
    fn sample(&mut self) -> Result<NodeSample, SampleError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.requests.send(reply).map_err(|_| SampleError::Stopped)?;
        answer.recv_timeout(self.timeout).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => SampleError::Timeout(self.timeout),
            mpsc::RecvTimeoutError::Disconnected => SampleError::Stopped,
        })?
    }
}
