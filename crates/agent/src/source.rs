//! Where the agent's samples come from: the `GpuSource` trait (NVML on a GPU node, anything else in
//! tests) and what a sample can fail with. The samples themselves are `gputokens_node_report`'s.

pub use gputokens_node_report::{GpuHealth, GpuSample, MigSample, NodeSample, ProcessSample};

/// Where samples come from: NVML on a GPU node, anything else in tests.
pub trait GpuSource: Send {
    fn sample(&mut self) -> Result<NodeSample, SampleError>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    /// The whole sample failed (e.g. the device count could not be read).
    #[error("NVML: {0}")]
    Nvml(String),
    #[error("NVML did not answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("the NVML sampling thread has stopped")]
    Stopped,
}
