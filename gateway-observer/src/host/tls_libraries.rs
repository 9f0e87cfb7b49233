//! The TLS libraries a target process has loaded, and where in each the calls the kernel
//! programs hook begin. Covered: OpenSSL (1.1 and 3) and BoringSSL (same names), dynamically
//! linked (`libssl.so*`), linked into an executable or library that exports its calls (Node.js's
//! `node`), or linked in without exporting them where `.symtab` names them; Go's `crypto/tls` in
//! a Go executable (`go_tls`: its entries and RET sites, from `.symtab`). Every file the
//! process maps executable is a candidate (`libssl` first); each is opened as the process sees
//! it, through `target_files` (inside its root, no symlink followed out of it, a regular file
//! owned by root or the process, no larger than [`MAX_LIBRARY_BYTES`]), or through
//! `/proc/PID/map_files` when its path no longer names it (`mapped_files`: netty-tcnative deletes
//! its library once loaded) and checked the same way, and only its symbol tables are read
//! (`dynamic_symbols`): they give the file offsets uprobes attach at. Nothing
//! here touches a kernel handle: `probes::tls` attaches, on the opened file itself.

use std::{collections::HashSet, fs::File};

use crate::host::{
    dynamic_symbols::{self, Positioned, SymbolsError},
    go_tls,
    mapped_files::{self, MappedFile},
    target_files::{self, Identity},
};

/// Files larger than this are not looked at (Node.js's executable is 99 MB); only their
/// headers and dynamic symbols are read.
pub const MAX_LIBRARY_BYTES: u64 = 512 << 20;

/// Dynamic symbol tables (symbols and their names) larger than this are not read (Node.js's take
/// 7 MB, libssl.so.3's 60 kB).
pub const MAX_SYMBOL_BYTES: u64 = 64 << 20;

/// Executable files mapped by one process looked at, at most (a JVM maps about 60).
const MAX_CANDIDATES: usize = 256;

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
    /// Go's `(*tls.Conn).Read`, `Write`, `serverHandshake` and `clientHandshake` entries, and a RET instruction of
    /// one of them: Go functions get no uretprobe, each return site its own uprobe.
    GoRead,
    GoWrite,
    GoHandshake,
    GoReturn,
    GoHandshakeReturn,
}

impl TlsCall {
    /// Whether the call returns through a uretprobe (OpenSSL's): a Go call's return sites are
    /// probed instead.
    pub fn has_uretprobe(self) -> bool {
        matches!(self, Self::Read | Self::Write | Self::ReadEx | Self::WriteEx | Self::Other)
    }

    /// A RET site of a Go function.
    pub fn is_go_return(self) -> bool {
        matches!(self, Self::GoReturn | Self::GoHandshakeReturn)
    }
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
    #[error("cannot open it through /proc/PID/map_files: {0}")]
    Mapped(BoxedError),
    #[error(transparent)]
    Symbols(#[from] SymbolsError),
    /// None of `SSL_read`, `SSL_write`, `SSL_read_ex`, `SSL_write_ex` is exported or named in
    /// `.symtab`, nor is it a Go executable with `crypto/tls`.
    #[error("has no SSL_read/SSL_write in its symbols")]
    NoCalls,
    /// A Go executable whose `crypto/tls` calls cannot be hooked.
    #[error(transparent)]
    Go(#[from] go_tls::GoError),
}

/// A TLS library opened for one process.
#[derive(Debug)]
pub struct Library {
    /// Its path as the process maps it (in the process's mount namespace).
    pub path: String,
    /// Gone from that path (opened through `/proc/PID/map_files`).
    pub deleted: bool,
    /// The file itself, open: uprobes attach to it through `/proc/self/fd`, so that the file
    /// checked and parsed is the one hooked, whatever the path now names.
    pub file: File,
    pub identity: Identity,
}

/// Whether a path names OpenSSL's own library: one that exports no hooked call is a failure to
/// report, where any other file without them is simply not a TLS library.
pub fn is_libssl(path: &str) -> bool {
    path.rsplit('/').next().is_some_and(|name| name.starts_with("libssl.so"))
}

/// The files mapped executable in a `/proc/PID/maps` text, each once, `libssl` first: any of
/// them may carry the TLS library's calls. Deleted ones too (reached through `map_files`).
pub fn tls_candidates(maps: &str) -> Vec<MappedFile> {
    let mut files: Vec<MappedFile> =
        mapped_files::executable_files(maps).into_iter().filter(|file| file.path.starts_with('/')).collect();
    files.sort_by(|a, b| (!is_libssl(&a.path), &a.path, a.start).cmp(&(!is_libssl(&b.path), &b.path, b.start)));
    let mut seen = HashSet::new();
    files.retain(|file| seen.insert((file.dev, file.ino)));
    files.truncate(MAX_CANDIDATES);
    files
}

/// The files process `pid` maps executable (see [`tls_candidates`]); none if it is gone.
pub fn mapped_candidates(pid: u32) -> Vec<MappedFile> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|maps| tls_candidates(&maps)).unwrap_or_default()
}

