//! What each syscall means for an off-CPU span: userspace owns this table and writes it into the
//! kernel's `SYSCALL_CLASS` map, so the kernel never needs to know syscall numbers.

use gateway_observer_common::syscall_class;

/// x86-64 syscall numbers we classify, with their names (for evidence) and classes.
/// Numbers from arch/x86/entry/syscalls/syscall_64.tbl.
const X86_64: &[(u32, &str, u8)] = &[
    (0, "read", syscall_class::IO),
    (1, "write", syscall_class::IO),
    (7, "poll", syscall_class::POLL),
    (17, "pread64", syscall_class::IO),
    (18, "pwrite64", syscall_class::IO),
    (19, "readv", syscall_class::IO),
    (20, "writev", syscall_class::IO),
    (23, "select", syscall_class::POLL),
    (34, "pause", syscall_class::OTHER),
    (35, "nanosleep", syscall_class::SLEEP),
    (40, "sendfile", syscall_class::IO),
    (42, "connect", syscall_class::SOCKET),
    (43, "accept", syscall_class::SOCKET),
    (44, "sendto", syscall_class::SOCKET),
    (45, "recvfrom", syscall_class::SOCKET),
    (46, "sendmsg", syscall_class::SOCKET),
    (47, "recvmsg", syscall_class::SOCKET),
    (61, "wait4", syscall_class::OTHER),
    (202, "futex", syscall_class::FUTEX),
    (230, "clock_nanosleep", syscall_class::SLEEP),
    (232, "epoll_wait", syscall_class::EPOLL),
    (270, "pselect6", syscall_class::POLL),
    (271, "ppoll", syscall_class::POLL),
    (275, "splice", syscall_class::IO),
    (281, "epoll_pwait", syscall_class::EPOLL),
    (288, "accept4", syscall_class::SOCKET),
    (295, "preadv", syscall_class::IO),
    (296, "pwritev", syscall_class::IO),
    (299, "recvmmsg", syscall_class::SOCKET),
    (307, "sendmmsg", syscall_class::SOCKET),
    (426, "io_uring_enter", syscall_class::POLL),
    (441, "epoll_pwait2", syscall_class::EPOLL),
    (449, "futex_waitv", syscall_class::FUTEX_WAITV),
    // futex2's wake: never sleeps, but a thread it wakes must see its waker in a futex call.
    (454, "futex_wake", syscall_class::FUTEX_WAIT2),
    (455, "futex_wait", syscall_class::FUTEX_WAIT2),
];

/// The class of syscall `nr`. Unlisted syscalls are `OTHER`: the thread slept in a syscall we do
/// not name (still told apart from sleeping outside any syscall).
pub fn class_of(nr: u32) -> u8 {
    X86_64.iter().find(|(n, _, _)| *n == nr).map_or(syscall_class::OTHER, |(_, _, c)| *c)
}

/// The syscall's name, for evidence; `None` for numbers not in the table.
pub fn name_of(nr: i32) -> Option<&'static str> {
    let nr = u32::try_from(nr).ok()?;
    X86_64.iter().find(|(n, _, _)| *n == nr).map(|(_, name, _)| *name)
}

/// The off-CPU reason of a thread found blocked (state letter from /proc, syscall and arguments
/// from /proc/.../syscall) when it is first followed: the same choice the kernel makes at
/// switch-out, for a thread that switched out before we were watching.
pub fn blocked_reason(state: char, syscall: Option<(u32, [u64; 6])>) -> u32 {
    use gateway_observer_common::reason;
    if state == 'D' {
        return reason::DISK;
    }
    let Some((nr, args)) = syscall else { return reason::OTHER };
    // How its previous timed wait ended is not in /proc: a timed wait reads as one that may be
    // woken, until the kernel sees it end.
    gateway_observer_common::reason_for_syscall(class_of(nr), futex_timed(nr, &args), false)
}

