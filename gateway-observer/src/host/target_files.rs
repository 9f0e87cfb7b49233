//! Opening files a target process controls, as root, without being stalled or misled: the
//! symbolizer's ELF files and perf maps, HotSpot's hsperfdata. A path is resolved inside the
//! process's root (`/proc/PID/root`, `RESOLVE_IN_ROOT`: an absolute symlink cannot lead out to
//! the host's files) with no magic link and no symlink as its last component; the open never
//! waits (`O_NONBLOCK`: a FIFO with no writer would block it for good, `O_NOCTTY`); the opened
//! file, not the path, is then checked: a regular file, owned by root or by one of the
//! process's uids, no larger than the caller's cap. Its identity (device, inode, mtime, size) lets
//! callers cache what they parsed from it.

use std::{
    ffi::CString,
    fs::File,
    io::{self, Read as _},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
};

/// Every [`Refusal::reason`], for metrics that show each from zero.
pub const REASONS: [&str; 5] = ["not_regular", "owner", "too_large", "symlink", "io"];

/// Why a file was not read. Each is counted by its [`Refusal::reason`].
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A FIFO, device, socket or directory: reading it could block or never end.
    #[error("not a regular file")]
    NotRegular,
    /// Someone else's file planted on the process's path (any user can create /tmp/perf-N.map).
    #[error("owned by uid {0}, neither root nor the process")]
    Owner(u32),
    #[error("{size} bytes, more than the {cap} allowed")]
    TooLarge { size: u64, cap: u64 },
}

impl Refusal {
    /// A metric label: `None` for a file that is simply not there (or a process that is gone),
    /// which is no refusal.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Self::Io(e) if e.kind() == io::ErrorKind::NotFound => None,
            Self::Io(e) if e.raw_os_error() == Some(libc::ELOOP) => Some("symlink"),
            Self::Io(_) => Some("io"),
            Self::NotRegular => Some("not_regular"),
            Self::Owner(_) => Some("owner"),
            Self::TooLarge { .. } => Some("too_large"),
        }
    }
}

/// What a file was when it was opened: equal identities mean an unchanged file (as far as a
/// cache needs to know; a rewrite within one mtime tick of the same size goes unnoticed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub mtime: (i64, i64),
    pub size: u64,
}

/// An opened, checked file.
#[derive(Debug)]
pub struct Checked {
    pub file: File,
    pub identity: Identity,
}

impl Checked {
    /// Its bytes, never more than `cap` even if it grew since the check.
    pub fn read(self, cap: u64) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(usize::try_from(self.identity.size.min(cap)).unwrap_or(0));
        self.file.take(cap).read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

/// Opens `path` as process `pid` sees it and checks it (see the module's notes). `owners` are the
/// uids besides root whose files are accepted.
pub fn open(pid: u32, path: &str, owners: &[u32], cap: u64) -> Result<Checked, Refusal> {
    let root = OwnedFd::from(File::open(format!("/proc/{pid}/root"))?);
    let fd = openat2(
        &root,
        path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW,
        libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    )?;
    check(File::from(fd), owners, cap)
}

/// The checks on an opened file.
pub fn check(file: File, owners: &[u32], cap: u64) -> Result<Checked, Refusal> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Refusal::NotRegular);
    }
    if meta.uid() != 0 && !owners.contains(&meta.uid()) {
        return Err(Refusal::Owner(meta.uid()));
    }
    if meta.len() > cap {
        return Err(Refusal::TooLarge { size: meta.len(), cap });
    }
    let identity =
        Identity { dev: meta.dev(), ino: meta.ino(), mtime: (meta.mtime(), meta.mtime_nsec()), size: meta.len() };
    Ok(Checked { file, identity })
}

/// `struct open_how` (linux/openat2.h); libc's is non-exhaustive, so it cannot be built here.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// openat2(2) relative to `dir`, close-on-exec.
pub fn openat2(dir: &OwnedFd, path: &str, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let path = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let how = OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: 0, resolve };
    // SAFETY: openat2 reads a NUL-terminated path and an open_how of the size given, both ours and
    // alive for the call; it returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(libc::SYS_openat2, dir.as_raw_fd(), path.as_ptr(), &how as *const OpenHow, size_of::<OpenHow>())
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use std::{os::unix::fs::symlink, path::PathBuf, time::Instant};

    use super::*;

    /// A fresh directory under /tmp, reached from this process's root as `/tmp/<name>`.
    fn scratch(name: &str) -> (PathBuf, String) {
        let rel = format!("tmp/target-files-{name}-{}", std::process::id());
        let dir = PathBuf::from("/").join(&rel);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        (dir, format!("/{rel}"))
    }

    fn me() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let (dir, path) = scratch("fifo");
        let fifo = CString::new(dir.join("perf.map").to_string_lossy().into_owned()).expect("path");
        // SAFETY: a NUL-terminated path of ours.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0, "mkfifo");
        let started = Instant::now();
        let err = open(std::process::id(), &format!("{path}/perf.map"), &[me()], 1 << 20).expect_err("a FIFO");
        assert!(matches!(err, Refusal::NotRegular), "{err}");
        assert!(started.elapsed().as_secs() < 1, "the open waited for a writer");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn symlinks_devices_strangers_and_big_files_are_refused() {
        let (dir, path) = scratch("checks");
        std::fs::write(dir.join("real"), b"0 10 f\n").expect("write");
        symlink(dir.join("real"), dir.join("link")).expect("symlink");
        let pid = std::process::id();
        let ok = open(pid, &format!("{path}/real"), &[me()], 1 << 20).expect("a plain file of ours");
        assert_eq!(ok.identity.size, 7);
        assert_eq!(ok.read(4).expect("read"), b"0 10", "reads stop at the cap");
        let err = open(pid, &format!("{path}/link"), &[me()], 1 << 20).expect_err("a symlink");
        assert_eq!(err.reason(), Some("symlink"), "{err}");
        assert!(matches!(open(pid, "/dev/zero", &[me()], 1 << 20), Err(Refusal::NotRegular)));
        let big = open(pid, &format!("{path}/real"), &[me()], 6).expect_err("over the cap");
        assert_eq!(big.reason(), Some("too_large"), "{big}");
        let missing = open(pid, &format!("{path}/none"), &[me()], 6).expect_err("missing");
        assert_eq!(missing.reason(), None, "{missing}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_root_and_the_process_own_accepted_files() {
        let (dir, _) = scratch("owner");
        let file = dir.join("f");
        std::fs::write(&file, b"x").expect("write");
        // As root the file is given away (root's own files are always accepted); otherwise it
        // is ours, and we are the stranger's stand-in.
        let owner = if me() == 0 { 54_321 } else { me() };
        std::os::unix::fs::chown(&file, Some(owner), None).expect("chown");
        assert!(check(File::open(&file).expect("open"), &[owner], 10).is_ok());
        let err = check(File::open(&file).expect("open"), &[owner.wrapping_add(1)], 10).expect_err("a stranger's");
        assert!(matches!(err, Refusal::Owner(uid) if uid == owner), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
