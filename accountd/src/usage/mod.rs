//! Where GPU usage comes from besides Slurm's accounting: per-job utilization from a metrics system.
pub mod prometheus;
