//! Kernel programs of gateway-observer.
//!
//! They stay minimal: follow target threads, time their off-CPU spans by reason, keep log2
//! histograms, and send only long blocks and lifecycle events to the ring buffer. Deciding what a
//! syscall means, naming threads and everything else lives in userspace.
#![no_std]
#![no_main]
// An atomic add on a map value (`maps::take_from_budget`): the BPF target lacks `AtomicI64::fetch_sub`.
#![feature(core_intrinsics)]
#![allow(internal_features, reason = "atomic_xadd is the BPF target's only atomic add")]
// aya-ebpf's map methods take `impl Borrow<K>`: passing `&key` keeps the key where it already is
// on the 512-byte BPF stack instead of moving a copy into the callee, whatever the optimiser does.
#![allow(clippy::needless_borrows_for_generic_args, reason = "keys stay in place on the BPF stack")]

mod data_records;
mod followed_ports;
mod go_tls;
mod h2_continue;
mod h2_marks;
mod h2_walk;
mod lifecycle;
mod loop_iterations;
mod maps;
mod offcpu;
mod socket_data;
mod sockets;
mod syscalls;
mod tls;
mod transfer_buffers;
mod waits;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

/// Empty programs on the two hottest hooks, never attached by the daemon: `gateway-observer
/// calibrate` attaches them so `cargo xtask bench probes` can show the per-event floor (the
/// cost of running any program there, stats accounting included) beside our programs' cost.
mod baseline {
    use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

    #[btf_tracepoint(function = "sched_switch")]
    pub fn baseline_sched_switch(_ctx: BtfTracePointContext) -> u32 {
        0
    }

    #[btf_tracepoint(function = "sys_enter")]
    pub fn baseline_sys_enter(_ctx: BtfTracePointContext) -> u32 {
        0
    }
}
