//! User-space addresses to names, for the stacks in alert evidence: native code through the
//! process's mappings (/proc/PID/maps) and the mapped file's ELF symbol tables; JIT code (a JVM
//! with -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit or perf-map-agent, Node with
//! --perf-basic-prof) through /tmp/perf-PID.map. No absolute address is ever named (issue 16):
//! a frame without a symbol is `file+0xOFFSET` (an offset in the file), one outside any file
//! `[unknown]`. Nothing here touches the kernel.
//!
//! The same parse also keeps a file's unwind tables (`.eh_frame`, `.eh_frame_hdr`) when asked
//! ([`Symbolizer::with_unwind_tables`]): the live-stack worker (`stacks/`) unwinds and names with
//! one cache, so each file is opened and parsed once for both.
//!
//! Every file named here is the target's to arrange (any local user can create /tmp/perf-N.map
//! for any N), and this runs as root on the tick thread: files are opened through
//! [`target_files`] (in the process's root, never blocking, regular files of root or the process
//! only, capped), parsed once per identity (device, inode, mtime, size) and read no further than
//! their cap. What is refused is counted by reason ([`Symbolizer::refusals`]).

use std::{
    collections::{BTreeMap, HashMap},
    io::Read as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use object::{Object as _, ObjectSymbol as _};

use crate::{
    host::procfs,
    host::target_files::{self, Identity, Refusal},
};

/// /proc/PID/maps: a line is under 4 KiB, and vm.max_map_count (65530 by default) lines at ~100
/// bytes each stay well under this.
const MAX_MAPS_BYTES: u64 = 16 << 20;
/// A perf map of ~600k JIT methods at ~100 bytes a line; Node's --perf-basic-prof appends for
/// ever, and past this its stacks stay hex rather than the daemon reading without end.
const MAX_PERF_MAP_BYTES: u64 = 64 << 20;
/// Above the largest binaries gateways map (libjvm.so ~20 MiB, node ~100 MiB, envoy ~150 MiB).
/// The file is read whole once per identity and dropped once its symbols are out, so this is
/// also the daemon's peak memory for it; a larger file's frames stay hex with the file's name.
const MAX_ELF_BYTES: u64 = 256 << 20;
/// Parsed files kept (ELF files and perf maps each); past it the cache starts over.
const MAX_CACHED: usize = 256;

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    file_offset: u64,
    path: PathBuf,
}

/// Symbols of one ELF file, sorted by address (file-relative virtual addresses).
#[derive(Debug, Default)]
struct ElfSymbols {
    /// (address, size, name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
    /// Loaded segments as (file offset, file size, virtual address): a file offset inside one
    /// maps to that segment's addresses.
    segments: Vec<(u64, u64, u64)>,
    /// Kept only by a symbolizer made [`Symbolizer::with_unwind_tables`].
    unwind: Option<UnwindTables>,
    /// A CPython binary's or libpython's interpreter state (`stacks::python`).
    python: Option<python::PythonSymbols>,
}

/// What an unwinder needs of one ELF file, addresses as the file states them. `.text` itself is
/// not kept: `.eh_frame` is exact at every instruction on Linux (framehop reads code only for
/// Mach-O), and a JVM's libjvm.so alone has 15 MiB of it.
#[derive(Debug, Clone)]
pub struct UnwindTables {
    pub eh_frame: Option<(std::ops::Range<u64>, Arc<[u8]>)>,
    pub eh_frame_hdr: Option<(std::ops::Range<u64>, Arc<[u8]>)>,
    pub text: Option<std::ops::Range<u64>>,
    pub got: Option<std::ops::Range<u64>>,
}

/// One executable mapping of a process with the unwind tables of its file, and where the file's
/// address 0 is in the process (`base`).
#[derive(Debug, Clone)]
pub struct MappedTables {
    pub range: std::ops::Range<u64>,
    pub base: u64,
    pub path: String,
    pub tables: UnwindTables,
}

/// A mapping's file, parsed the first time a frame needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MappedFile {
    Unread,
    /// Refused, or no ELF we can read.
    Unreadable,
    Parsed(Identity),
}

/// A process's executable mappings and the files behind them, read once for the stacks of its
/// threads. A file is parsed only when a frame is in it: of the dozens of libraries a gateway
/// maps, a stack passes through a few.
#[derive(Debug, Default)]
pub struct Image {
    pid: u32,
    owners: Vec<u32>,
    maps: Vec<Mapping>,
    files: Vec<MappedFile>,
    perf_map: Arc<Vec<PerfEntry>>,
}

