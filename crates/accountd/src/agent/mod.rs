//! The NVML node agent: what a GPU node reports to accountd (`source`), read through
//! NVML (`nvml`, `sampler`, `map`) with each GPU mapped to the Slurm job holding it (`job_gpu_records`, written
//! by spank_gputokens.so) and each GPU process to its job (`jobs`), each job's use of its GPUs (`job_use`); and the agent
//! itself, `accountd agent` (`run`), which posts samples to accountd (`post`) and serves its own `/metrics`
//! (`export`).

pub mod export;
pub mod job_gpu_records;
pub mod job_use;
pub mod jobs;
mod map;
pub mod nvml;
mod post;
pub mod report;
pub mod run;
mod sampler;
pub mod source;

pub use nvml::{NvmlOptions, NvmlSource, OpenError, DEFAULT_LIB_PATH};
pub use source::{GpuHealth, GpuSample, GpuSource, NodeSample, ProcessSample, SampleError};
