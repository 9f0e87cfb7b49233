//! Ring-buffer records: the thread ring's `Event` and the socket ring's data, connection and
//! flow records.

use crate::{DATA_HEAD_BYTES, DATA_TAIL_BYTES};

/// One ring-buffer record. A single fixed layout for every `event_kind` keeps decoding simple.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: u32,
    pub tid: u32,
    pub tgid: u32,
    /// BLOCK: `reason::*`; PROCESS_FORK: the child's tgid.
    pub reason: u32,
    /// BLOCK: syscall number the thread blocked in, or -1.
    pub syscall_nr: i32,
    pub waker_tid: u32,
    /// BLOCK: off-CPU time before the wakeup.
    pub wait_ns: u64,
    /// BLOCK: time between wakeup and running again.
    pub runqueue_ns: u64,
    /// BLOCK in futex: the futex word's address.
    pub futex_uaddr: u64,
    /// Monotonic (CLOCK_MONOTONIC) time the event was recorded.
    pub timestamp_ns: u64,
}
pub const EVENT_SIZE: usize = 56;
const _: () = assert!(size_of::<Event>() == EVENT_SIZE);

/// Socket ring-buffer record `SOCKET_DATA`: one read or write on a target's TCP socket. Too big
/// for the BPF stack, so the kernel fills it field by field in the reserved ring-buffer space.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataEvent {
    pub kind: u32,
    pub tid: u32,
    pub tgid: u32,
    pub fd: u32,
    pub sk: u64,
    /// When the syscall returned (CLOCK_MONOTONIC).
    pub timestamp_ns: u64,
    /// Bytes transferred (the syscall's return value).
    pub len: u64,
    /// Reads: when the bytes first arrived in the socket, before the process read them; 0 unknown.
    pub queued_since_ns: u64,
    /// `data_shape::*` of the syscall.
    pub shape: u8,
    /// `walk_mode::*`: whether the transfer's HTTP/2 frames were walked past the head, and where
    /// the walked headers are.
    pub h2_walk: u8,
    /// Valid bytes in `head` (the first ones transferred) and `tail` (the last ones).
    pub head_len: u16,
    pub tail_len: u16,
    /// Low 16 bits of the socket's `SockState::lost` when this record was sent.
    pub sock_lost: u16,
    pub head: [u8; DATA_HEAD_BYTES],
    pub tail: [u8; DATA_TAIL_BYTES],
}
pub const DATA_EVENT_SIZE: usize = 584;
const _: () = assert!(size_of::<DataEvent>() == DATA_EVENT_SIZE);

/// Values of `DataEvent::h2_walk`.
pub mod walk_mode {
    /// No walk: the head and tail are all there is.
    pub const NONE: u8 = 0;
    /// An [`super::H2Walk`] follows the record (an [`super::H2DataEvent`]), and may go on in
    /// continuation records (the `tcp_*msg` fallback and the bounded TLS programs).
    pub const INLINE: u8 = 1;
    /// The whole walk is in the `SOCKET_H2_CONTINUED` records that follow (the socket
    /// tracepoints and TLS uprobes, whose continuation programs walk): the first says where it
    /// began.
    pub const IN_CONTINUATIONS: u8 = 2;
}

/// Socket ring-buffer record `SOCKET_PAYLOAD`: a transfer of an HTTP/2 connection that lies
/// wholly inside one frame's payload (an upload read 8 kB at a time). Userspace needs only how
/// many bytes moved, and when: the record is a `DataEvent`'s fields before its head (with
/// `head_len` and `tail_len` 0), 64 bytes in the ring instead of 592.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayloadEvent {
    pub fields: [u64; PAYLOAD_EVENT_SIZE / 8],
}
pub const PAYLOAD_EVENT_SIZE: usize = 56;
const _: () = assert!(size_of::<PayloadEvent>() == PAYLOAD_EVENT_SIZE);
const _: () = assert!(core::mem::offset_of!(DataEvent, head) == PAYLOAD_EVENT_SIZE);

/// Frame headers walked past the copied head, at most (HTTP/2 connections only).
pub const H2_WALK_FRAMES: usize = 32;
/// Payload bytes kept of one walked frame other than DATA: a header block (the pseudo-headers
/// come first), a WINDOW_UPDATE's increment, a RST_STREAM's code.
pub const H2_WALK_PAYLOAD_BYTES: usize = 48;

