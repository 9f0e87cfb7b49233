//! The helper process that opens uprobes after the daemon dropped CAP_SYS_ADMIN. Forked while the
//! daemon has one thread and every capability; it then keeps CAP_SYS_ADMIN (the kernel's
//! requirement), CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (to read a target's /proc files, as the
//! daemon does, for its checks), closes every inherited fd but its socket, and lives as long as
//! the daemon (it exits when the socket closes, or is killed when the daemon dies).
//!
//! The daemon parses what the gateways send, so the helper does not trust its requests: it opens
//! an event only for a pid the target specs select (itself or through an ancestor, read from
//! /proc), on a file that process has mapped executable (the fd passed, by device and inode), at
//! the file offset of one of the calls `tls_libraries` hooks (the helper parses the ELF itself),
//! or of a RET instruction of a hooked Go function (the helper decodes the function itself), and
//! a uretprobe only on an OpenSSL call (never on a Go function: its stack moves).
//! So a compromised daemon can plant uprobes only where the daemon would have anyway.
//!
//! It also opens a target's mapped file through `/proc/PID/map_files` for the daemon (a library
//! deleted after loading, as netty-tcnative's: following that link needs CAP_SYS_ADMIN), under
//! the same first two checks: a target pid, a range that pid maps executable from a regular
//! file no larger than `tls_libraries::MAX_LIBRARY_BYTES`, the link leading to the device and
//! inode `maps` names for it.

use std::{
    collections::HashMap,
    fs::File,
    io,
    os::{
        fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    time::Duration,
};

use super::{UprobePmu, UprobeRequest, fd_passing, perf_event_open};
use crate::host::{
    mapped_files::{self, MappedError, MappedFile},
    tls_libraries,
};

/// CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_SYS_ADMIN.
const HELPER_CAPS: u64 = 1 << 2 | 1 << 19 | 1 << 21;
/// How long the daemon waits for an answer (an attach takes well under a millisecond).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// The helper's socket after it closed every other fd but the standard three.
const SOCKET_FD: i32 = 3;
/// Parsed libraries kept by the helper; more are parsed again.
const MAX_PARSED: usize = 64;

/// Sequence (4), pid (4), uretprobe flag (1, padded to 4), kind (1, padded to 4), offset or the
/// mapping's start (8), the mapping's end (8).
const REQUEST_LEN: usize = 32;
/// Request kinds: a uprobe on the passed fd, or a mapped file to open (no fd passed).
const KIND_UPROBE: u8 = 0;
const KIND_OPEN_MAPPED: u8 = 1;
const ANSWER_LEN: usize = 8;

/// Why the helper would not open an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the pid is not selected by the target specs")]
    NotTarget,
    #[error("the process does not map that file executable")]
    NotMapped,
    #[error("the offset is not one of the hooked TLS calls of that file (or not one a uretprobe may go on)")]
    NotAnEntry,
    #[error("malformed request")]
    BadRequest,
}

impl Refusal {
    const ALL: [Refusal; 4] = [Self::NotTarget, Self::NotMapped, Self::NotAnEntry, Self::BadRequest];

    /// Answer codes: negative (a positive code is the kernel's errno, 0 success).
    fn code(self) -> i32 {
        -1 - Self::ALL.iter().position(|r| *r == self).unwrap_or(3) as i32
    }

    fn from_code(code: i32) -> Self {
        usize::try_from(-1 - code).ok().and_then(|i| Self::ALL.get(i).copied()).unwrap_or(Self::BadRequest)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("perf_event_open: {0}")]
    Kernel(io::Error),
    #[error("the uprobe helper refused: {0}")]
    Refused(Refusal),
    #[error("the uprobe helper did not answer: {0}")]
    Helper(io::Error),
}

/// The daemon's end of the helper.
pub struct Helper {
    socket: OwnedFd,
    child: libc::pid_t,
    /// Numbers requests, so an answer that came after its timeout is never taken for the next.
    sequence: std::cell::Cell<u32>,
}

