//! Everything that touches aya: loading the kernel programs, attaching them, and reading and
//! writing their maps. Nothing outside this module holds a kernel handle.

pub mod kernel_offsets;
mod loader;
mod thread_slots;

pub use loader::{BASELINE_PROGRAMS, PROGRAMS, ProbeError, ProbeSettings, Probes};
