//! How `top` ends when nobody is left to press `q`: a signal (SIGINT, SIGTERM, SIGHUP) or a
//! terminal that went away (an SSH session that dropped, a tmux pane killed).
//!
//! The main loop waits for keys here ([`Input::wait`]) rather than in crossterm: on a hung-up tty
//! a read returns 0 for ever, and crossterm's reader retries that in a loop without returning
//! (crossterm 0.29, `event/source/unix/mio.rs`), which took a core and never looked at signals.
//! A hangup between our wait and crossterm's read is still possible, so a watchdog thread checks
//! the same conditions on its own and ends the process if the main loop has not within [`GRACE`].

use std::{
    fs::File,
    io::{self, IsTerminal as _},
    os::fd::{AsRawFd as _, RawFd},
    sync::atomic::{AtomicI32, Ordering},
    thread,
    time::Duration,
};

/// How long the main loop has to end by itself once a stop is due.
pub const GRACE: Duration = Duration::from_secs(1);
/// How long the watchdog gives the terminal's restoration before it exits anyway (a write to a
/// terminal whose output is stopped blocks).
const RESTORE_GRACE: Duration = Duration::from_millis(300);

/// The last of SIGINT, SIGTERM or SIGHUP received, 0 for none.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(signal, Ordering::Relaxed);
}

pub fn install_signal_handlers() -> io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler only stores to an
        // atomic, which is async-signal-safe; the pointers passed are valid for the call. No
        // SA_RESTART: the wait in `Input::wait` must return on a signal.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The signal received, if any.
pub fn signalled() -> Option<i32> {
    Some(SIGNALLED.load(Ordering::Relaxed)).filter(|s| *s != 0)
}

/// What a wait for keys found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Bytes to read: crossterm's read will not block.
    Ready,
    /// Nothing within the timeout, or a signal came.
    Idle,
    /// Hung up, closed or in error: no key will ever come.
    Gone,
}

/// The terminal keys come from: stdin if it is one, else /dev/tty, as crossterm picks it.
pub struct Input {
    /// Kept open so that `fd` stays valid; `None` for stdin.
    _tty: Option<File>,
    fd: RawFd,
}

impl Input {
    pub fn open() -> io::Result<Input> {
        if io::stdin().is_terminal() {
            return Ok(Input { _tty: None, fd: libc::STDIN_FILENO });
        }
        let tty = File::open("/dev/tty")?;
        let fd = tty.as_raw_fd();
        Ok(Input { _tty: Some(tty), fd })
    }

    pub fn wait(&self, timeout: Duration) -> Wait {
        wait(self.fd, timeout)
    }

    /// Checks the terminal and the signals every 100 ms on a thread of its own; once either says
    /// stop and the main loop has not ended the process within [`GRACE`], restores the terminal
    /// (bounded) and exits. `self` must outlive the process's main loop (it is never closed
    /// before exit in `top`).
    pub fn spawn_watchdog(&self, restore: fn()) -> io::Result<()> {
        let fd = self.fd;
        thread::Builder::new().name("top-watchdog".into()).spawn(move || {
            let code = loop {
                thread::sleep(Duration::from_millis(100));
                if let Some(signal) = signalled() {
                    break 128 + signal;
                }
                if wait(fd, Duration::ZERO) == Wait::Gone {
                    break 1;
                }
            };
            thread::sleep(GRACE);
            let (done_tx, done) = std::sync::mpsc::channel();
            let _ = thread::Builder::new().name("top-restore".into()).spawn(move || {
                restore();
                let _ = done_tx.send(());
            });
            let _ = done.recv_timeout(RESTORE_GRACE);
            // SAFETY: _exit ends the process without running Rust's exit path, which flushes
            // stdout and could block on the same stopped terminal.
            unsafe { libc::_exit(code) }
        })?;
        Ok(())
    }
}

/// Waits up to `timeout` for `fd` to become readable.
fn wait(fd: RawFd, timeout: Duration) -> Wait {
    let mut pollfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, ours for the call.
    let n = unsafe { libc::poll(&mut pollfd, 1, ms) };
    if n < 0 {
        // EINTR: a signal, which the caller looks at next; anything else is not the terminal's
        // fault and is retried at the next wait.
        return Wait::Idle;
    }
    classify(pollfd.revents)
}

/// What poll's `revents` say about a terminal. A hung-up tty reports POLLIN as well (reads give
/// 0), so the hangup is looked at first.
fn classify(revents: libc::c_short) -> Wait {
    if revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Wait::Gone
    } else if revents & libc::POLLIN != 0 {
        Wait::Ready
    } else {
        Wait::Idle
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{FromRawFd as _, OwnedFd};

    use super::*;

    /// A pseudo-terminal pair: (master, slave).
    fn pty() -> (OwnedFd, OwnedFd) {
        let (mut master, mut slave) = (-1, -1);
        // SAFETY: openpty writes two descriptors; the name, termios and size pointers may be null.
        let rc =
            unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
        assert_eq!(rc, 0, "openpty: {}", io::Error::last_os_error());
        // SAFETY: both descriptors are new and owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
    }

    fn write(fd: &OwnedFd, bytes: &[u8]) {
        // SAFETY: a valid fd and a buffer of the length given.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(n, bytes.len() as isize);
    }

    #[test]
    fn a_terminal_whose_other_end_closed_is_gone() {
        let (master, slave) = pty();
        assert_eq!(wait(slave.as_raw_fd(), Duration::ZERO), Wait::Idle);
        // Canonical mode (a fresh pty): a line is readable once it ends.
        write(&master, b"q\n");
        assert_eq!(wait(slave.as_raw_fd(), Duration::from_secs(1)), Wait::Ready);
        drop(master);
        assert_eq!(wait(slave.as_raw_fd(), Duration::ZERO), Wait::Gone);
    }

    #[test]
    fn a_hangup_wins_over_readable() {
        assert_eq!(classify(libc::POLLIN | libc::POLLHUP), Wait::Gone);
        assert_eq!(classify(libc::POLLNVAL), Wait::Gone);
        assert_eq!(classify(libc::POLLIN), Wait::Ready);
        assert_eq!(classify(0), Wait::Idle);
    }
}
