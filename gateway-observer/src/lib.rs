//! gateway-observer: an eBPF-assisted latency observer for API gateway hosts.
//!
//! Data flows one way: kernel maps and ring buffer → [`collector`] (the only owner of
//! [`probes::Probes`]) → [`sinks`]. Decoding, naming and accounting live in modules that touch no
//! kernel handle and are unit-tested on their own.

pub mod alerts;
pub mod api;
pub mod cli;
pub mod clock;
pub mod collector;
pub mod config;
pub mod detect;
pub mod events;
pub mod heap;
pub mod host;
pub mod jvm_attach;
pub mod logging;
pub mod opaque;
pub mod printable;
pub mod probes;
pub mod reason;
pub mod sinks;
pub mod stacks;
pub mod state;
pub mod symbolize;
pub mod syscalls;
pub mod thread_group;
pub mod top;
pub mod uprobe_opener;

/// The compiled kernel programs, built by build.rs with aya-build.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gateway-observer"));