impl Image {
    fn mapping_at(&self, addr: u64) -> Option<usize> {
        self.maps.iter().position(|m| m.holds(addr))
    }

    /// The code the process's perf map names (a JIT's: V8's, a JVM's), as sorted disjoint
    /// ranges. The map is the target's text: a range says only where an unwind may go on by
    /// frame pointer, never what memory is read.
    pub fn jit_code(&self) -> Vec<std::ops::Range<u64>> {
        let mut ranges: Vec<std::ops::Range<u64>> = self
            .perf_map
            .iter()
            .filter(|(_, size, _)| *size > 0)
            .map(|(start, size, _)| *start..start.saturating_add(*size))
            .collect();
        ranges.sort_by_key(|r| r.start);
        // A JIT reuses freed code space: the map keeps the old entry beside the new one.
        let mut merged: Vec<std::ops::Range<u64>> = Vec::with_capacity(ranges.len());
        for range in ranges {
            match merged.last_mut() {
                Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
                _ => merged.push(range),
            }
        }
        merged
    }
}

impl ElfSymbols {
    /// The address the file gives the first byte of a mapping at `file_offset`. The kernel maps a
    /// segment from its offset rounded down to a page, so that page's first bytes may belong to
    /// the segment before in the file (lld puts the text segment 0x860 bytes into a page that
    /// ends the read-only one): the segment that starts in the mapping's first page decides.
    fn vaddr_at_mapping(&self, file_offset: u64) -> Option<u64> {
        const PAGE: u64 = 4096;
        self.segments
            .iter()
            .find(|(start, _, _)| start - start % PAGE == file_offset)
            .and_then(|(start, _, addr)| addr.checked_sub(start - file_offset))
            .or_else(|| self.vaddr_of_offset(file_offset))
    }

    fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(start, size, _)| offset >= *start && offset - start < *size)
            .and_then(|(start, _, addr)| addr.checked_add(offset - start))
    }
}

/// One line of a perf map: (start, size, name).
type PerfEntry = (u64, u64, String);

#[derive(Debug, Default)]
pub struct Symbolizer {
    /// Symbols by file identity; `None` for a file that is no ELF we can read.
    elves: HashMap<Identity, Option<ElfSymbols>>,
    /// Keep each file's unwind tables too.
    unwind_tables: bool,
    /// Each process's perf map, with the identity it was parsed from.
    perf_maps: HashMap<u32, (Identity, Arc<Vec<PerfEntry>>)>,
    /// When each parsed file and each process's perf map last named a frame: a gone gateway's
    /// binary is several MiB of names that nothing will ask for again.
    last_used: HashMap<Identity, std::time::Instant>,
    refusals: BTreeMap<&'static str, u64>,
}

impl Symbolizer {
    /// A symbolizer that also keeps each ELF file's unwind tables ([`Symbolizer::tables`]).
    pub fn with_unwind_tables() -> Self {
        Self { unwind_tables: true, ..Self::default() }
    }

    /// The process's executable mappings. Only the files CPython's interpreter state can be in
    /// (the executable, the first mapping, and a libpython) are parsed now; the others when a
    /// frame is in them ([`Symbolizer::tables_at`], [`Symbolizer::name_frames`]).
    pub fn image(&mut self, pid: u32) -> Image {
        let mut image = self.mappings(pid);
        let python = |m: &Mapping| m.path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libpython"));
        let eager: Vec<usize> = (0..image.maps.len()).filter(|&at| at == 0 || python(&image.maps[at])).collect();
        for at in eager {
            self.file_of(&mut image, at);
        }
        image
    }

    /// The process's executable mappings and perf map, no file parsed yet.
    fn mappings(&mut self, pid: u32) -> Image {
        let maps = read_maps(pid);
        let owners = procfs::uids(pid);
        let perf_map = self.perf_map(pid, &owners);
        let files = vec![MappedFile::Unread; maps.len()];
        Image { pid, owners, maps, files, perf_map }
    }

    /// The unwind tables of the mapping of `image` that holds `addr`, its file parsed if it was
    /// not yet: the mapping's range, and its tables if its file has some. `None` outside any
    /// file's code.
    pub fn tables_at(&mut self, image: &mut Image, addr: u64) -> Option<(std::ops::Range<u64>, Option<MappedTables>)> {
        let at = image.mapping_at(addr)?;
        let identity = self.file_of(image, at);
        let mapping = &image.maps[at];
        let tables = identity.and_then(|identity| {
            let elf = self.elves.get(&identity)?.as_ref()?;
            let tables = elf.unwind.clone()?;
            // The segment that holds the mapping's first byte says where the file's address 0 is.
            let vaddr = elf.vaddr_at_mapping(mapping.file_offset)?;
            let base = mapping.start.checked_sub(vaddr)?;
            let path = mapping.path.to_string_lossy().into_owned();
            Some(MappedTables { range: mapping.start..mapping.end, base, path, tables })
        });
        Some((mapping.start..mapping.end, tables))
    }

