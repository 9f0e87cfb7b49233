//! Per-thread and per-target state the kernel keeps in maps and userspace reads.

use crate::{THREAD_HIST_BUCKETS, reason, socket::TlsArrival};

/// State of one target thread, in slot `TRACKED[tid] - 1` of the `THREADS` array. It also holds
/// the thread's cumulative off-CPU time per reason and its histograms, so the hot paths touch
/// one array value and no hash map. An exited thread's slot stays (with `exited` set) until
/// userspace has read its last totals, cleared it, and returned it to `FREE_SLOTS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadState {
    /// 0 for a free slot.
    pub tid: u32,
    pub tgid: u32,
    /// The syscall the thread last went to sleep in (read from its registers then), or -1.
    pub syscall_nr: i32,
    /// `reason::*` chosen when the thread left the CPU.
    pub offcpu_reason: u32,
    /// First argument of that syscall (futex uaddr, epoll fd, fd).
    pub syscall_arg0: u64,
    /// When the thread left the CPU; 0 while it is on CPU.
    pub offcpu_start_ns: u64,
    /// When it was woken during this off-CPU span; 0 if not yet.
    pub wakeup_ns: u64,
    pub waker_tid: u32,
    /// `syscall_class::*` of that syscall.
    pub syscall_class: u8,
    /// 1 when that syscall is a futex wait with a timeout.
    pub futex_timed: u8,
    /// 1 when the last off-CPU span was a long block inside a syscall: the thread's user stack
    /// is captured the next time it is seen in the same call (the same syscall and first
    /// argument): at the end of the transfer it blocked in, or when it sleeps there again.
    pub stack_wanted: u8,
    /// 1 once the thread has exited.
    pub exited: u8,
    /// Cumulative off-CPU nanoseconds by `reason::*`. Only the thread's own switch-in writes
    /// them, one CPU at a time, so no atomics are needed.
    pub offcpu_ns: [u64; reason::COUNT as usize],
    /// log2 histogram of run-queue delays (sum: `offcpu_ns[RUNQUEUE]`). u32 counts wrap;
    /// userspace reads every second and takes wrapping differences.
    pub runqueue_hist: [u32; THREAD_HIST_BUCKETS],
    /// log2 histogram of futex waits that blocked: from leaving the CPU to running again.
    pub futex_hist: [u32; THREAD_HIST_BUCKETS],
    pub futex_wait_ns: u64,
    /// The thread's name when it exited (empty before): a thread that lived and died between two
    /// reads of /proc is still named.
    pub exit_comm: [u8; 16],
    /// When the thread last returned from a poll-class syscall (an event-loop iteration began),
    /// and its total off-CPU time then: at the next poll, the difference is the iteration's
    /// off-CPU part, the rest was on CPU.
    pub iter_start_ns: u64,
    pub iter_offcpu_base_ns: u64,
    /// log2 histogram of finished iterations' on-CPU time, and its sum.
    pub iter_hist: [u32; THREAD_HIST_BUCKETS],
    pub iter_on_cpu_ns: u64,
    /// The transfer being reported: its buffer and count (or iovec array and its length), the
    /// socket (`struct sock` address), and when the bytes it reads first arrived in that socket
    /// (0 unknown). Filled from the caller's registers when the socket layer reports the
    /// transfer, or at `tcp_*msg` entry where the kernel lacks those tracepoints.
    pub data_buf: u64,
    pub data_count: u64,
    pub data_sk: u64,
    pub data_queued_ns: u64,
    pub data_fd: u32,
    /// `data_shape::*` of the current syscall, `NONE` outside data syscalls.
    pub data_shape: u8,
    /// 1 when the thread's open off-CPU span, a timed futex wait, was ended by a futex wake (the
    /// waker was inside a futex call) rather than by its timeout.
    pub woken_by_futex: u8,
    /// Inside a hooked TLS library call (`SSL_read`, `SSL_write`, their `_ex` forms, the
    /// handshake): how deep, and `data_shape::*` of the plaintext it moves (`NONE` for a call that
    /// moves none). The ciphertext transfers nested in it are not reported; the plaintext is,
    /// when the call returns.
    pub tls_depth: u8,
    pub tls_shape: u8,
    /// `SockState::lost` of the transfer's socket, read when the transfer was seen.
    pub data_sock_lost: u32,
    /// Bits: 1 when the transfer is the first seen on its socket (`SockState::data_seen` was 0),
    /// 2 when its socket speaks HTTP/2 (`SockState::h2`: frame headers past the head are walked),
    /// 4 when it is one of the first few (looked at for the client preface).
    pub data_first: u32,
    /// Waiting time of timed futex waits that ended by their timeout, and of those woken.
    pub futex_timeout_ns: u64,
    pub futex_woken_ns: u64,
    /// The futex word of the thread's last timed wait that ended by its timeout, until a timed
    /// wait on it is woken: a thread sleeps on its own word (the JVM's per-thread sleep event),
    /// and waits for work on another (its parker, a queue's condition).
    pub futex_sleep_uaddr: u64,
    /// The epoll set the thread waits on most (a majority vote over its epoll waits: `votes`
    /// rises on a wait on it, falls on another, and another takes over at zero).
    pub home_epoll_fd: u32,
    pub home_epoll_votes: u32,
    /// The TLS call in progress: its `SSL *`, plaintext buffer, the `size_t *` where an `_ex`
    /// form writes the bytes it moved (0 for the others), the socket its nested transfers used
    /// (0 until one did), and when the bytes it returns arrived.
    pub tls_ssl: u64,
    pub tls_buf: u64,
    pub tls_len_out: u64,
    pub tls_sk: u64,
    pub tls_arrival: TlsArrival,
    /// Long blocks (at least the block threshold, not idling in the thread's own poll) by
    /// `reason::*`: every thread's are counted here; only those `BLOCK_DETAIL` asks for are also
    /// sent one by one. u32 counts wrap; userspace takes wrapping differences.
    pub long_blocks: [u32; reason::COUNT as usize],
    /// The transfer being reported, on an HTTP/2 connection: where its first frame header is
    /// (`SockState::h2_next` when the transfer was seen).
    pub data_h2_origin: u32,
    pub _pad_h2: u32,
}
pub const THREAD_STATE_SIZE: usize = 856;
const _: () = assert!(size_of::<ThreadState>() == THREAD_STATE_SIZE);

