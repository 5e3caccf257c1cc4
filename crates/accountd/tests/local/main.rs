//! The tests that need nothing but this machine: the real binaries, real SQLite, the real non-root
//! users alice, bob and carol, stand-ins for Slurm's commands where a test needs them. `cargo test`
//! runs them; tests/run.sh's `unit` suite, and its `dates` suite at the dates where calendars turn.

#[path = "../support/mod.rs"]
mod support;
use support::{by_hand, cluster, common, connection_flood, notify_capture, status_page};

mod accounts;
mod admin;
mod alerts;
mod clock;
mod config;
mod energy;
mod forecast;
mod grafana;
mod grant_expiry;
mod harness;
mod http;
mod job_submit_plugin;
mod json_shape;
mod limits;
mod logs;
mod manners;
mod notifications;
mod ondemand;
mod overload;
mod plugin_linkage;
mod refunds;
mod sbalance;
mod security;
mod shadow;
mod spank;
mod time_zones;
mod web;
mod worked_example;
