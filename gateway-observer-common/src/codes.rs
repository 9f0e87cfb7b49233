//! Codes both sides agree on (reasons, syscall classes, transfer shapes, record kinds, drop
//! counters) and the small pure rules both apply to them.

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
/// `DataEvent::fd` of TLS plaintext whose socket the kernel does not know (a library that moves
/// its ciphertext through memory, as Node.js does, away from any call hooked): `sk` holds the
/// session's `SSL *` instead, and userspace ties it to the connection the thread read last.
pub const DATA_FD_TLS_SESSION: u32 = u32::MAX - 1;

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

/// Values of `BLOCK_DETAIL` (tid → role): which long blocks are sent to userspace one by one.
pub mod block_detail {
    /// An event loop: its own long blocks, each with the blocking call's user stack.
    pub const LOOP: u8 = 1;
    /// A thread that ends stop-the-world pauses (HotSpot's `VM Thread` of a process with event
    /// loops): the long blocks it ends, which tell a pause from a loop's own block.
    pub const PAUSE_WAKER: u8 = 2;
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
    /// Socket ring buffer: a transfer of bytes inside one HTTP/2 frame's payload (`PayloadEvent`).
    pub const SOCKET_PAYLOAD: u32 = 21;
    /// Socket ring buffer: the next frame headers of a walk that reached its bound, walked on by
    /// a continuation program (`H2ContinuedEvent`).
    pub const SOCKET_H2_CONTINUED: u32 = 22;
}