impl Default for ThreadState {
    fn default() -> Self {
        Self {
            tid: 0,
            tgid: 0,
            syscall_nr: -1,
            offcpu_reason: 0,
            syscall_arg0: 0,
            offcpu_start_ns: 0,
            wakeup_ns: 0,
            waker_tid: 0,
            syscall_class: 0,
            futex_timed: 0,
            stack_wanted: 0,
            exited: 0,
            offcpu_ns: [0; reason::COUNT as usize],
            runqueue_hist: [0; THREAD_HIST_BUCKETS],
            futex_hist: [0; THREAD_HIST_BUCKETS],
            futex_wait_ns: 0,
            exit_comm: [0; 16],
            iter_start_ns: 0,
            iter_offcpu_base_ns: 0,
            iter_hist: [0; THREAD_HIST_BUCKETS],
            iter_on_cpu_ns: 0,
            data_buf: 0,
            data_count: 0,
            data_sk: 0,
            data_queued_ns: 0,
            data_fd: 0,
            data_shape: 0,
            woken_by_futex: 0,
            tls_depth: 0,
            tls_shape: 0,
            data_sock_lost: 0,
            data_first: 0,
            futex_timeout_ns: 0,
            futex_woken_ns: 0,
            futex_sleep_uaddr: 0,
            home_epoll_fd: 0,
            home_epoll_votes: 0,
            tls_ssl: 0,
            tls_buf: 0,
            tls_len_out: 0,
            tls_sk: 0,
            tls_arrival: TlsArrival::default(),
            long_blocks: [0; reason::COUNT as usize],
            data_h2_origin: 0,
            _pad_h2: 0,
        }
    }
}

/// Value of `TARGETS`: why a process is watched.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// tgid of the target this one was forked from, or 0 for a target userspace added.
    pub parent_tgid: u32,
    /// Thread slots and connections the target may still take, so that no target (any process
    /// a `comm=` or `port=` spec selects) can fill THREADS or SOCKS for the others. The kernel
    /// takes one for each slot or connection it gives the target (a plain atomic add: two CPUs
    /// racing past zero overshoot by one each); userspace sets them again every tick, from the
    /// quota less what the target holds.
    pub _pad: u32,
    /// i64: the kernel's BPF target has atomic adds on 64-bit words only.
    pub thread_budget: i64,
    pub socket_budget: i64,
    /// Socket-ring records written while the ring was congested, since the drain `ring_epoch`
    /// (kernel-owned; userspace writes zeros, which the next record resets anyway).
    pub ring_epoch: u64,
    pub ring_used: u64,
}
const _: () = assert!(size_of::<TargetInfo>() == 40);

/// The socket ring's room shared out among targets while it is congested: the ring counts as
/// congested past half full; then each target may write `RING_SHARE[SHARE]` records per drain
/// (`RING_SHARE[EPOCH]`, advanced by userspace at each drain of the socket ring).
pub mod ring_share {
    pub const EPOCH: u32 = 0;
    pub const SHARE: u32 = 1;
    pub const COUNT: u32 = 2;

    /// Records each of `targets` may write into the ring's free half between two drains.
    pub fn records_per_target(targets: usize) -> u64 {
        let half_ring_records = u64::from(crate::SOCKET_RINGBUF_BYTES) / 2 / crate::DATA_EVENT_SIZE as u64;
        half_ring_records / targets.max(1) as u64
    }
}
