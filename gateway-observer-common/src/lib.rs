//! Types shared by the kernel programs and the userspace collector.
//!
//! Everything here is `#[repr(C)]`, made only of fixed-width integers, with padding written out
//! and sizes checked at compile time, so both sides read the same bytes. Enums cross the boundary
//! as `u32` constants: no enum layout is assumed on either side.
#![no_std]

/// Why a thread was off-CPU. The kernel picks one per off-CPU span from the syscall class the
/// thread was in (set by userspace in `SYSCALL_CLASS`) and the task state it left the CPU with.
pub mod reason {
    /// Voluntary sleep outside any classified syscall (page fault, unclassified syscall).
    pub const OTHER: u32 = 0;
    /// futex wait without a timeout (lock contention, condition wait).
    pub const FUTEX: u32 = 1;
    /// futex wait with a timeout (`Thread.sleep`, `parkNanos`, `future.get(timeout)`).
    pub const FUTEX_TIMED: u32 = 2;
    /// nanosleep / clock_nanosleep.
    pub const SLEEP: u32 = 3;
    /// epoll/poll/select/io_uring wait: an event loop idling for work.
    pub const POLL: u32 = 4;
    /// Socket syscalls (recv*, send*, accept*, connect).
    pub const SOCKET: u32 = 5;
    /// read/write family on a pipe, socket or terminal (file reads that hit disk are D-state).
    pub const IO: u32 = 6;
    /// Sleeping in a classified syscall that is none of the above.
    pub const OTHER_SYSCALL: u32 = 7;
    /// Uninterruptible sleep (D-state): disk, some locks in the kernel.
    pub const DISK: u32 = 8;
    /// Runnable but not running: preempted, or woken and waiting for a CPU.
    pub const RUNQUEUE: u32 = 9;
    /// futex wait with a timeout on the word the thread's last timed-out wait used: it sleeps
    /// (`Thread.sleep`, a rate limiter's pause) rather than waits to be handed work, which ends
    /// with a wake from another thread. The outcome of a wait is only known when it ends, so the
    /// previous one on the same word stands for the current one.
    pub const FUTEX_SLEEP: u32 = 10;
    /// epoll wait on another epoll set than the one the thread mostly waits on: a private,
    /// nested loop (Node's `execSync` runs one until the child exits). For an event loop that is
    /// blocking, not idling.
    pub const POLL_OTHER: u32 = 11;
    pub const COUNT: u32 = 12;
}

/// The class of a syscall, as userspace writes it into `SYSCALL_CLASS[nr]`.
pub mod syscall_class {
    /// Not a syscall we classify (or the thread is not in a syscall).
    pub const NONE: u8 = 0;
    pub const FUTEX: u8 = 1;
    /// The futex2 calls (Linux 6.7): `futex_wait(2)`, timeout in the fifth argument, and
    /// `futex_wake(2)`, which never sleeps (classed here so its wakeups read as futex wakes).
    pub const FUTEX_WAIT2: u8 = 2;
    /// `futex_waitv(2)`: timeout in the fourth argument.
    pub const FUTEX_WAITV: u8 = 3;
    pub const SLEEP: u8 = 4;
    pub const POLL: u8 = 5;
    pub const SOCKET: u8 = 6;
    pub const IO: u8 = 7;
    pub const OTHER: u8 = 8;
    /// epoll_wait, epoll_pwait, epoll_pwait2: a poll whose first argument is the epoll set.
    pub const EPOLL: u8 = 9;

    /// Whether a thread in `class` waits for events (an event loop idling).
    pub const fn polls(class: u8) -> bool {
        class == POLL || class == EPOLL
    }
    /// `SYSCALL_CLASS` values pack the class in the low four bits and the syscall's
    /// `data_shape::*` in the high four.
    pub const CLASS_MASK: u8 = 0x0f;
    pub const SHAPE_SHIFT: u8 = 4;
}

