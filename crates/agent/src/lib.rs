//! gputokens-agent, the node agent: what a GPU node reports to accountd, read through NVML (`nvml`,
//! `sampler`, `map`) with each GPU mapped to the Slurm job holding it (`job_gpu_records`, written by
//! spank_gputokens.so) and each GPU process to its job (`jobs`); the agent itself (`run`) posts
//! samples to accountd (`post`) and serves its own `/metrics` (`export`, under `listener`'s caps). The report's format is
//! `gputokens_node_report`'s, shared with accountd; accountd links none of this, nor NVML.
//! Unsafe code only in `nvml_raw` (one NVML call nvml-wrapper lacks); NVML is otherwise reached
//! through nvml-wrapper, libmunge through `slurm_ffi::munge`.
#![deny(unsafe_code)]

pub mod cli;
pub mod error;
pub mod export;
pub mod job_gpu_records;
pub mod jobs;
mod listener;
mod map;
pub mod nvml;
mod nvml_raw;
mod post;
pub mod run;
mod sampler;
pub mod source;

pub use gputokens_node_report::job_use;
pub use nvml::{NvmlOptions, NvmlSource, OpenError, DEFAULT_LIB_PATH};
pub use source::{GpuHealth, GpuSample, GpuSource, NodeSample, ProcessSample, SampleError};

/// `gputokens-agent --version`.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
