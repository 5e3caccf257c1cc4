//! The sampling half of the NVML node agent: what a GPU node reports to accountd (`source`), read through
//! NVML (`nvml`, `sampler`, `map`) with each GPU process mapped to its Slurm job (`jobs`).

pub mod jobs;
mod map;
pub mod nvml;
pub mod report;
mod sampler;
pub mod source;

pub use nvml::{NvmlOptions, NvmlSource, OpenError, DEFAULT_LIB_PATH};
pub use source::{GpuHealth, GpuSample, GpuSource, NodeSample, ProcessSample, SampleError};
