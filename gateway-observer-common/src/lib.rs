//! Types shared by the kernel programs and the userspace collector.
//!
//! Everything here is `#[repr(C)]`, made only of fixed-width integers, with padding written out
//! and sizes checked at compile time, so both sides read the same bytes. Enums cross the boundary
//! as `u32` constants: no enum layout is assumed on either side.
#![no_std]

mod codes;
mod config;
mod limits;
mod records;
mod socket;
mod thread;

pub use codes::*;
pub use config::*;
pub use limits::*;
pub use records::*;
pub use socket::*;
pub use thread::*;

#[cfg(feature = "user")]
mod pod {
    // Each type is repr(C), made only of integers, with explicit padding, so every bit pattern is
    // valid and there are no uninitialised bytes.
    // SAFETY: see above.
    unsafe impl aya::Pod for super::ThreadState {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::TargetInfo {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::Event {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::ProbeConfig {}
    // SAFETY: see above.
    unsafe impl aya::Pod for super::SockState {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_congested_ring_is_shared_out_equally() {
        let half = u64::from(super::SOCKET_RINGBUF_BYTES) / 2 / super::DATA_EVENT_SIZE as u64;
        assert_eq!(super::ring_share::records_per_target(0), half, "no target yet: one share");
        assert_eq!(super::ring_share::records_per_target(1), half);
        assert_eq!(super::ring_share::records_per_target(4), half / 4);
    }

    use super::ring_wakes_reader;

    #[test]
    fn only_the_record_crossing_a_quarter_wakes_the_reader() {
        let capacity = 4096;
        // 584-byte records (+8 header): the quarter mark is 1024.
        assert!(!ring_wakes_reader(592, capacity, 584));
        assert!(ring_wakes_reader(1184, capacity, 584), "the record that crosses 1024");
        assert!(!ring_wakes_reader(1776, capacity, 584), "past the mark, no interrupt per record");
        assert!(!ring_wakes_reader(4096, capacity, 584), "a full ring does not wake either");
        assert!(ring_wakes_reader(1024, capacity, 584), "exactly at the mark");
    }
}
