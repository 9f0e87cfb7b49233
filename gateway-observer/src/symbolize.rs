//! User-space addresses to names, for the stacks in alert evidence: native code through the
//! process's mappings (/proc/PID/maps) and the mapped file's ELF symbol tables; JIT code (a JVM
//! with -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit or perf-map-agent, Node with
//! --perf-basic-prof) through /tmp/perf-PID.map. Unknown addresses stay hex. Nothing here
//! touches the kernel.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use object::{Object as _, ObjectSymbol as _};

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
}

impl ElfSymbols {
    fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(start, size, _)| offset >= *start && offset < start + size)
            .map(|(start, _, addr)| addr + (offset - start))
    }
}

#[derive(Debug, Default)]
pub struct Symbolizer {
    elves: HashMap<PathBuf, Option<ElfSymbols>>,
}

impl Symbolizer {
    /// Names for `ips` of process `pid`, innermost first: `function+0xoff (file)`, or hex.
    pub fn symbolize(&mut self, pid: u32, ips: &[u64]) -> Vec<String> {
        let maps = read_maps(pid);
        let perf_map = read_perf_map(pid);
        ips.iter().map(|ip| self.name(*ip, &maps, &perf_map)).collect()
    }

    fn name(&mut self, ip: u64, maps: &[Mapping], perf_map: &[(u64, u64, String)]) -> String {
        if let Some((start, _, name)) = perf_map.iter().find(|(s, len, _)| ip >= *s && ip < s + len) {
            return format!("{name}+{:#x} [jit]", ip - start);
        }
        let Some(mapping) = maps.iter().find(|m| ip >= m.start && ip < m.end) else {
            return format!("{ip:#x}");
        };
        let file = mapping.path.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        let symbols = self.elves.entry(mapping.path.clone()).or_insert_with(|| load_elf(&mapping.path));
        if let Some(elf) = symbols
            && let Some(vaddr) = elf.vaddr_of_offset(ip - mapping.start + mapping.file_offset)
        {
            let at = elf.symbols.partition_point(|(addr, _, _)| *addr <= vaddr);
            if let Some((addr, size, name)) = at.checked_sub(1).and_then(|i| elf.symbols.get(i))
                && (*size == 0 || vaddr < addr + size)
            {
                return format!("{:#}+{:#x} ({file})", rustc_demangle::demangle(name), vaddr - addr);
            }
        }
        format!("{ip:#x} ({file})")
    }
}

fn read_maps(pid: u32) -> Vec<Mapping> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|t| parse_maps(&t)).unwrap_or_default()
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
fn read_perf_map(pid: u32) -> Vec<(u64, u64, String)> {
    std::fs::read_to_string(format!("/tmp/perf-{pid}.map")).map(|t| parse_perf_map(&t)).unwrap_or_default()
}

fn parse_perf_map(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, size, parts.next()?.trim().to_owned()))
        })
        .collect()
}

fn load_elf(path: &Path) -> Option<ElfSymbols> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
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
    Some(ElfSymbols { symbols, segments })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_perf_map_lines() {
        let maps = parse_maps(
            "55d0c0000000-55d0c0100000 r-xp 00002000 fd:00 12 /usr/bin/java\n\
             7f00-7f10 rw-p 00000000 00:00 0 [heap]\n\
             7f20-7f30 r-xp 00000000 00:00 0 \n",
        );
        assert_eq!(maps.len(), 1);
        assert_eq!(maps[0].file_offset, 0x2000);
        let perf = parse_perf_map("7f1234 40 Lio/netty/Foo;::bar\nnot a line\n");
        assert_eq!(perf, vec![(0x7f1234, 0x40, "Lio/netty/Foo;::bar".to_owned())]);
    }

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_a_function_of_this_test_binary() {
        let ip = a_function_to_find as *const () as u64 + 4;
        let mut s = Symbolizer::default();
        let names = s.symbolize(std::process::id(), &[ip]);
        assert!(names[0].contains("a_function_to_find"), "{names:?}");
        let unknown = s.symbolize(std::process::id(), &[8]);
        assert_eq!(unknown[0], "0x8");
    }
}