    /// The file behind mapping `at` of `image`, parsed the first time (for every mapping of the
    /// same file) and marked used, so [`Symbolizer::forget_unused`] keeps it while stacks pass
    /// through it.
    fn file_of(&mut self, image: &mut Image, at: usize) -> Option<Identity> {
        let identity = match image.files[at] {
            MappedFile::Parsed(identity) => Some(identity),
            MappedFile::Unreadable => None,
            MappedFile::Unread => {
                let path = &image.maps[at].path;
                let identity = self.load_elf(image.pid, path, &image.owners);
                let file = identity.map_or(MappedFile::Unreadable, MappedFile::Parsed);
                for (mapping, slot) in image.maps.iter().zip(image.files.iter_mut()) {
                    if mapping.path == *path {
                        *slot = file;
                    }
                }
                identity
            }
        };
        if let Some(identity) = identity {
            self.last_used.insert(identity, std::time::Instant::now());
        }
        identity
    }

    /// The CPython interpreter a file mapped by `image`'s process holds (its executable or a
    /// libpython, which [`Symbolizer::image`] parses): its `PY_VERSION_HEX` and where its
    /// `_PyRuntime` is in the process.
    pub fn python_runtime(&self, image: &Image) -> Option<(u32, u64)> {
        image.maps.iter().zip(&image.files).find_map(|(mapping, file)| {
            let MappedFile::Parsed(identity) = file else { return None };
            let elf = self.elves.get(identity)?.as_ref()?;
            let python = elf.python?;
            let base = mapping.start.checked_sub(elf.vaddr_at_mapping(mapping.file_offset)?)?;
            Some((python.version, base.checked_add(python.runtime)?))
        })
    }

    /// Names of frames of `image`'s process, innermost first. A return address is looked up one
    /// byte back (the call it returns from), so a call that ends its function is not named after
    /// the next one.
    pub fn name_frames(&mut self, image: &mut Image, frames: &[(u64, bool)]) -> Vec<String> {
        frames
            .iter()
            .map(|&(ip, returns)| {
                if let Some(name) = jit_name(ip, &image.perf_map) {
                    return name;
                }
                let Some(at) = image.mapping_at(ip) else {
                    return UNKNOWN.to_owned();
                };
                let identity = self.file_of(image, at);
                let elf = identity.and_then(|id| self.elves.get(&id)).and_then(Option::as_ref);
                name(ip, if returns { ip.saturating_sub(1) } else { ip }, &image.maps[at], elf)
            })
            .collect()
    }

    /// Names for `ips` of process `pid`, innermost first: `function+0xoff (file)`, `file+0xoff`
    /// or `[unknown]`.
    pub fn symbolize(&mut self, pid: u32, ips: &[u64]) -> Vec<String> {
        // Each file is opened (and checked) once per call, however many frames are in it.
        let mut image = self.mappings(pid);
        let frames: Vec<(u64, bool)> = ips.iter().map(|&ip| (ip, false)).collect();
        self.name_frames(&mut image, &frames)
    }

    /// Drops parsed files and perf maps that named no frame since `keep` before `now`.
    pub fn forget_unused(&mut self, now: std::time::Instant, keep: std::time::Duration) {
        let fresh = |at: &std::time::Instant| now.saturating_duration_since(*at) < keep;
        self.last_used.retain(|_, at| fresh(at));
        let used = &self.last_used;
        self.elves.retain(|identity, _| used.contains_key(identity));
        self.perf_maps.retain(|_, (identity, _)| used.contains_key(identity));
        crate::heap::shrink_sparse_map(&mut self.elves);
    }

