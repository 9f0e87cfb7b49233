//! Everything that touches aya: loading the kernel programs, attaching them, and reading and
//! writing their maps. Nothing outside this module holds a kernel handle.

pub mod deferred_close;
mod followed;
mod h2_marks;
pub mod hooks;
pub mod kernel_offsets;
mod loader;
pub mod quotas;
mod readings;
mod thread_slots;
pub mod tls;

pub use hooks::DataHooks;
pub use loader::{Attachment, BASELINE_PROGRAMS, BPF_EXIST, ProbeError, ProbeSettings, Probes};