/// Whether syscall `nr` with `args` is a futex wait with a timeout, as the kernel programs read
/// it from a sleeping thread's registers.
pub fn futex_timed(nr: u32, args: &[u64; 6]) -> bool {
    let timeout = match class_of(nr) {
        syscall_class::FUTEX if gateway_observer_common::futex_op_waits(args[1]) => args[3],
        syscall_class::FUTEX_WAITV => args[3],
        syscall_class::FUTEX_WAIT2 => args[4],
        _ => 0,
    };
    timeout != 0
}

/// Where the bytes of a socket data syscall are (`data_shape::*`): the kernel copies the first
/// and last ones of these calls when they touch a followed TCP socket.
pub fn data_shape_of(nr: u32) -> u8 {
    use gateway_observer_common::data_shape;
    match nr {
        0 | 45 => data_shape::READ_BUF,         // read, recvfrom
        1 | 44 => data_shape::WRITE_BUF,        // write, sendto
        19 => data_shape::READ_IOV,             // readv
        20 => data_shape::WRITE_IOV,            // writev
        47 => data_shape::READ_MSG,             // recvmsg
        46 => data_shape::WRITE_MSG,            // sendmsg
        40 | 275 => data_shape::WRITE_LEN_ONLY, // sendfile, splice
        _ => data_shape::NONE,
    }
}

/// The whole table as the kernel map wants it, one entry per syscall number below `len`: the
/// class in the low bits, the data shape in the high bits.
pub fn class_table(len: u32) -> Vec<u8> {
    (0..len).map(|nr| class_of(nr) | data_shape_of(nr) << syscall_class::SHAPE_SHIFT).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futex_and_sleeps_are_told_apart() {
        assert_eq!(class_of(202), syscall_class::FUTEX);
        assert_eq!(class_of(35), syscall_class::SLEEP);
        assert_eq!(class_of(230), syscall_class::SLEEP);
        assert_eq!(class_of(232), syscall_class::EPOLL);
        assert_eq!(class_of(7), syscall_class::POLL);
        assert_eq!(class_of(45), syscall_class::SOCKET);
        assert_eq!(class_of(0), syscall_class::IO);
        assert_eq!(class_of(39), syscall_class::OTHER, "getpid is an unnamed syscall");
    }

    #[test]
    fn table_covers_every_number_once() {
        let table = class_table(512);
        assert_eq!(table.len(), 512);
        assert_eq!(table[455], syscall_class::FUTEX_WAIT2);
        assert_eq!(table[45] & syscall_class::CLASS_MASK, syscall_class::SOCKET);
        assert_eq!(table[45] >> syscall_class::SHAPE_SHIFT, gateway_observer_common::data_shape::READ_BUF);
        assert_eq!(table[20] >> syscall_class::SHAPE_SHIFT, gateway_observer_common::data_shape::WRITE_IOV);
        let mut numbers: Vec<u32> = X86_64.iter().map(|(n, _, _)| *n).collect();
        numbers.dedup();
        assert_eq!(numbers.len(), X86_64.len(), "table is sorted and has no duplicate numbers");
    }

    #[test]
    fn a_thread_found_blocked_gets_the_kernels_reason() {
        use gateway_observer_common::reason;
        assert_eq!(blocked_reason('S', Some((202, [1, 0x189, 0, 0x7ffc, 0, 0]))), reason::FUTEX_TIMED);
        assert_eq!(blocked_reason('S', Some((202, [1, 0x80, 0, 0, 0, 0]))), reason::FUTEX);
        // FUTEX_WAKE_PRIVATE: a count, not a timeout, in the fourth argument.
        assert_eq!(blocked_reason('S', Some((202, [1, 0x81, 1, 0x7ffc, 0, 0]))), reason::FUTEX);
        assert_eq!(blocked_reason('S', Some((232, [0; 6]))), reason::POLL);
        assert_eq!(blocked_reason('D', Some((0, [0; 6]))), reason::DISK);
        assert_eq!(blocked_reason('S', None), reason::OTHER);
    }

    #[test]
    fn names_for_evidence() {
        assert_eq!(name_of(202), Some("futex"));
        assert_eq!(name_of(-1), None);
        assert_eq!(name_of(39), None);
    }
}