/// Where a socket data syscall keeps its bytes, so the kernel can copy their first and last ones
/// without knowing syscall numbers. Odd shapes read, even shapes write.
/// `DataEvent::fd` when the hook that saw the transfer does not know the descriptor.
pub const DATA_FD_UNKNOWN: u32 = u32::MAX;

pub mod data_shape {
    pub const NONE: u8 = 0;
    /// read, recvfrom: argument 1 is the buffer.
    pub const READ_BUF: u8 = 1;
    /// write, sendto.
    pub const WRITE_BUF: u8 = 2;
    /// readv: argument 1 is the iovec array, argument 2 its length.
    pub const READ_IOV: u8 = 3;
    pub const WRITE_IOV: u8 = 4;
    /// recvmsg: argument 1 is the msghdr.
    pub const READ_MSG: u8 = 5;
    pub const WRITE_MSG: u8 = 6;
    /// sendfile, splice: bytes go to the socket from a file or pipe; only their count is known.
    pub const WRITE_LEN_ONLY: u8 = 8;
    /// Seen inside `tcp_recvmsg`/`tcp_sendmsg`: the buffer is an iovec array the kernel already
    /// copied into its own memory (readv, writev, recvmsg, sendmsg).
    pub const READ_KERNEL_IOV: u8 = 9;
    pub const WRITE_KERNEL_IOV: u8 = 10;

    pub const fn is_read(shape: u8) -> bool {
        shape % 2 == 1
    }
}

/// Who opened a TCP connection that a target uses.
pub mod conn_role {
    /// Seen first in a data syscall: it existed before we attached.
    pub const UNKNOWN: u32 = 0;
    /// Accepted on a port a target listens on: the gateway serves requests on it.
    pub const SERVER: u32 = 1;
    /// Connected by a target: the gateway sends requests to an upstream on it.
    pub const CLIENT: u32 = 2;
}

/// The reason for a thread that went to sleep (interruptibly) inside a syscall of `class`:
/// the one mapping the kernel uses at switch-out and userspace uses for a thread it finds
/// already blocked, so the two cannot drift apart.
/// `last_timed_out`: the thread's previous timed futex wait on the same word ended by its timeout.
pub const fn reason_for_syscall(class: u8, futex_timed: bool, last_timed_out: bool) -> u32 {
    match class {
        syscall_class::FUTEX | syscall_class::FUTEX_WAIT2 | syscall_class::FUTEX_WAITV => {
            match (futex_timed, last_timed_out) {
                (false, _) => reason::FUTEX,
                (true, false) => reason::FUTEX_TIMED,
                (true, true) => reason::FUTEX_SLEEP,
            }
        }
        syscall_class::SLEEP => reason::SLEEP,
        syscall_class::POLL | syscall_class::EPOLL => reason::POLL,
        syscall_class::SOCKET => reason::SOCKET,
        syscall_class::IO => reason::IO,
        syscall_class::OTHER => reason::OTHER_SYSCALL,
        _ => reason::OTHER,
    }
}

/// futex(2) operations that wait, and so read their fourth argument as a timeout: FUTEX_WAIT,
/// FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2 (with or without the
/// private and realtime-clock flags). Wakes and requeues put a count there.
pub const fn futex_op_waits(op: u64) -> bool {
    const FLAGS: u64 = 128 | 256;
    matches!(op & !FLAGS, 0 | 6 | 9 | 11 | 13)
}

/// Whether a ring-buffer record should wake its reader: only the record that takes a ring of
/// `capacity` bytes past a quarter full, `unread` being what it holds with this record of
/// `record_bytes` reserved. The reader drains on a short timer; once woken it drains
/// everything, and a ring that stays past the mark while the reader is slow must not cost every
/// following record an interrupt (several microseconds in a VM).
pub const fn ring_wakes_reader(unread: u64, capacity: u32, record_bytes: u64) -> bool {
    let mark = capacity as u64 / 4;
    // The ring's own 8-byte header per record.
    unread >= mark && unread < mark + record_bytes + 8
}