impl Helper {
    /// Forks the helper. Call while this process has one thread and still holds CAP_SYS_ADMIN;
    /// `is_target` runs in the helper, for each request.
    pub fn spawn(pmu: UprobePmu, is_target: impl FnMut(u32) -> bool) -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two fds into the array it is given.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) }
            != 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: getpid has no preconditions.
        let daemon = unsafe { libc::getpid() };
        // SAFETY: with one thread, the child's copy of the address space is consistent (no lock
        // held by another thread); the child never returns from `helper_main`.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => helper_main(theirs.as_raw_fd(), daemon, pmu, is_target),
            child => {
                drop(theirs);
                set_receive_timeout(&ours, ANSWER_TIMEOUT)?;
                Ok(Self { socket: ours, child, sequence: std::cell::Cell::new(0) })
            }
        }
    }

    /// The helper's pid (tests and the startup log).
    pub fn pid(&self) -> u32 {
        self.child as u32
    }

    /// Asks the helper for the event of `request` on `library`.
    pub fn open(&self, library: &File, request: UprobeRequest) -> Result<OwnedFd, OpenError> {
        let mut message = [0u8; REQUEST_LEN];
        message[4..8].copy_from_slice(&request.pid.to_le_bytes());
        message[8] = u8::from(request.retprobe);
        message[12] = KIND_UPROBE;
        message[16..24].copy_from_slice(&request.offset.to_le_bytes());
        self.ask(message, Some(library))
    }

    /// Asks the helper to open the file process `pid` maps at `mapped`'s range, through
    /// `/proc/PID/map_files`.
    pub fn open_mapped(&self, pid: u32, mapped: &MappedFile) -> Result<File, OpenError> {
        let mut message = [0u8; REQUEST_LEN];
        message[4..8].copy_from_slice(&pid.to_le_bytes());
        message[12] = KIND_OPEN_MAPPED;
        message[16..24].copy_from_slice(&mapped.start.to_le_bytes());
        message[24..32].copy_from_slice(&mapped.end.to_le_bytes());
        self.ask(message, None).map(File::from)
    }

    /// Sends one request (numbered here) and waits for its answer's fd.
    fn ask(&self, mut message: [u8; REQUEST_LEN], fd: Option<&File>) -> Result<OwnedFd, OpenError> {
        let sequence = self.sequence.get().wrapping_add(1);
        self.sequence.set(sequence);
        message[0..4].copy_from_slice(&sequence.to_le_bytes());
        fd_passing::send(self.socket.as_fd(), &message, fd.map(|f| f.as_fd())).map_err(OpenError::Helper)?;
        loop {
            let mut answer = [0u8; ANSWER_LEN];
            let (len, fd) = fd_passing::recv(self.socket.as_fd(), &mut answer).map_err(OpenError::Helper)?;
            if len == 0 {
                return Err(OpenError::Helper(io::ErrorKind::UnexpectedEof.into()));
            }
            if len != ANSWER_LEN || u32::from_le_bytes(answer[0..4].try_into().expect("4 bytes")) != sequence {
                continue; // the late answer of a request that timed out: its fd is closed here
            }
            return match i32::from_le_bytes(answer[4..8].try_into().expect("4 bytes")) {
                0 => fd.ok_or_else(|| OpenError::Helper(io::Error::other("an answer without its fd"))),
                errno if errno > 0 => Err(OpenError::Kernel(io::Error::from_raw_os_error(errno))),
                refusal => Err(OpenError::Refused(Refusal::from_code(refusal))),
            };
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // SAFETY: shutdown on our socket: the helper reads end-of-file and exits, then is reaped.
        unsafe {
            libc::shutdown(self.socket.as_raw_fd(), libc::SHUT_RDWR);
            libc::waitpid(self.child, std::ptr::null_mut(), 0);
        }
    }
}