/// Opens a mapped file through `/proc/PID/map_files` (it needs a capability the daemon drops).
pub type OpenMapped<'a> = dyn FnMut(u32, &MappedFile) -> Result<File, BoxedError> + 'a;
pub type BoxedError = Box<dyn std::error::Error + Send + Sync>;

/// `candidates` of process `pid` opened, and the `libssl` among them that could not be opened
/// (with why; any other file is skipped quietly).
pub fn open_libraries(
    pid: u32,
    candidates: Vec<MappedFile>,
    open_mapped: &mut OpenMapped<'_>,
) -> (Vec<Library>, Vec<(String, LibraryError)>) {
    let owners = crate::host::procfs::uids(pid);
    let mut opened = Vec::new();
    let mut failed = Vec::new();
    for mapped in candidates {
        match open_one(pid, &mapped, &owners, open_mapped) {
            Ok(checked) => opened.push(Library {
                path: mapped.path,
                deleted: mapped.deleted,
                file: checked.file,
                identity: checked.identity,
            }),
            Err(e) if is_libssl(&mapped.path) => failed.push((mapped.path, e)),
            Err(_) => {}
        }
    }
    (opened, failed)
}

/// One mapped file: by its path in the process's root while that names the mapped file (no
/// capability needed), else through `map_files` (deleted, replaced, or out of reach), checked
/// the same way.
fn open_one(
    pid: u32,
    mapped: &MappedFile,
    owners: &[u32],
    open_mapped: &mut OpenMapped<'_>,
) -> Result<target_files::Checked, LibraryError> {
    if !mapped.deleted
        && let Ok(checked) = target_files::open(pid, &mapped.path, owners, MAX_LIBRARY_BYTES)
        && mapped.is(checked.identity.dev, checked.identity.ino)
    {
        return Ok(checked);
    }
    let file = open_mapped(pid, mapped).map_err(LibraryError::Mapped)?;
    Ok(target_files::check(file, owners, MAX_LIBRARY_BYTES)?)
}

/// Where to hook the calls of a file: OpenSSL's (or BoringSSL's, which keeps its names) from its
/// dynamic symbols, else from its full symbol table where it is linked in without exporting them
/// (a static `libssl.a`, Envoy's BoringSSL: found only where `.symtab` was kept), with the read
/// and write wrappers replaced by the function they forward to where they visibly do
/// (`forwarded_calls`: a uprobe there costs a seventh as much); else Go's.
pub fn entries(file: &(impl Positioned + ?Sized)) -> Result<Entries, LibraryError> {
    let openssl = match exported_entries(file) {
        Err(LibraryError::NoCalls) if !go_tls::is_go(file) => linked_entries(file),
        found => found,
    };
    match openssl {
        Ok(found) => Ok(crate::host::forwarded_calls::prefer_forwarded(file, found)),
        Err(LibraryError::NoCalls) => go_tls::entries(file),
        Err(e) => Err(e),
    }
}

/// The file offsets of the OpenSSL calls a file exports, from its dynamic symbols.
pub fn exported_entries(file: &(impl Positioned + ?Sized)) -> Result<Entries, LibraryError> {
    let names = openssl_names();
    let found = dynamic_symbols::find(file, &names, MAX_SYMBOL_BYTES)?;
    openssl_entries(found)
}