/// An off-CPU span from `start` to `now` split into (wait, run-queue delay): a preempted
/// thread (`reason::RUNQUEUE`) only waited for a CPU; otherwise the wakeup, if one was seen
/// inside the span, divides the wait from the delay after it. Callers ensure `start <= now`.
pub const fn split_span(span_reason: u32, start: u64, wakeup: u64, now: u64) -> (u64, u64) {
    if span_reason == reason::RUNQUEUE {
        (0, now - start)
    } else if wakeup >= start && wakeup <= now {
        (wakeup - start, now - wakeup)
    } else {
        // No wakeup seen (woken before we attached, or by a path without sched_wakeup).
        (now - start, 0)
    }
}

/// Indexes of the per-CPU `DROPS` counters: everything the kernel could not record.
pub mod drop_index {
    /// A ring buffer reserve failed: an event was lost.
    pub const RINGBUF: u32 = 0;
    /// No free slot in `THREADS`: a new target thread is not followed.
    pub const THREADS_FULL: u32 = 1;
    /// `TARGETS` was full: a forked child of a target is not followed.
    pub const TARGETS_FULL: u32 = 2;
    /// A target thread ran without our sched_switch program seeing it switched in (observed on
    /// 6.18 under heavy preemption; cause not yet found). The span is closed at the thread's next
    /// syscall instead, which for a blocked thread is the syscall it returns from.
    pub const MISSED_SWITCH_IN: u32 = 3;
    /// As above, but the thread was switched out again before any syscall: that span is lost.
    pub const LOST_SPAN: u32 = 4;
    /// `SOCKS` was full: a connection's requests are not seen.
    pub const SOCKS_FULL: u32 = 5;
    /// A socket ring-buffer reserve failed: a data or connection event was lost.
    pub const SOCKET_RINGBUF: u32 = 6;
    /// A user stack could not be stored in `STACKS` (its hash bucket holds another stack, or the
    /// stack could not be read): that block's evidence has no stack.
    pub const STACKS_FULL: u32 = 7;
    /// A target had used its quota of thread slots (`TargetInfo::thread_budget`): a new thread
    /// of it is not followed, and the other targets keep their room.
    pub const THREADS_QUOTA: u32 = 8;
    /// A target had used its quota of connections (`TargetInfo::socket_budget`).
    pub const SOCKS_QUOTA: u32 = 9;
    /// The socket ring was over half full and a target had written its share of the room since
    /// the daemon last drained it (`ring_share`): its data record was dropped, so that one target
    /// cannot take the ring from the others.
    pub const RING_SHARE: u32 = 10;
    /// A TLS library call returned plaintext and no socket is known for its `SSL *` (no nested
    /// transfer named one, and `TLS_SOCKS` had none, or the socket is no longer followed): the
    /// record is not sent.
    pub const TLS_UNATTRIBUTED: u32 = 11;
    pub const COUNT: u32 = 12;
}

/// Ring-buffer event kinds.
pub mod event_kind {
    /// A thread came back on CPU after an off-CPU wait longer than the threshold.
    pub const BLOCK: u32 = 1;
    /// A target thread exited; userspace folds its last totals and deletes its entry.
    pub const THREAD_EXIT: u32 = 2;
    /// A target forked a new process, now in `TARGETS` too (pre-fork workers).
    pub const PROCESS_FORK: u32 = 3;
    /// An event-loop iteration (return from poll to the next poll) stayed on CPU longer than the
    /// busy threshold: `wait_ns` carries the on-CPU time, `runqueue_ns` the whole iteration.
    pub const LONG_ITERATION: u32 = 4;
    /// The user stack of the thread's last long block, captured at the end of the syscall it
    /// blocked in: `reason` carries the id in the `STACKS` map.
    pub const BLOCK_STACK: u32 = 5;
    /// Socket ring buffer: a target transferred bytes on a TCP socket (`DataEvent`).
    pub const SOCKET_DATA: u32 = 16;
    /// Socket ring buffer: a TCP connection of a target was established or first seen (`ConnEvent`).
    pub const SOCKET_OPEN: u32 = 17;
    /// Socket ring buffer: a TCP connection of a target closed (`ConnEvent`).
    pub const SOCKET_CLOSE: u32 = 18;
    /// Socket ring buffer: the kernel retransmitted a segment of a target's connection (`FlowEvent`).
    pub const SOCKET_RETRANSMIT: u32 = 19;
    /// Socket ring buffer: a target's connection was reset, by the peer or by us (`FlowEvent`).
    pub const SOCKET_RESET: u32 = 20;
}

