//! The TLS libraries a target process has loaded, and where in each the calls the kernel
//! programs hook begin. Covered: OpenSSL (1.1 and 3), dynamically linked (`libssl.so*`).
//! The library is found in `/proc/PID/maps` and opened as the process sees it, through
//! `target_files` (inside its root, no symlink followed out of it, a regular file owned by root or
//! the process); its dynamic symbols give the file offsets uprobes attach at. Nothing here
//! touches a kernel handle: `probes::tls` attaches, on the opened file itself.

use std::{collections::BTreeSet, fs::File};

use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

use crate::host::target_files::{self, Identity};

/// Libraries larger than this are not read (libssl.so.3 is under 1 MiB).
pub const MAX_LIBRARY_BYTES: u64 = 64 << 20;

/// What a hooked call is, for the kernel programs: each kind has its entry program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlsCall {
    /// `SSL_read(ssl, buf, num)`: returns the bytes read.
    Read,
    Write,
    /// `SSL_read_ex(ssl, buf, num, size_t *readbytes)`: returns 1, the count in the out-argument.
    ReadEx,
    WriteEx,
    /// Moves ciphertext only (the handshake, the shutdown alert): hidden, not reported.
    Other,
}

/// The functions hooked, by their dynamic symbol in OpenSSL.
pub const OPENSSL_CALLS: &[(&str, TlsCall)] = &[
    ("SSL_read", TlsCall::Read),
    ("SSL_write", TlsCall::Write),
    ("SSL_read_ex", TlsCall::ReadEx),
    ("SSL_write_ex", TlsCall::WriteEx),
    ("SSL_do_handshake", TlsCall::Other),
    ("SSL_shutdown", TlsCall::Other),
];

/// A library's hookable calls: (symbol, kind, file offset).
pub type Entries = Vec<(&'static str, TlsCall, u64)>;

#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    #[error("cannot open it in the process's root: {0}")]
    Open(#[from] target_files::Refusal),
    #[error("cannot read it: {0}")]
    Read(#[from] std::io::Error),
    #[error("not an ELF object: {0}")]
    Elf(#[from] object::Error),
    /// None of `SSL_read`, `SSL_write`, `SSL_read_ex`, `SSL_write_ex` is exported.
    #[error("exports no SSL_read/SSL_write")]
    NoCalls,
}

/// A TLS library opened for one process.
#[derive(Debug)]
pub struct Library {
    /// Its path as the process maps it (in the process's mount namespace).
    pub path: String,
    /// The file itself, open: uprobes attach to it through `/proc/self/fd`, so that the file
    /// checked and parsed is the one hooked, whatever the path now names.
    pub file: File,
    pub identity: Identity,
}

/// Paths of the TLS libraries mapped in a `/proc/PID/maps` text, each once.
pub fn tls_paths(maps: &str) -> BTreeSet<String> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.starts_with('/'))
        .filter(|path| path.rsplit('/').next().is_some_and(|name| name.starts_with("libssl.so")))
        .map(str::to_owned)
        .collect()
}

/// The TLS libraries process `pid` has mapped, opened as it sees them, and those that could not
/// be opened (with why).
pub fn open_libraries(pid: u32) -> (Vec<Library>, Vec<(String, LibraryError)>) {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return (Vec::new(), Vec::new()) };
    let owners = crate::host::procfs::uids(pid);
    let mut opened = Vec::new();
    let mut failed = Vec::new();
    for path in tls_paths(&maps) {
        match target_files::open(pid, &path, &owners, MAX_LIBRARY_BYTES) {
            Ok(checked) => opened.push(Library { path, file: checked.file, identity: checked.identity }),
            Err(e) => failed.push((path, e.into())),
        }
    }
    (opened, failed)
}

/// The file offsets of the hooked calls a library exports, from its dynamic symbols.
pub fn entries(elf: &[u8]) -> Result<Entries, LibraryError> {
    let file = object::File::parse(elf)?;
    let mut found = Entries::new();
    for symbol in file.dynamic_symbols() {
        let Ok(name) = symbol.name() else { continue };
        let Some(&(name, call)) = OPENSSL_CALLS.iter().find(|(n, _)| *n == name) else { continue };
        if symbol.is_undefined() || found.iter().any(|(n, _, _)| *n == name) {
            continue;
        }
        let Some(index) = symbol.section_index() else { continue };
        let Ok(section) = file.section_by_index(index) else { continue };
        let Some((section_offset, _)) = section.file_range() else { continue };
        let Some(offset) = symbol.address().checked_sub(section.address()).and_then(|o| o.checked_add(section_offset))
        else {
            continue;
        };
        found.push((name, call, offset));
    }
    if !found.iter().any(|(_, call, _)| *call != TlsCall::Other) {
        return Err(LibraryError::NoCalls);
    }
    found.sort_unstable();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_libssl_mappings_are_tls_libraries() {
        let maps = "\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libssl.so.3
7f0000001000-7f0000002000 r-xp 00001000 08:01 1234 /usr/lib/x86_64-linux-gnu/libssl.so.3
7f0000003000-7f0000004000 r-xp 00001000 08:01 99 /usr/lib/x86_64-linux-gnu/libcrypto.so.3
7f0000005000-7f0000006000 r-xp 00001000 08:01 98 /opt/app/lib/libssl.so.1.1
7f0000007000-7f0000008000 rw-p 00000000 00:00 0 [heap]
7f0000009000-7f000000a000 r-xp 00001000 08:01 97 /srv/not-libssl.so.3 (deleted)
";
        let paths: Vec<_> = tls_paths(maps).into_iter().collect();
        assert_eq!(paths, ["/opt/app/lib/libssl.so.1.1", "/usr/lib/x86_64-linux-gnu/libssl.so.3"]);
    }

    /// The host's own OpenSSL 3, when installed: every call found, at offsets inside the file's
    /// executable bytes (an `endbr64` or a push opens each on x86-64 Debian builds).
    #[test]
    fn the_system_libssl_exports_every_hooked_call() {
        let Some(path) = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/aarch64-linux-gnu/libssl.so.3"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            eprintln!("no system libssl.so.3: skipped");
            return;
        };
        let bytes = std::fs::read(path).expect("read libssl");
        let found = entries(&bytes).expect("entries");
        let names: BTreeSet<_> = found.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names, OPENSSL_CALLS.iter().map(|(n, _)| *n).collect());
        for (name, _, offset) in &found {
            assert!((*offset as usize) < bytes.len(), "{name} at {offset:#x} is past the file's end");
        }
    }

    #[test]
    fn a_file_that_is_not_elf_or_has_no_ssl_calls_is_refused() {
        assert!(matches!(entries(b"not an ELF file"), Err(LibraryError::Elf(_))));
        let me = std::fs::read("/proc/self/exe").expect("read own binary");
        assert!(matches!(entries(&me), Err(LibraryError::NoCalls)));
    }
}