/// The file offsets of the OpenSSL calls linked into a file that does not export them, from its
/// `.symtab`: none where it was stripped.
pub fn linked_entries(file: &(impl Positioned + ?Sized)) -> Result<Entries, LibraryError> {
    let names = openssl_names();
    let found = dynamic_symbols::find_static(file, &names, MAX_SYMBOL_BYTES)?;
    openssl_entries(found.into_iter().map(|f| (f.index, f.offset)).collect())
}

fn openssl_names() -> Vec<&'static str> {
    OPENSSL_CALLS.iter().map(|(name, _)| *name).collect()
}

/// Symbols found (index in `OPENSSL_CALLS`, file offset) as entries: `NoCalls` unless a read or
/// write is among them.
fn openssl_entries(found: Vec<(usize, u64)>) -> Result<Entries, LibraryError> {
    let mut found: Entries = found
        .into_iter()
        .filter_map(|(index, offset)| OPENSSL_CALLS.get(index).map(|&(name, call)| (name, call, offset)))
        .collect();
    if !found.iter().any(|(_, call, _)| *call != TlsCall::Other) {
        return Err(LibraryError::NoCalls);
    }
    found.sort_unstable();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, collections::BTreeSet};

    use super::*;

    #[test]
    fn every_executable_file_mapping_is_a_candidate_libssl_first() {
        let maps = "\
7f0000000000-7f0000001000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libssl.so.3
7f0000001000-7f0000002000 r-xp 00001000 08:01 1234 /usr/lib/x86_64-linux-gnu/libssl.so.3
7f0000003000-7f0000004000 r-xp 00001000 08:01 99 /usr/lib/x86_64-linux-gnu/libcrypto.so.3
7f0000004000-7f0000005000 r--p 00001000 08:01 96 /usr/share/data.bin
7f0000005000-7f0000006000 r-xp 00001000 08:01 98 /opt/app/lib/libssl.so.1.1
7f0000007000-7f0000008000 rw-p 00000000 00:00 0 [heap]
7f0000008000-7f0000009000 r-xp 00000000 00:00 0 [vdso]
7f0000009000-7f000000a000 r-xp 00001000 08:01 97 /srv/not-libssl.so.3 (deleted)
7f000000a000-7f000000b000 r-xp 00001000 08:01 95 /tmp/libssl.so.3 (deleted)
7f000000c000-7f000000d000 r-xp 00002000 08:01 1234 /usr/lib/x86_64-linux-gnu/libssl.so.3
";
        let candidates = tls_candidates(maps);
        let found: Vec<(&str, bool)> = candidates.iter().map(|f| (f.path.as_str(), f.deleted)).collect();
        assert_eq!(
            found,
            [
                ("/opt/app/lib/libssl.so.1.1", false),
                ("/tmp/libssl.so.3", true),
                ("/usr/lib/x86_64-linux-gnu/libssl.so.3", false),
                ("/srv/not-libssl.so.3", true),
                ("/usr/lib/x86_64-linux-gnu/libcrypto.so.3", false),
            ]
        );
    }

    /// The host's own OpenSSL 3, when installed: every call found, at offsets inside the file's
    /// executable bytes.
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
        let found = exported_entries(bytes.as_slice()).expect("entries");
        let names: BTreeSet<_> = found.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names, OPENSSL_CALLS.iter().map(|(n, _)| *n).collect());
        for (name, _, offset) in &found {
            assert!((*offset as usize) < bytes.len(), "{name} at {offset:#x} is past the file's end");
        }
        let file = std::fs::File::open(path).expect("open libssl");
        assert_eq!(exported_entries(&file).expect("entries from the file"), found);
        // Hooked where a uprobe is cheap (`forwarded_calls`), the same from bytes as from the file.
        assert_eq!(entries(&file).expect("entries"), entries(bytes.as_slice()).expect("entries"));
    }

    /// OpenSSL's `libssl.a` linked into an executable (built here with `cc`, when it and Debian's
    /// libssl-dev are installed): nothing exported, every call found in `.symtab`, and the read
    /// and write pairs hooked in the function they forward to, as in `libssl.so.3`.
    #[test]
    fn openssl_linked_in_unexported_is_found_in_its_symtab() {
        if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libssl.a").exists() {
            eprintln!("no libssl.a: skipped");
            return;
        }
        let dir = std::env::temp_dir().join(format!("linked-openssl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (source, exe) = (dir.join("main.c"), dir.join("main"));
        let calls = "SSL_read(0, 0, 0); SSL_write(0, 0, 0); SSL_read_ex(0, 0, 0, 0); SSL_write_ex(0, 0, 0, 0); \
                     SSL_do_handshake(0); SSL_shutdown(0);";
        std::fs::write(&source, format!("#include <openssl/ssl.h>\nint main(void) {{ {calls} return 0; }}\n"))
            .expect("write source");
        let built = std::process::Command::new("cc")
            .arg("-o")
            .arg(&exe)
            .arg(&source)
            .args(["-Wl,-Bstatic", "-lssl", "-lcrypto", "-Wl,-Bdynamic"])
            .status();
        let file = built.ok().filter(|s| s.success()).and_then(|_| std::fs::File::open(&exe).ok());
        let _ = std::fs::remove_dir_all(&dir);
        let Some(file) = file else {
            eprintln!("cc could not link libssl.a: skipped");
            return;
        };
        assert!(matches!(exported_entries(&file), Err(LibraryError::NoCalls)), "nothing is exported");
        let linked = linked_entries(&file).expect("calls in .symtab");
        let names: BTreeSet<_> = linked.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names, OPENSSL_CALLS.iter().map(|(n, _)| *n).collect());
        let hooked = entries(&file).expect("entries");
        let hooked_names: BTreeSet<_> = hooked.iter().map(|(n, _, _)| *n).collect();
        assert!(hooked_names.contains("SSL_read/SSL_read_ex body"), "read pair not forwarded: {hooked:?}");
        assert!(hooked_names.contains("SSL_write/SSL_write_ex body"), "write pair not forwarded: {hooked:?}");
    }

    /// A file read through positioned reads, counting the bytes asked for.
    struct Counted<'a>(&'a std::fs::File, Cell<u64>);

    impl Positioned for Counted<'_> {
        fn size(&self) -> std::io::Result<u64> {
            self.0.size()
        }

        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.1.set(self.1.get() + buf.len() as u64);
            Positioned::read_exact_at(self.0, buf, offset)
        }
    }

    /// Node.js (NodeSource's build here) links OpenSSL into its 99 MB executable and exports its
    /// calls: all are found, reading a tenth of the file at most.
    #[test]
    fn openssl_linked_into_node_is_found_reading_its_symbols_only() {
        let Ok(node) = std::fs::File::open("/usr/bin/node") else {
            eprintln!("no /usr/bin/node: skipped");
            return;
        };
        let counted = Counted(&node, Cell::new(0));
        let found = exported_entries(&counted).expect("node's SSL calls");
        let names: BTreeSet<_> = found.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names, OPENSSL_CALLS.iter().map(|(n, _)| *n).collect());
        let size = node.size().expect("size");
        assert!(counted.1.get() < size / 10, "read {} of {size} bytes", counted.1.get());
    }

    #[test]
    fn a_file_that_is_not_elf_or_has_no_ssl_calls_is_refused() {
        assert!(matches!(entries(b"not an ELF file".as_slice()), Err(LibraryError::Symbols(SymbolsError::Elf(_)))));
        assert!(matches!(entries(b"".as_slice()), Err(LibraryError::Symbols(_))));
        let me = std::fs::File::open("/proc/self/exe").expect("open own binary");
        assert!(matches!(entries(&me), Err(LibraryError::NoCalls)));
    }

    /// Section headers and symbol tables pointing anywhere: refused or empty, never a panic.
    #[test]
    fn a_corrupted_elf_is_refused_without_panicking() {
        let bytes = std::fs::read("/proc/self/exe").expect("read own binary");
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let mut copy = bytes[..bytes.len().min(1 << 20)].to_vec();
            for _ in 0..16 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // The header and the first section headers' neighbourhood: where the offsets are.
                let at = (seed as usize) % 128;
                copy[at] = (seed >> 32) as u8;
            }
            let _ = entries(copy.as_slice());
        }
    }
}
