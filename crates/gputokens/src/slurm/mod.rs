//! Reading what Slurm's commands print.

pub mod associations;
pub mod partitions;
pub mod rejected;
pub mod sacct;
pub mod sluid;
pub mod squeue;
