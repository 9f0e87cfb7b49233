//! gateway-observer: an eBPF-assisted latency observer for API gateway hosts.

/// The compiled kernel programs, built by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gateway-observer"));
