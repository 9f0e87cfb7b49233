//! A pseudo-terminal of our own for a child process (`gateway-observer top`): the child gets the
//! slave as stdin, stdout and stderr in a session of its own (so no tty of ours is touched, and a
//! hangup sends it no SIGHUP: only the terminal says it is gone); a thread drains the master so
//! the child never blocks on a full terminal, and [`Pty::hang_up`] closes the master as an SSH
//! server does when the connection drops. The child is killed on drop.

use std::{
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::process::CommandExt as _,
    },
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

pub struct Pty {
    pub child: Child,
    output: Arc<Mutex<Vec<u8>>>,
    hang_up: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
    /// The master, for termios reads; the reader thread holds its own copy.
    master: Option<OwnedFd>,
}

impl Pty {
    /// Runs `command` on a new `cols`x`rows` terminal.
    pub fn spawn(mut command: Command, cols: u16, rows: u16) -> Pty {
        let (master, slave) = open_pair();
        let size = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ reads one winsize, ours for the call.
        assert_eq!(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) }, 0, "set the window size");
        let dup = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the pty slave"));
        command.stdin(dup(&slave)).stdout(dup(&slave)).stderr(dup(&slave)).env("TERM", "xterm-256color");
        // SAFETY: setsid is async-signal-safe and touches nothing of the parent's.
        unsafe {
            command.pre_exec(|| if libc::setsid() < 0 { Err(io::Error::last_os_error()) } else { Ok(()) });
        }
        let child = command.spawn().expect("spawn the command on the pty");
        drop(slave);
        let output = Arc::new(Mutex::new(Vec::new()));
        let hang_up = Arc::new(AtomicBool::new(false));
        let reader = {
            let (master, output, hang_up) =
                (master.try_clone().expect("dup the master"), output.clone(), hang_up.clone());
            thread::spawn(move || drain(master, &output, &hang_up))
        };
        Pty { child, output, hang_up, reader: Some(reader), master: Some(master) }
    }

    /// Everything the child wrote so far, lossily as text.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().map(|o| o.clone()).unwrap_or_default()).into_owned()
    }

    /// Polls the output until `done` holds; panics after `within` with what was written.
    pub fn wait_for(&self, what: &str, within: Duration, done: impl Fn(&str) -> bool) {
        let end = Instant::now() + within;
        loop {
            let out = self.output();
            if done(&out) {
                return;
            }
            assert!(Instant::now() < end, "{what}: not written within {within:?}; the terminal got:\n{out:?}");
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The terminal's local flags (ICANON, ECHO, …) as the child left them.
    pub fn local_flags(&self) -> libc::tcflag_t {
        let master = self.master.as_ref().expect("not hung up");
        // SAFETY: a zeroed termios is valid to be filled in; tcgetattr writes one.
        let mut termios: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and a termios of ours.
        assert_eq!(unsafe { libc::tcgetattr(master.as_raw_fd(), &mut termios) }, 0, "tcgetattr");
        termios.c_lflag
    }

    /// Closes the master side: the slave hangs up.
    pub fn hang_up(&mut self) {
        self.master = None;
        self.hang_up.store(true, Ordering::Relaxed);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }

    /// Waits up to `within` for the child to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= end {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// CPU time the child has used, from /proc/PID/stat (utime + stime, in clock ticks).
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        after_comm.split_whitespace().skip(11).take(2).filter_map(|v| v.parse::<u64>().ok()).sum()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.hang_up();
    }
}

/// Reads the master until told to hang up, then closes it.
fn drain(master: OwnedFd, output: &Mutex<Vec<u8>>, hang_up: &AtomicBool) {
    let mut buf = [0u8; 4096];
    while !hang_up.load(Ordering::Relaxed) {
        let mut pollfd = libc::pollfd { fd: master.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of ours.
        if unsafe { libc::poll(&mut pollfd, 1, 50) } <= 0 || pollfd.revents & libc::POLLIN == 0 {
            // Nothing yet, or the child closed the slave (POLLHUP): look at the flag again.
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        // SAFETY: a valid fd and a buffer of the length given.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if let (Ok(n), Ok(mut out)) = (usize::try_from(n), output.lock()) {
            out.extend_from_slice(&buf[..n]);
        }
    }
}

/// (master, slave) of a new pseudo-terminal.
fn open_pair() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    let null = std::ptr::null_mut::<libc::c_char>();
    // SAFETY: openpty writes two new descriptors; name, termios and window size may be null.
    let rc = unsafe { libc::openpty(&mut master, &mut slave, null, std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0, "openpty: {}", io::Error::last_os_error());
    // SAFETY: both descriptors are new and nobody else owns them; CLOEXEC so that only the child
    // we give the slave to holds it.
    unsafe {
        libc::fcntl(master, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(slave, libc::F_SETFD, libc::FD_CLOEXEC);
        (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave))
    }
}