/// HTTP/2 frame headers of one transfer whose frames end past its copied head: the kernel walks
/// them with a read per header, from a frame boundary (the transfer's start, or the end of the
/// client preface), through the transfer's first buffer. The frames follow each other from
/// `start`, so only their 9-byte headers are kept.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct H2Walk {
    /// Where the walk began (a frame boundary, unless the transfer started mid-frame).
    pub origin: u32,
    /// Where the first header below starts (it may begin inside the head).
    pub start: u32,
    /// Headers below (at most `H2_WALK_FRAMES`).
    pub frames: u8,
    /// The walk reached its bound and goes on in a `SOCKET_H2_CONTINUED` record of the same
    /// socket and thread, which follows this one in the ring.
    pub continued: u8,
    pub _pad: [u8; 6],
    pub headers: [[u8; 9]; H2_WALK_FRAMES],
    /// Bytes of each frame's payload start kept in its slot of `payloads`.
    pub payload_lens: [u8; H2_WALK_FRAMES],
    pub payloads: [[u8; H2_WALK_PAYLOAD_BYTES]; H2_WALK_FRAMES],
}

/// A `SOCKET_DATA` record with `h2_walk` set: the transfer of an HTTP/2 connection whose bytes run
/// past the head.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct H2DataEvent {
    pub data: DataEvent,
    pub walk: H2Walk,
}
pub const H2_DATA_EVENT_SIZE: usize = 2456;
const _: () = assert!(size_of::<H2DataEvent>() == H2_DATA_EVENT_SIZE);

/// Continuation records of one transfer's walk, at most: 32 frames each, one tail call each (the
/// kernel allows 33 in a chain).
pub const H2_WALK_CONTINUATIONS: u32 = 16;

/// Socket ring-buffer record `SOCKET_H2_CONTINUED`: the frame headers after those of the walked
/// record (or continuation) before it of the same socket and thread, from `walk.origin`, which
/// is where that walk stopped.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct H2ContinuedEvent {
    pub kind: u32,
    pub tid: u32,
    pub sk: u64,
    pub walk: H2Walk,
}
pub const H2_CONTINUED_EVENT_SIZE: usize = 1888;
const _: () = assert!(size_of::<H2ContinuedEvent>() == H2_CONTINUED_EVENT_SIZE);

/// Socket ring-buffer record `SOCKET_OPEN` / `SOCKET_CLOSE`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ConnEvent {
    pub kind: u32,
    /// Owner if known (0: learnt from its first data event).
    pub tgid: u32,
    pub sk: u64,
    pub timestamp_ns: u64,
    /// `conn_role::*`
    pub role: u32,
    /// AF_INET (2) or AF_INET6 (10).
    pub family: u16,
    /// Host byte order.
    pub local_port: u16,
    pub remote_port: u16,
    pub _pad: [u8; 2],
    /// The socket's network namespace (its /proc/PID/ns/net inode number).
    pub netns: u32,
    /// IPv4 addresses in the first four bytes, network order.
    pub local_addr: [u8; 16],
    pub remote_addr: [u8; 16],
}
pub const CONN_EVENT_SIZE: usize = 72;
const _: () = assert!(size_of::<ConnEvent>() == CONN_EVENT_SIZE);

/// Socket ring-buffer record `SOCKET_RETRANSMIT` / `SOCKET_RESET`: what a stalled or broken
/// flow looks like from the kernel's TCP state.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct FlowEvent {
    pub kind: u32,
    pub tgid: u32,
    pub sk: u64,
    pub timestamp_ns: u64,
    /// When data last arrived on the connection (0: never since followed).
    pub rx_last_ns: u64,
    /// Bytes sent and not acknowledged (snd_nxt - snd_una).
    pub unacked_bytes: u32,
    /// Retransmits of this connection so far.
    pub retransmits: u32,
    /// RESET: 1 when the peer reset it, 0 when we sent the reset.
    pub by_peer: u32,
    pub _pad: u32,
}
pub const FLOW_EVENT_SIZE: usize = 48;
const _: () = assert!(size_of::<FlowEvent>() == FLOW_EVENT_SIZE);
