//! The files a process maps executable (`/proc/PID/maps`), and opening one through
//! `/proc/PID/map_files/START-END`. That link reaches the mapped file itself, also when its path
//! is gone (`(deleted)`: netty-tcnative extracts its library to a temp dir, loads it and deletes
//! it; a package upgrade replaces a library in use) or now names another file. Following it
//! needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE: `proc_map_files_get_link`), which the daemon
//! drops: the uprobe helper opens it for the daemon (`uprobe_opener::helper`), `check` in process.

use std::{
    fs::File,
    io,
    os::{
        fd::AsRawFd as _,
        unix::fs::{MetadataExt as _, OpenOptionsExt as _},
    },
};

/// One executable mapping of a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MappedFile {
    /// Its path as the process maps it (in its mount namespace); for a deleted file, the path it
    /// had, without the kernel's ` (deleted)`.
    pub path: String,
    pub deleted: bool,
    /// The mapping's address range: its `map_files` entry.
    pub start: u64,
    pub end: u64,
    /// Device (major, minor) and inode, as the kernel printed them.
    pub dev: (u32, u32),
    pub ino: u64,
}

impl MappedFile {
    /// Whether a file (its `st_dev` and inode) is the mapped one.
    pub fn is(&self, dev: u64, ino: u64) -> bool {
        (libc::major(dev), libc::minor(dev)) == self.dev && ino == self.ino
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MappedError {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Not a regular file (a device mapped executable): never opened for reading.
    #[error("not a regular file")]
    NotRegular,
    /// The link led to another file than the one `maps` names (the range was unmapped and
    /// reused in between).
    #[error("map_files names another file than maps")]
    Mismatch,
}

/// The file-backed executable mappings of a `/proc/PID/maps` text, in its order.
pub fn executable_files(maps: &str) -> Vec<MappedFile> {
    maps.lines().filter_map(parse_line).collect()
}

/// One line: `START-END PERMS OFFSET MAJ:MIN INODE   PATH`, the path possibly holding spaces.
fn parse_line(line: &str) -> Option<MappedFile> {
    let mut rest = line;
    let (range, perms, _offset, dev, ino) =
        (field(&mut rest)?, field(&mut rest)?, field(&mut rest)?, field(&mut rest)?, field(&mut rest)?);
    let ino: u64 = ino.parse().ok()?;
    if !perms.contains('x') || ino == 0 {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    let path = rest.trim_start();
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (path, false),
    };
    Some(MappedFile {
        path: path.to_owned(),
        deleted,
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        dev: (u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?),
        ino,
    })
}

/// The next space-separated field of `rest`, which moves past it.
fn field<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let text = rest.trim_start_matches(' ');
    let end = text.find(' ').unwrap_or(text.len());
    let (value, after) = text.split_at(end);
    *rest = after;
    (!value.is_empty()).then_some(value)
}

/// Opens the file of `mapped` in process `pid` through its `map_files` link, for reading. The
/// link is first opened `O_PATH` (no open of the file itself: a device's driver never runs), the
/// file checked to be regular and the one `maps` named, then reopened through our own fd,
/// non-blocking.
pub fn open(pid: u32, mapped: &MappedFile) -> Result<File, MappedError> {
    let link = format!("/proc/{pid}/map_files/{:x}-{:x}", mapped.start, mapped.end);
    let handle = File::options().read(true).custom_flags(libc::O_PATH).open(link)?;
    let meta = handle.metadata()?;
    if !meta.is_file() {
        return Err(MappedError::NotRegular);
    }
    if !mapped.is(meta.dev(), meta.ino()) {
        return Err(MappedError::Mismatch);
    }
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))?;
    let meta = file.metadata()?;
    if !mapped.is(meta.dev(), meta.ino()) {
        return Err(MappedError::Mismatch);
    }
    Ok(file)
}

/// A file of this process mapped executable and deleted, for tests; unmapped when dropped.
#[cfg(test)]
pub struct DeletedMapping {
    at: *mut libc::c_void,
    path: String,
}

#[cfg(test)]
impl DeletedMapping {
    const LEN: usize = 8192;

    /// None (and says so) when not root: following `map_files` needs CAP_SYS_ADMIN.
    pub fn new(tag: &str) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: map_files needs CAP_SYS_ADMIN; skipped");
            return None;
        }
        let path = std::env::temp_dir().join(format!("{tag}-{}.so", std::process::id()));
        std::fs::write(&path, vec![0xc3u8; Self::LEN]).expect("write");
        let file = File::open(&path).expect("open");
        // SAFETY: a fresh private mapping of a file we own, unmapped on drop.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED, "mmap: {}", io::Error::last_os_error());
        std::fs::remove_file(&path).expect("delete");
        Some(Self { at, path: path.to_string_lossy().into_owned() })
    }

    /// Its line of this process's maps, parsed.
    pub fn mapped(&self) -> MappedFile {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        executable_files(&maps).into_iter().find(|m| m.path == self.path).expect("the mapping in maps")
    }
}

#[cfg(test)]
impl Drop for DeletedMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.at, Self::LEN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_file_mappings_with_spaces_and_deleted_ones() {
        let maps = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
7f0000000000-7f0000001000 r--p 00000000 08:01 1234 /usr/lib/libssl.so.3
7f0000001000-7f0000002000 r-xp 00001000 fd:1a 1234                       /tmp/a dir/libssl.so.3 (deleted)
7f0000007000-7f0000008000 rwxp 00000000 00:00 0 [heap]
7f0000008000-7f0000009000 r-xp 00000000 00:00 0                          [vdso]
7f0000009000-7f000000a000 r-xp 00000000 00:00 0
";
        let found = executable_files(maps);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0],
            MappedFile {
                path: "/usr/bin/dbus-daemon".into(),
                deleted: false,
                start: 0x40_0000,
                end: 0x45_2000,
                dev: (8, 2),
                ino: 173_521
            }
        );
        assert_eq!((found[1].path.as_str(), found[1].deleted), ("/tmp/a dir/libssl.so.3", true));
        assert_eq!((found[1].dev, found[1].start), ((0xfd, 0x1a), 0x7f00_0000_1000));
    }

    /// A file mapped executable by this process, then deleted: reached through `map_files` (as
    /// root, which this needs), and refused when `maps` is made to name another inode.
    #[test]
    fn a_deleted_mapping_is_opened_and_another_inode_refused() {
        let Some(deleted) = DeletedMapping::new("mapped-files") else { return };
        let mapped = deleted.mapped();
        assert!(mapped.deleted, "{mapped:?}");
        let opened = open(std::process::id(), &mapped).expect("opened through map_files");
        assert_eq!(opened.metadata().expect("stat").ino(), mapped.ino);
        let wrong = open(std::process::id(), &MappedFile { ino: mapped.ino + 1, ..mapped.clone() });
        assert!(matches!(wrong, Err(MappedError::Mismatch)), "{wrong:?}");
    }
}