fn set_receive_timeout(socket: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval { tv_sec: timeout.as_secs() as libc::time_t, tv_usec: 0 };
    // SAFETY: a timeval of the size given, on our socket.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if set != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The helper's life, in the forked child: never returns.
fn helper_main(socket: i32, daemon: libc::pid_t, pmu: UprobePmu, is_target: impl FnMut(u32) -> bool) -> ! {
    // SAFETY: prctl, signal, dup2 and close_range with plain arguments; after dup2 only the
    // standard fds and the socket stay open (the daemon's maps, rings and listener are closed).
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() != daemon {
            libc::_exit(0);
        }
        // A terminal's ^C reaches the whole process group: the helper goes with the daemon only.
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(signal, libc::SIG_IGN);
        }
        if socket != SOCKET_FD && libc::dup2(socket, SOCKET_FD) != SOCKET_FD {
            libc::_exit(1);
        }
        libc::syscall(libc::SYS_close_range, SOCKET_FD as u32 + 1, u32::MAX, 0u32);
    }
    if crate::host::privileges::drop_to(HELPER_CAPS).is_err() {
        // SAFETY: _exit skips the daemon's atexit handlers and destructors, which are not ours.
        unsafe { libc::_exit(1) };
    }
    // SAFETY: fd 3 is the socket, now owned by this loop alone.
    let socket = unsafe { OwnedFd::from_raw_fd(SOCKET_FD) };
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(&socket, pmu, is_target)));
    // SAFETY: as above.
    unsafe { libc::_exit(i32::from(served.is_err())) }
}

/// Answers requests until the daemon closes its end.
fn serve(socket: &OwnedFd, pmu: UprobePmu, mut is_target: impl FnMut(u32) -> bool) {
    let mut parsed: HashMap<(u64, u64), Option<Vec<Site>>> = HashMap::new();
    loop {
        let mut message = [0u8; REQUEST_LEN + 1];
        let Ok((len, fd)) = fd_passing::recv(socket.as_fd(), &mut message) else { return };
        if len == 0 {
            return;
        }
        let sequence = &message[0..4];
        let pid = u32::from_le_bytes(message[4..8].try_into().expect("4 bytes"));
        let word = |at: usize| u64::from_le_bytes(message[at..at + 8].try_into().expect("8 bytes"));
        let code = match (len, message[12], fd) {
            (REQUEST_LEN, KIND_UPROBE, Some(fd)) => {
                let request = UprobeRequest { pid, retprobe: message[8] != 0, offset: word(16) };
                let library = File::from(fd);
                match check(&library, request, &mut parsed, &mut is_target) {
                    Err(refusal) => Err(refusal.code()),
                    Ok(()) => perf_event_open(pmu, &library, request).map_err(errno),
                }
            }
            (REQUEST_LEN, KIND_OPEN_MAPPED, None) => {
                open_checked_mapping(pid, word(16), word(24), &mut is_target).map(OwnedFd::from).map_err(|e| match e {
                    MappingError::Refused(refusal) => refusal.code(),
                    MappingError::Io(e) => errno(e),
                })
            }
            _ => Err(Refusal::BadRequest.code()),
        };
        let mut answer = [0u8; ANSWER_LEN];
        answer[0..4].copy_from_slice(sequence);
        answer[4..8].copy_from_slice(&code.as_ref().err().copied().unwrap_or(0).to_le_bytes());
        let event = code.ok();
        if fd_passing::send(socket.as_fd(), &answer, event.as_ref().map(|e| e.as_fd())).is_err() {
            return;
        }
        // `event` and `library` close here: the daemon holds its own copy of the event.
    }
}

/// A kernel error's answer code (positive).
fn errno(error: io::Error) -> i32 {
    error.raw_os_error().filter(|&e| e > 0).unwrap_or(libc::EIO)
}

enum MappingError {
    Refused(Refusal),
    Io(io::Error),
}

/// Opens the file `pid` maps executable at exactly `start`-`end` (see the module's comment).
fn open_checked_mapping(
    pid: u32,
    start: u64,
    end: u64,
    is_target: &mut impl FnMut(u32) -> bool,
) -> Result<File, MappingError> {
    if pid == 0 || !is_target(pid) {
        return Err(MappingError::Refused(Refusal::NotTarget));
    }
    let maps =
        std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|_| MappingError::Refused(Refusal::NotTarget))?;
    open_mapping_in(pid, &maps, start, end)
}