    /// Opens refused so far, by reason (`not_regular`, `owner`, `too_large`, `symlink`, `io`).
    pub fn refusals(&self) -> &BTreeMap<&'static str, u64> {
        &self.refusals
    }

    fn refused(&mut self, refusal: &Refusal) {
        if let Some(reason) = refusal.reason() {
            *self.refusals.entry(reason).or_default() += 1;
        }
    }

    /// The file's identity once its symbols are in the cache; `None` if it cannot be opened.
    fn load_elf(&mut self, pid: u32, path: &Path, owners: &[u32]) -> Option<Identity> {
        let checked = match target_files::open(pid, path.to_str()?, owners, MAX_ELF_BYTES) {
            Ok(checked) => checked,
            Err(refusal) => {
                self.refused(&refusal);
                return None;
            }
        };
        let identity = checked.identity;
        if !self.elves.contains_key(&identity) {
            if self.elves.len() >= MAX_CACHED {
                self.elves.clear();
            }
            let unwind = self.unwind_tables;
            let symbols = checked.read(MAX_ELF_BYTES).ok().and_then(|bytes| parse_elf(&bytes, unwind));
            self.elves.insert(identity, symbols);
        }
        Some(identity)
    }

    /// The process's perf map (as it sees /tmp and its own pid), parsed again only when the
    /// file changed.
    fn perf_map(&mut self, pid: u32, owners: &[u32]) -> Arc<Vec<PerfEntry>> {
        let nspid = procfs::namespace_pid(pid).unwrap_or(pid);
        let checked = match target_files::open(pid, &format!("/tmp/perf-{nspid}.map"), owners, MAX_PERF_MAP_BYTES) {
            Ok(checked) => checked,
            Err(refusal) => {
                self.refused(&refusal);
                self.perf_maps.remove(&pid);
                return Arc::default();
            }
        };
        self.last_used.insert(checked.identity, std::time::Instant::now());
        if let Some((identity, entries)) = self.perf_maps.get(&pid)
            && *identity == checked.identity
        {
            return entries.clone();
        }
        let identity = checked.identity;
        let text = checked.read(MAX_PERF_MAP_BYTES).map(|b| String::from_utf8_lossy(&b).into_owned());
        let entries = Arc::new(parse_perf_map(&text.unwrap_or_default()));
        if self.perf_maps.len() >= MAX_CACHED {
            self.perf_maps.clear();
        }
        self.perf_maps.insert(pid, (identity, entries.clone()));
        entries
    }
}

/// `method+0xoff [jit]` from the perf map's entry that holds `ip`.
fn jit_name(ip: u64, perf_map: &[PerfEntry]) -> Option<String> {
    // Ranges are compared by offset: the file may put one anywhere, up to the top of the address space.
    let (start, _, name) = perf_map.iter().find(|(s, len, _)| ip >= *s && ip - s < *len)?;
    Some(format!("{name}+{:#x} [jit]", ip - start))
}

impl Mapping {
    fn holds(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }
}

/// The executable mapping that holds `ip`.
fn mapping_of(ip: u64, maps: &[Mapping]) -> Option<&Mapping> {
    maps.iter().find(|m| m.holds(ip))
}

/// What a frame outside every file-backed mapping is named: its address would say where the
/// process's memory lies, and that may not leave the host.
const UNKNOWN: &str = "[unknown]";

/// `function+0xoff (file)` from the file's symbols, else `file+0xoff` (the offset in the file).
/// `lookup` (`ip`, or one byte before a return address) picks the symbol; the offset is `ip`'s.
fn name(ip: u64, lookup: u64, mapping: &Mapping, elf: Option<&ElfSymbols>) -> String {
    let file = mapping.path.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    let lookup = lookup.clamp(mapping.start, ip);
    let file_offset = |at: u64| (at - mapping.start).checked_add(mapping.file_offset);
    if let Some(elf) = elf
        && let Some(vaddr) = file_offset(lookup).and_then(|o| elf.vaddr_of_offset(o))
    {
        let at = elf.symbols.partition_point(|(addr, _, _)| *addr <= vaddr);
        if let Some((addr, size, name)) = at.checked_sub(1).and_then(|i| elf.symbols.get(i))
            && (*size == 0 || vaddr - addr < *size)
        {
            let offset = (vaddr - addr).saturating_add(ip - lookup);
            return format!("{}+{offset:#x} ({file})", demangle::demangle(name));
        }
    }
    match file_offset(ip) {
        Some(offset) => format!("{file}+{offset:#x}"),
        None => format!("{file}+?"),
    }
}

/// The kernel writes /proc/PID/maps, but its size follows the target's mappings: capped.
fn read_maps(pid: u32) -> Vec<Mapping> {
    let mut text = String::new();
    let read = std::fs::File::open(format!("/proc/{pid}/maps"))
        .and_then(|file| file.take(MAX_MAPS_BYTES).read_to_string(&mut text));
    if read.is_ok() { parse_maps(&text) } else { Vec::new() }
}

/// Executable, file-backed lines of /proc/PID/maps.
fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let path = fields.nth(2)?;
            if !perms.contains('x') || !path.starts_with('/') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                file_offset: u64::from_str_radix(offset, 16).ok()?,
                path: PathBuf::from(path),
            })
        })
        .collect()
}

