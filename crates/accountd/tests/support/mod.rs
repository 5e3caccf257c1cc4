//! The harness the accountd test targets share (local, cluster, packages, rpms, browser): each
//! target uses part of it, so what one target leaves unused is no dead code.
#![allow(dead_code)]

pub mod by_hand;
pub mod cluster;
pub mod common;
pub mod connection_flood;
pub mod notify_capture;
pub mod pki;
pub mod slurm_release;
pub mod status_page;
pub mod wrappers;