/// Opens the file `maps` (process `pid`'s) says is mapped executable at `start`-`end`.
fn open_mapping_in(pid: u32, maps: &str, start: u64, end: u64) -> Result<File, MappingError> {
    let mapped = mapped_files::executable_files(maps)
        .into_iter()
        .find(|m| (m.start, m.end) == (start, end))
        .ok_or(MappingError::Refused(Refusal::NotMapped))?;
    let file = match mapped_files::open(pid, &mapped) {
        Ok(file) => file,
        Err(MappedError::Io(e)) => return Err(MappingError::Io(e)),
        Err(MappedError::NotRegular | MappedError::Mismatch) => return Err(MappingError::Refused(Refusal::NotMapped)),
    };
    match file.metadata() {
        Ok(meta) if meta.size() <= tls_libraries::MAX_LIBRARY_BYTES => Ok(file),
        Ok(_) => Err(MappingError::Refused(Refusal::NotMapped)),
        Err(e) => Err(MappingError::Io(e)),
    }
}

/// The helper's checks of one request (see the module's comment).
fn check(
    library: &File,
    request: UprobeRequest,
    parsed: &mut HashMap<(u64, u64), Option<Vec<Site>>>,
    is_target: &mut impl FnMut(u32) -> bool,
) -> Result<(), Refusal> {
    if request.pid == 0 || !is_target(request.pid) {
        return Err(Refusal::NotTarget);
    }
    let meta = library.metadata().map_err(|_| Refusal::BadRequest)?;
    if !meta.is_file() {
        return Err(Refusal::NotMapped);
    }
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", request.pid)).map_err(|_| Refusal::NotTarget)?;
    if !maps_executable(&maps, libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino()) {
        return Err(Refusal::NotMapped);
    }
    if parsed.len() >= MAX_PARSED {
        parsed.clear();
    }
    let offsets = parsed.entry((meta.dev(), meta.ino())).or_insert_with(|| entry_offsets(library, meta.size()));
    let allowed = |site: &Site| site.offset == request.offset && (site.retprobe || !request.retprobe);
    match offsets {
        Some(sites) if sites.iter().any(allowed) => Ok(()),
        _ => Err(Refusal::NotAnEntry),
    }
}

/// A file offset a uprobe may go on, and whether a uretprobe may too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Site {
    offset: u64,
    retprobe: bool,
}

/// The sites of the calls `tls_libraries` hooks in `library` (OpenSSL's entries, Go's entries and
/// RET instructions), or None if it has none.
fn entry_offsets(library: &File, size: u64) -> Option<Vec<Site>> {
    if size > tls_libraries::MAX_LIBRARY_BYTES {
        return None;
    }
    // Positioned reads (the fd shares its offset with the daemon's), of the symbol tables and the
    // hooked Go functions' bytes only.
    let entries = tls_libraries::entries(library).ok()?;
    Some(entries.into_iter().map(|(_, call, offset)| Site { offset, retprobe: call.has_uretprobe() }).collect())
}