/// /tmp/perf-PID.map: "START SIZE name" in hex, one per line.
fn parse_perf_map(text: &str) -> Vec<PerfEntry> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, size, parts.next()?.trim().to_owned()))
        })
        .collect()
}

fn parse_elf(data: &[u8], unwind: bool) -> Option<ElfSymbols> {
    let file = object::File::parse(data).ok()?;
    let unwind = unwind.then(|| unwind_tables(&file));
    let segments = file
        .segments()
        .map(|seg| {
            use object::ObjectSegment as _;
            let (offset, size) = seg.file_range();
            (offset, size, seg.address())
        })
        .collect();
    let mut symbols: Vec<(u64, u64, String)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_owned())))
        .collect();
    symbols.sort_by_key(|(addr, _, _)| *addr);
    symbols.dedup_by_key(|(addr, _, _)| *addr);
    let python = python::python_symbols(&file);
    Some(ElfSymbols { symbols, segments, unwind, python })
}

/// The sections an unwinder reads, copied out of the file (which is dropped after the parse).
fn unwind_tables(file: &object::File) -> UnwindTables {
    use object::ObjectSection as _;
    let range = |name: &str| {
        let section = file.section_by_name(name)?;
        Some(section.address()..section.address().checked_add(section.size())?)
    };
    let bytes = |name: &str| {
        let section = file.section_by_name(name)?;
        let data: Arc<[u8]> = Arc::from(section.data().ok()?);
        Some((range(name)?, data))
    };
    UnwindTables {
        eh_frame: bytes(".eh_frame"),
        eh_frame_hdr: bytes(".eh_frame_hdr"),
        text: range(".text"),
        got: range(".got"),
    }
}

/// The symbolizer's parsing and naming on text and bytes in hand, for the fuzz targets
/// (`gateway-observer/fuzz`); not an API.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// A /proc/PID/maps, a /tmp/perf-PID.map and one ELF file (taken to back every mapping),
    /// parsed as `Symbolizer` parses them.
    pub struct Parsed {
        maps: Vec<Mapping>,
        perf_map: Vec<PerfEntry>,
        elf: Option<ElfSymbols>,
    }

    impl Parsed {
        pub fn new(maps: &str, perf_map: &str, elf: &[u8]) -> Self {
            Self { maps: parse_maps(maps), perf_map: parse_perf_map(perf_map), elf: parse_elf(elf, true) }
        }

        /// Mappings, perf map entries and ELF symbols (None: no ELF) parsed.
        pub fn counts(&self) -> (usize, usize, Option<usize>) {
            (self.maps.len(), self.perf_map.len(), self.elf.as_ref().map(|e| e.symbols.len()))
        }

        /// The ELF symbols' addresses, which `name` relies on being sorted.
        pub fn symbol_addresses(&self) -> Vec<u64> {
            self.elf.iter().flat_map(|e| e.symbols.iter().map(|(addr, _, _)| *addr)).collect()
        }

        /// Addresses at the edges of what was parsed (first, last and one past each range, through
        /// every mapping for the ELF's segments and symbols): where a lookup's arithmetic breaks.
        pub fn edges(&self) -> Vec<u64> {
            let mut ips = Vec::new();
            let mut around = |start: u64, len: u64| {
                let end = start.wrapping_add(len);
                ips.extend([start, start.wrapping_sub(1), end, end.wrapping_sub(1)]);
            };
            for (start, len, _) in &self.perf_map {
                around(*start, *len);
            }
            for m in &self.maps {
                around(m.start, m.end.wrapping_sub(m.start));
                let Some(elf) = &self.elf else { continue };
                // The address at which the mapping shows a file offset.
                let at = |offset: u64| m.start.wrapping_add(offset.wrapping_sub(m.file_offset));
                for (offset, size, vaddr) in &elf.segments {
                    around(at(*offset), *size);
                    for (addr, len, _) in elf.symbols.iter().take(64) {
                        around(at(offset.wrapping_add(addr.wrapping_sub(*vaddr))), *len);
                    }
                }
            }
            ips
        }

        /// What `Symbolizer::symbolize` names `ip`.
        pub fn name(&self, ip: u64) -> String {
            if let Some(name) = jit_name(ip, &self.perf_map) {
                return name;
            }
            match mapping_of(ip, &self.maps) {
                Some(mapping) => name(ip, ip.wrapping_sub(1), mapping, self.elf.as_ref()),
                None => UNKNOWN.to_owned(),
            }
        }
    }
}

pub mod demangle;
mod python;

#[cfg(test)]
mod tests;