/// Bounds on the kernel maps.
pub const MAX_TARGETS: u32 = 1024;
/// Default number of thread slots (the daemon may size it at load: `max_threads`).
pub const MAX_THREADS: u32 = 16384;
/// Syscall numbers at or above this are not classified.
pub const MAX_SYSCALL_NR: u32 = 512;
/// `bpf_map_create` flag for an array userspace can mmap (reads with no syscall per element).
pub const BPF_F_MMAPABLE: u32 = 1 << 10;
pub const RINGBUF_BYTES: u32 = 256 * 1024;
/// Ring buffer of socket events (data and connections): at 10k requests/s a request's four data
/// events make about 25 MB/s, so this holds a good fraction of a second of them.
pub const SOCKET_RINGBUF_BYTES: u32 = 8 * 1024 * 1024;
/// TCP connections of targets followed at once.
pub const MAX_SOCKETS: u32 = 65536;
/// First bytes of each socket data syscall sent to userspace: enough for the request line and
/// headers of most requests and responses.
pub const DATA_HEAD_BYTES: usize = 512;
/// Last bytes of each data syscall: the end of a chunked body is found there.
pub const DATA_TAIL_BYTES: usize = 16;
/// Distinct user stacks kept for evidence.
pub const MAX_STACKS: u32 = 4096;

/// Buckets of the per-thread log2 histograms; the last one also holds everything larger
/// (2^38 ns, about 4.6 minutes, and up).
pub const THREAD_HIST_BUCKETS: usize = 40;

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
    pub _reserved: u32,
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
    /// (0 until one did), and when the bytes its first nested read took had arrived.
    pub tls_ssl: u64,
    pub tls_buf: u64,
    pub tls_len_out: u64,
    pub tls_sk: u64,
    pub tls_queued_ns: u64,
}
pub const THREAD_STATE_SIZE: usize = 792;
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
            _reserved: 0,
            futex_timeout_ns: 0,
            futex_woken_ns: 0,
            futex_sleep_uaddr: 0,
            home_epoll_fd: 0,
            home_epoll_votes: 0,
            tls_ssl: 0,
            tls_buf: 0,
            tls_len_out: 0,
            tls_sk: 0,
            tls_queued_ns: 0,
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
        let half_ring_records = u64::from(super::SOCKET_RINGBUF_BYTES) / 2 / super::DATA_EVENT_SIZE as u64;
        half_ring_records / targets.max(1) as u64
    }
}

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

/// Value of `SOCKS`: a TCP connection a target uses, keyed by its `struct sock` address.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SockState {
    /// Owner, or 0 until a target thread first transfers data on it (an accepted connection of a
    /// pre-fork server belongs to whichever worker accepts it).
    pub tgid: u32,
    /// `conn_role::*`
    pub role: u32,
    /// When bytes arrived that no read has taken yet; 0 when the socket was drained.
    pub unread_since_ns: u64,
    /// When data last arrived (any, read or not).
    pub rx_last_ns: u64,
    /// Retransmitted segments so far.
    pub retransmits: u32,
    /// Data records of this socket the ring had no room for, so far (it only grows): a record
    /// carries it, and userspace forgets what it was parsing on this connection alone when it
    /// moves, instead of every connection's.
    pub lost: u32,
    /// 1 once a TLS library call of a target moved bytes on it: its ciphertext is never reported
    /// (the plaintext is, from the library's hooks).
    pub tls: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<SockState>() == 40);

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
    pub _pad: u8,
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