/// Whether a `/proc/PID/maps` text maps the file (device major:minor, inode) executable.
fn maps_executable(maps: &str, major: u32, minor: u32, ino: u64) -> bool {
    mapped_files::executable_files(maps).iter().any(|m| m.dev == (major, minor) && m.ino == ino)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::tls_libraries::TlsCall;

    #[test]
    fn only_an_executable_mapping_of_the_same_file_counts() {
        let line =
            |perms: &str, dev: &str, inode: u64| format!("7f00-7f01 {perms} 00000000 {dev} {inode} /lib/libssl.so.3");
        let maps = [line("r--p", "08:01", 1234), line("r-xp", "fd:1a", 1234), line("r-xp", "08:01", 99)].join("\n");
        assert!(maps_executable(&maps, 0xfd, 0x1a, 1234));
        assert!(!maps_executable(&maps, 8, 1, 1234), "mapped, but not executable");
        assert!(!maps_executable(&maps, 8, 1, 98));
        assert!(maps_executable(&maps, 8, 1, 99));
        assert!(!maps_executable("7f00-7f01 rw-p 00000000 00:00 0 [heap]", 0, 0, 0));
    }

    /// The checks on real files: this test binary (mapped executable here, no SSL calls) and the
    /// system libssl (not mapped by this process, if installed).
    #[test]
    fn requests_for_other_pids_unmapped_files_or_other_offsets_are_refused() {
        let me = std::process::id();
        let request = UprobeRequest { pid: me, offset: 0, retprobe: false };
        let mut parsed = HashMap::new();
        let own = File::open("/proc/self/exe").expect("open own binary");
        let refused = |file: &File, is_target: bool, parsed: &mut HashMap<_, _>| {
            check(file, request, parsed, &mut |pid| is_target && pid == me).expect_err("refused")
        };
        assert_eq!(refused(&own, false, &mut parsed), Refusal::NotTarget);
        assert_eq!(refused(&own, true, &mut parsed), Refusal::NotAnEntry);
        if let Ok(libssl) = File::open("/usr/lib/x86_64-linux-gnu/libssl.so.3") {
            assert_eq!(refused(&libssl, true, &mut parsed), Refusal::NotMapped);
        }
    }

    /// A uretprobe is allowed on OpenSSL's entries only: a Go function's entry or RET site takes a
    /// plain uprobe (the return address on a goroutine's stack moves with the stack).
    #[test]
    fn a_uretprobe_is_refused_on_go_sites() {
        let sites = |calls: &[TlsCall]| -> Vec<Site> {
            calls
                .iter()
                .enumerate()
                .map(|(i, call)| Site { offset: i as u64 * 16, retprobe: call.has_uretprobe() })
                .collect()
        };
        let go = sites(&[TlsCall::GoRead, TlsCall::GoReturn, TlsCall::GoHandshakeReturn]);
        assert!(go.iter().all(|site| !site.retprobe));
        let openssl = sites(&[TlsCall::Read, TlsCall::WriteEx, TlsCall::Other]);
        assert!(openssl.iter().all(|site| site.retprobe));
    }

    /// A library mapped executable by this process and deleted: opened through `map_files` for
    /// its exact range, refused when `maps` names another inode for it, or for a range not mapped.
    #[test]
    fn a_deleted_mapping_opens_only_as_the_inode_maps_names() {
        let Some(deleted) = mapped_files::DeletedMapping::new("helper-mapped") else { return };
        let mapped = deleted.mapped();
        let (me, start, end) = (std::process::id(), mapped.start, mapped.end);
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let line = maps.lines().find(|l| l.contains(&mapped.path)).expect("the mapping's line");
        let forged = line.replacen(&format!(" {} ", mapped.ino), &format!(" {} ", mapped.ino + 1), 1);
        let refusal = |r: Result<File, MappingError>| match r {
            Err(MappingError::Refused(refusal)) => Some(refusal),
            _ => None,
        };
        let opened = open_mapping_in(me, &maps, start, end).ok().map(|f| f.metadata().expect("stat").ino());
        assert_eq!(opened, Some(mapped.ino));
        assert_eq!(refusal(open_mapping_in(me, &forged, start, end)), Some(Refusal::NotMapped));
        assert_eq!(refusal(open_mapping_in(me, &maps, start, end + 4096)), Some(Refusal::NotMapped));
        assert_eq!(refusal(open_checked_mapping(me, start, end, &mut |_| false)), Some(Refusal::NotTarget));
    }

    #[test]
    fn refusal_codes_round_trip_and_stay_negative() {
        for refusal in Refusal::ALL {
            assert!(refusal.code() < 0);
            assert_eq!(Refusal::from_code(refusal.code()), refusal);
        }
    }
}
