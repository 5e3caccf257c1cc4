//! What the gputokens plugins (and accountd) share at the C boundary, so each unsafe pattern is
//! written once:
//!
//! - [`boundary()`]: the panic boundary every exported entry point runs inside;
//! - [`log`] and [`log_shims!`]: logging `gputokens: <message>` through Slurm's `slurm_info`,
//!   `slurm_verbose` and `slurm_error`; [`stand_ins`]: what plugin unit tests call instead;
//! - [`headers`]: the installed Slurm headers and (feature `bindgen`) their bindgen set-up, for build
//!   scripts;
//! - [`munge`] (feature `munge`): MUNGE credentials through libmunge.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod boundary;
pub mod headers;
pub mod log;
#[cfg(feature = "munge")]
pub mod munge;
pub mod stand_ins;

pub use boundary::boundary;
#[cfg(feature = "bindgen")]
pub use headers::write;
pub use headers::{release, struct_has_field, version_number, Headers};
