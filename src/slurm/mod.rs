//! Reading what Slurm's commands print.

pub mod sacct;
