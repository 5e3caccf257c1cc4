//! Reading what Slurm's commands print.

pub mod partitions;
pub mod sacct;
pub mod squeue;
