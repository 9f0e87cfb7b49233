//! HotSpot's dynamic attach, as `jcmd` and `jstack` use it, for one command: `threaddump`.
//! The JVM starts its attach listener when it gets SIGQUIT while a `.attach_pid<NSPID>` file exists
//! in its working directory or its /tmp; the listener's socket is `/tmp/.java_pid<NSPID>` in the
//! JVM's mount namespace, reached here through `/proc/PID/root`, so a JVM in a container works.
//! Protocol (JDK's `src/jdk.attach/linux/classes/sun/tools/attach/VirtualMachineImpl.java`):
//! the client writes `1\0`, the command, three arguments, each NUL-terminated; the JVM answers a
//! status line (`0` when done) and the command's output, then closes.
//! Blocking and bounded: run it off the tick thread (`worker`).

use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::PathBuf,
    time::{Duration, Instant},
};

/// How long the JVM may take to open its socket after SIGQUIT (its first attach starts a thread).
const LISTENER_WAIT: Duration = Duration::from_secs(2);
const LISTENER_POLL: Duration = Duration::from_millis(20);
/// Socket read and write timeout; a dump of a thousand threads took 37–77 ms here (`cargo xtask bench jvm-dump`).
const IO_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttachError {
    /// The process is gone or its /proc entry cannot be read.
    #[error("process {0} is gone")]
    Gone(u32),
    /// The JVM's socket is 0600 of its own user and signalling it needs CAP_KILL, which the
    /// daemon drops.
    #[error("target runs as uid {0}")]
    OtherUid(u32),
    /// Neither its working directory nor its /tmp took the attach file.
    #[error("cannot create the attach file: {0}")]
    AttachFile(String),
    #[error("cannot signal the JVM: {0}")]
    Signal(String),
    /// No socket after SIGQUIT: attach disabled (`-XX:+DisableAttachMechanism`, `-Xrs`) or a
    /// JVM too busy to answer.
    #[error("the JVM opened no attach socket within {0:?}")]
    NoListener(Duration),
    #[error("attach socket: {0}")]
    Socket(String),
    /// The JVM refused the command (its status line was not 0).
    #[error("the JVM answered status {0}")]
    Refused(String),
}

/// The thread dump of JVM `pid` (a host pid), at most `max_bytes` of it.
pub fn thread_dump(pid: u32, max_bytes: usize) -> Result<String, AttachError> {
    let uids = crate::host::procfs::uids(pid);
    let Some(&euid) = uids.get(1) else { return Err(AttachError::Gone(pid)) };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own = unsafe { libc::geteuid() };
    if euid != own {
        return Err(AttachError::OtherUid(euid));
    }
    let nspid = crate::host::procfs::namespace_pid(pid).ok_or(AttachError::Gone(pid))?;
    let socket = PathBuf::from(format!("/proc/{pid}/root/tmp/.java_pid{nspid}"));
    let mut stream = match UnixStream::connect(&socket) {
        Ok(stream) => stream,
        Err(_) => start_listener(pid, nspid, &socket)?,
    };
    let err = |e: std::io::Error| AttachError::Socket(e.to_string());
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(err)?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(err)?;
    stream.write_all(b"1\0threaddump\0\0\0\0").map_err(err)?;
    let mut reply = Vec::new();
    let cap = u64::try_from(max_bytes).unwrap_or(u64::MAX);
    (&mut stream).take(cap).read_to_end(&mut reply).map_err(err)?;
    let text = String::from_utf8_lossy(&reply);
    let (status, dump) = text.split_once('\n').unwrap_or((&text, ""));
    if status.trim() != "0" {
        return Err(AttachError::Refused(status.chars().take(32).collect()));
    }
    Ok(dump.to_owned())
}

/// Asks the JVM to open its attach socket, waits for it (bounded) and connects.
fn start_listener(pid: u32, nspid: u32, socket: &std::path::Path) -> Result<UnixStream, AttachError> {
    let name = format!(".attach_pid{nspid}");
    let candidates = [format!("/proc/{pid}/cwd/{name}"), format!("/proc/{pid}/root/tmp/{name}")];
    let mut created = None;
    let mut last_error = String::new();
    for path in candidates {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => {
                created = Some(path);
                break;
            }
            // Another attacher's file does as well; it removes it.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => break,
            Err(e) => last_error = e.to_string(),
        }
    }
    let cleanup = AttachFile(created);
    if cleanup.0.is_none() && !last_error.is_empty() {
        return Err(AttachError::AttachFile(last_error));
    }
    let pid_t = libc::pid_t::try_from(pid).map_err(|_| AttachError::Gone(pid))?;
    // SAFETY: kill takes plain integers; the target was checked to be a HotSpot JVM (it has an
    // hsperfdata file), whose SIGQUIT handler prints a dump or starts the attach listener.
    if unsafe { libc::kill(pid_t, libc::SIGQUIT) } != 0 {
        return Err(AttachError::Signal(std::io::Error::last_os_error().to_string()));
    }
    let start = Instant::now();
    loop {
        if let Ok(stream) = UnixStream::connect(socket) {
            drop(cleanup);
            return Ok(stream);
        }
        if start.elapsed() >= LISTENER_WAIT {
            return Err(AttachError::NoListener(LISTENER_WAIT));
        }
        std::thread::sleep(LISTENER_POLL);
    }
}

/// The attach file this attach created, removed whatever happens.
struct AttachFile(Option<String>);

impl Drop for AttachFile {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}