/// Load-time constants for the kernel programs, read from the running kernel's BTF and set with
/// `EbpfLoader::override_global`. Rust eBPF gets no CO-RE relocations, so struct offsets come here.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Off-CPU waits at least this long are sent to the ring buffer.
    pub block_threshold_ns: u64,
    pub task_pid_offset: u32,
    pub task_tgid_offset: u32,
    /// Offsets in `struct pt_regs` of the syscall arguments 0, 1, 3 and 4 (x86-64: di, si, r10, r8).
    pub regs_arg0_offset: u32,
    pub regs_arg1_offset: u32,
    pub regs_arg3_offset: u32,
    pub regs_arg4_offset: u32,
    /// Event-loop iterations at least this long on CPU are sent to the ring buffer.
    pub busy_iteration_ns: u64,
    /// pt_regs offset of syscall argument 2 (x86-64: dx).
    pub regs_arg2_offset: u32,
    /// Offsets in `struct sock` (through `__sk_common`) of the connection's family, ports and
    /// addresses, and of `sk_protocol`.
    pub sock_family_offset: u32,
    pub sock_local_port_offset: u32,
    pub sock_remote_port_offset: u32,
    pub sock_local_addr_offset: u32,
    pub sock_remote_addr_offset: u32,
    pub sock_local_addr6_offset: u32,
    pub sock_remote_addr6_offset: u32,
    pub sock_protocol_offset: u32,
    /// Offsets in `struct tcp_sock` of snd_una and snd_nxt.
    pub tcp_snd_una_offset: u32,
    pub tcp_snd_nxt_offset: u32,
    /// Offset in `struct sock` of `__sk_common.skc_state`.
    pub sock_state_offset: u32,
    /// Offset in `struct sock` of `__sk_common.skc_net` (the `struct net *`), and in `struct net`
    /// of `ns.inum`: a socket's network namespace, as /proc/PID/ns/net names it.
    pub sock_net_offset: u32,
    pub net_inum_offset: u32,
    /// pt_regs offset of `orig_ax`: the syscall number of a task inside a syscall.
    pub regs_syscall_nr_offset: u32,
    /// Offsets in `struct msghdr` of its `msg_iter`'s type, user buffer (or iovec array: the
    /// same union), byte count and iovec count.
    pub msg_iter_type_offset: u32,
    pub msg_iter_buf_offset: u32,
    pub msg_iter_count_offset: u32,
    pub msg_iter_segs_offset: u32,
    /// `enum iter_type` values of a single user buffer and of an iovec array (they differ
    /// between kernel versions).
    pub iter_type_ubuf: u8,
    pub iter_type_iovec: u8,
    pub _pad: [u8; 2],
    /// The budgets a child process the kernel starts following begins with (`TargetInfo`).
    pub thread_quota: u32,
    pub socket_quota: u32,
}
const _: () = assert!(size_of::<ProbeConfig>() == 128);

/// Key of `LISTEN_PORTS`: a port in one network namespace.
pub fn listen_key(netns_inum: u32, port: u16) -> u64 {
    (u64::from(netns_inum) << 16) | u64::from(port)
}

/// `SSL *` objects whose last socket is remembered (`TLS_SOCKS`), for reads the library answers
/// from its buffer without a nested transfer.
pub const MAX_TLS_SESSIONS: u32 = 16384;

/// Key of `TLS_SOCKS`: an `SSL *` in one process (forked workers share addresses).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TlsKey {
    pub ssl: u64,
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<TlsKey>() == 16);

/// Listening (namespace, port) pairs followed at once.
pub const MAX_LISTEN_PORTS: u32 = 4096;

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
