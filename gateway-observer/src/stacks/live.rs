//! Where a blocked thread stopped, from `/proc/PID/task/TID/syscall`: the syscall it is in, its
//! arguments, and its user stack pointer and program counter as it entered the kernel. The kernel
//! writes it only for a thread that is not running (and to a reader allowed to ptrace-attach:
//! the daemon keeps CAP_SYS_PTRACE for this). Nothing here touches the thread's memory.

use std::io;

/// A thread caught off the CPU, with the registers an unwind starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// The syscall it sleeps in; `None` when blocked in the kernel outside a syscall (a page fault).
    pub syscall: Option<u64>,
    pub args: [u64; 6],
    pub sp: u64,
    pub pc: u64,
}

/// Why a thread has no registers to unwind from.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// On a CPU now: its registers change under any reader.
    #[error("running")]
    Running,
    /// Exited, or its process did.
    #[error("thread gone")]
    Gone,
    /// Not allowed to ptrace-attach to the process (capability dropped, Yama, another user namespace).
    #[error("not permitted: {0}")]
    Denied(io::Error),
    #[error("{0}")]
    Io(io::Error),
    /// Text the kernel does not write.
    #[error("unexpected /proc/TID/syscall: {0:?}")]
    Malformed(String),
}

impl LiveError {
    /// A metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Gone => "gone",
            Self::Denied(_) => "denied",
            Self::Io(_) | Self::Malformed(_) => "error",
        }
    }
}

/// Reads thread `tid` of process `pid`.
pub fn read(pid: u32, tid: u32) -> Result<Stopped, LiveError> {
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) {
        Ok(text) => parse(&text),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => Err(LiveError::Gone),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => Err(LiveError::Denied(e)),
        Err(e) => Err(LiveError::Io(e)),
    }
}

/// `running`; `-1 SP PC` (blocked outside a syscall); or `NR A1 .. A6 SP PC`: the number in
/// decimal, the rest `0x` hex (fs/proc/base.c, `proc_pid_syscall`).
pub fn parse(text: &str) -> Result<Stopped, LiveError> {
    let text = text.trim();
    if text == "running" {
        return Err(LiveError::Running);
    }
    let malformed = || LiveError::Malformed(text.chars().take(200).collect());
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    let hex = |s: &str| s.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok());
    let values: Option<Vec<u64>> = fields.iter().skip(1).map(|f| hex(f)).collect();
    let values = values.ok_or_else(malformed)?;
    match (fields.first().copied(), values.as_slice()) {
        (Some("-1"), [sp, pc]) => Ok(Stopped { syscall: None, args: [0; 6], sp: *sp, pc: *pc }),
        (Some(nr), [a1, a2, a3, a4, a5, a6, sp, pc]) => {
            let syscall = nr.parse::<u64>().map_err(|_| malformed())?;
            Ok(Stopped { syscall: Some(syscall), args: [*a1, *a2, *a3, *a4, *a5, *a6], sp: *sp, pc: *pc })
        }
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_in_a_syscall() {
        let text = "230 0x1 0x0 0x7ffd5c8e6f70 0x7ffd5c8e6f70 0x0 0x0 0x7ffd5c8e6f48 0x7f3b2a4e7c5a\n";
        let stopped = parse(text).expect("parses");
        assert_eq!(stopped.syscall, Some(230), "clock_nanosleep");
        assert_eq!(stopped.args[2], 0x7ffd_5c8e_6f70);
        assert_eq!((stopped.sp, stopped.pc), (0x7ffd_5c8e_6f48, 0x7f3b_2a4e_7c5a));
    }

    #[test]
    fn blocked_outside_a_syscall_and_running() {
        let stopped = parse("-1 0x7ffd5c8e6f48 0x55d0c0001234").expect("parses");
        assert_eq!(stopped.syscall, None);
        assert_eq!(stopped.pc, 0x55d0_c000_1234);
        assert!(matches!(parse("running\n"), Err(LiveError::Running)));
    }

    #[test]
    fn what_the_kernel_never_writes_is_refused() {
        for text in [
            "",
            "230",
            "230 0x1 0x2",
            "x 0x1 0x2",
            "230 1 2 3 4 5 6 7 8",
            "-1 0x1",
            "230 0x1 0x0 0x0 0x0 0x0 0x0 0x1 0xzz",
        ] {
            assert!(matches!(parse(text), Err(LiveError::Malformed(_))), "{text:?} accepted");
        }
    }

    #[test]
    fn this_processs_sleeping_thread_and_a_gone_one() {
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() } as u32);
            std::thread::sleep(std::time::Duration::from_millis(500));
        });
        let tid = rx.recv().expect("tid");
        let pid = std::process::id();
        // It may not be asleep yet: retry until it is.
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(400);
        let stopped = loop {
            match read(pid, tid) {
                Ok(stopped) => break stopped,
                Err(LiveError::Running) if std::time::Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("reading our own sleeping thread: {e}"),
            }
        };
        assert_eq!(stopped.syscall, Some(libc::SYS_clock_nanosleep as u64), "{stopped:?}");
        assert!(stopped.sp != 0 && stopped.pc != 0, "{stopped:?}");
        sleeper.join().expect("join");
        assert!(matches!(read(pid, tid), Err(LiveError::Gone)), "an exited thread");
    }
}
