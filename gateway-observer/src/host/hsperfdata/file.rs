//! Finding and reading a JVM's hsperfdata file from outside its mount namespace.
//!
//! HotSpot writes `/tmp/hsperfdata_<user>/<pid>`, with the user it runs as and the pid it sees (in
//! a container, not the host's). The file is read through `/proc/<pid>/root`, so it is the one the
//! process sees; everything below that root is the target's to arrange, so paths are resolved with
//! `openat2`: `/tmp` inside that root (`RESOLVE_IN_ROOT`: an absolute symlink cannot lead out to the
//! host's files), and the directory and file below it with no symlink at all, as HotSpot itself
//! insists. The file must be a regular file of at most `MAX_FILE_BYTES` (a FIFO would block a
//! read, a device would never end).

use std::{
    fs::File,
    io::{self, Read as _},
    os::fd::{AsRawFd as _, OwnedFd},
};

use super::format::{self, FormatError, PerfData};
use crate::{host::procfs, host::target_files::openat2};

/// HotSpot maps 64 KiB by default (`-XX:PerfDataMemorySize`); nothing legitimate is near this.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// hsperfdata_<user> directories looked into, at most: one per user that ran a JVM there.
const MAX_USER_DIRS: usize = 64;
const DIR_PREFIX: &str = "hsperfdata_";

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("process {0} is gone")]
    Gone(u32),
    #[error("no hsperfdata file of process {pid} (pid {nspid} in its namespace) in its /tmp")]
    NotFound { pid: u32, nspid: u32 },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path} is not a regular file")]
    NotAFile { path: String },
    #[error("{path} holds {size} bytes, more than the {MAX_FILE_BYTES} a JVM writes")]
    TooLarge { path: String, size: u64 },
    #[error("{path}: {source}")]
    Format { path: String, source: FormatError },
}

impl ReadError {
    /// The process or its file is gone: the usual end of a JVM, not a fault.
    pub fn is_gone(&self) -> bool {
        match self {
            Self::Gone(_) => true,
            Self::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
            _ => false,
        }
    }
}

/// Where a process's file is: its hsperfdata_<user> directory and its pid in its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub user_dir: String,
    pub nspid: u32,
}

impl Location {
    fn describe(&self, pid: u32) -> String {
        format!("/proc/{pid}/root/tmp/{}/{}", self.user_dir, self.nspid)
    }
}

/// Looks for the process's file in each hsperfdata_<user> directory of its /tmp.
pub fn locate(pid: u32) -> Result<Location, ReadError> {
    let nspid = procfs::namespace_pid(pid).ok_or(ReadError::Gone(pid))?;
    let tmp = open_tmp(pid)?;
    let listing = format!("/proc/self/fd/{}", tmp.as_raw_fd());
    let entries = std::fs::read_dir(&listing).map_err(|source| io_error(format!("/proc/{pid}/root/tmp"), source))?;
    let dirs = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with(DIR_PREFIX) && !name.contains('/'))
        .take(MAX_USER_DIRS);
    for user_dir in dirs {
        let location = Location { user_dir, nspid };
        match open_file(&tmp, &location) {
            Ok(_) => return Ok(location),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(io_error(location.describe(pid), source)),
        }
    }
    Err(ReadError::NotFound { pid, nspid })
}

/// Reads and parses the file at `location`.
pub fn read(pid: u32, location: &Location) -> Result<PerfData, ReadError> {
    let path = || location.describe(pid);
    let tmp = open_tmp(pid)?;
    let file = File::from(open_file(&tmp, location).map_err(|source| io_error(path(), source))?);
    let meta = file.metadata().map_err(|source| io_error(path(), source))?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile { path: path() });
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge { path: path(), size: meta.len() });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grows after the stat is still read no further than the cap.
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).map_err(|source| io_error(path(), source))?;
    format::parse(&bytes).map_err(|source| ReadError::Format { path: path(), source })
}

fn io_error(path: String, source: io::Error) -> ReadError {
    ReadError::Io { path, source }
}

/// The process's /tmp, resolved inside its root.
fn open_tmp(pid: u32) -> Result<OwnedFd, ReadError> {
    let root_path = format!("/proc/{pid}/root");
    let root = File::open(&root_path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => ReadError::Gone(pid),
        _ => ReadError::Io { path: root_path.clone(), source },
    })?;
    let root = OwnedFd::from(root);
    openat2(&root, "tmp", libc::O_RDONLY | libc::O_DIRECTORY, libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS)
        .map_err(|source| io_error(format!("{root_path}/tmp"), source))
}

/// `<user_dir>/<nspid>` below /tmp, through no symlink and onto no other mount.
fn open_file(tmp: &OwnedFd, location: &Location) -> io::Result<OwnedFd> {
    let path = format!("{}/{}", location.user_dir, location.nspid);
    openat2(
        tmp,
        &path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV,
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A directory standing for a process's /tmp, opened as `open_tmp` would.
    fn tmp_dir(name: &str) -> (std::path::PathBuf, OwnedFd) {
        let dir = std::env::temp_dir().join(format!("hsperf-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("hsperfdata_app")).expect("create dirs");
        let fd = OwnedFd::from(File::open(&dir).expect("open dir"));
        (dir, fd)
    }

    #[test]
    fn symlinks_below_tmp_are_refused() {
        let (dir, tmp) = tmp_dir("symlink");
        let location = Location { user_dir: "hsperfdata_app".into(), nspid: 42 };
        std::fs::write(dir.join("elsewhere"), b"secret").expect("write");
        symlink(dir.join("elsewhere"), dir.join("hsperfdata_app/42")).expect("symlink");
        let err = open_file(&tmp, &location).expect_err("a symlinked file is refused");
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        std::fs::remove_file(dir.join("hsperfdata_app/42")).expect("rm");
        std::fs::create_dir(dir.join("real")).expect("mkdir");
        std::fs::write(dir.join("real/7"), b"x").expect("write");
        symlink(dir.join("real"), dir.join("hsperfdata_link")).expect("symlink");
        let linked = Location { user_dir: "hsperfdata_link".into(), nspid: 7 };
        assert!(open_file(&tmp, &linked).is_err(), "a symlinked directory is refused");
        let escape = Location { user_dir: "../..".into(), nspid: 7 };
        assert!(open_file(&tmp, &escape).is_err(), "no way out of /tmp");
        std::fs::write(dir.join("hsperfdata_app/42"), b"x").expect("write");
        assert!(open_file(&tmp, &location).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn our_own_process_has_no_file_and_says_so() {
        // This test binary is no JVM: its /tmp has no file named after it (unless a JVM killed
        // with this pid once left one).
        let pid = std::process::id();
        let stale = std::fs::read_dir("/tmp").into_iter().flatten().filter_map(Result::ok).any(|e| {
            e.file_name().to_string_lossy().starts_with(DIR_PREFIX) && e.path().join(pid.to_string()).exists()
        });
        match locate(pid) {
            Ok(_) if stale => {}
            Err(ReadError::NotFound { pid: p, .. }) => assert_eq!(p, pid),
            other => panic!("expected NotFound, got {other:?}"),
        }
        assert!(matches!(locate(u32::MAX), Err(ReadError::Gone(_))));
    }
}
