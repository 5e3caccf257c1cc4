//! Integration tests: the real binaries, real SQLite, real non-root users, and (for the `cluster`
//! tests, which are ignored unless the test cluster is up) a real Slurm cluster.

mod accounts;
mod admin;
mod admission;
mod agent;
mod alerts;
mod charging;
mod cluster;
mod cluster_scripts;
mod common;
mod config;
mod cycles;
mod first_day;
mod grafana;
mod grant_expiry;
mod health;
mod http;
mod idle;
mod limits;
mod manners;
mod notifications;
mod ondemand;
mod overload;
mod packages;
mod plugin_linkage;
mod preemption;
mod records;
mod refunds;
mod rpms;
mod sbalance;
mod security;
mod slurm_release;
mod spank;
mod time_zones;
mod web;
mod worked_example;
