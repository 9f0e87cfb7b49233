//! Kernel programs of gateway-observer.
//!
//! They stay minimal: follow target threads, time their off-CPU spans by reason, keep log2
//! histograms, and send only long blocks and lifecycle events to the ring buffer. Deciding what a
//! syscall means, naming threads and everything else lives in userspace.
#![no_std]
#![no_main]

mod lifecycle;
mod maps;
mod offcpu;
mod syscalls;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
