//! Reading what Slurm's commands print.

pub mod sacct;
pub mod squeue;
