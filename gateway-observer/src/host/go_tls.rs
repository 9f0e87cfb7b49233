//! Where a Go executable's `crypto/tls` calls begin and return. Go functions get no uretprobe (it
//! rewrites the return address on the goroutine's stack, which Go copies elsewhere when the stack
//! grows, and a moved frame then returns into the kernel's trampoline with a stale address), so
//! each RET instruction of a hooked function gets its own uprobe: the function's bytes are
//! decoded from its first instruction to its end (iced-x86), and only RETs found on instruction
//! boundaries count; a byte the decoder refuses refuses the whole function. Go's compiler puts no
//! data inside a function's code (jump tables live in `.rodata`), so the linear walk sees every
//! instruction. Covered: x86-64 executables built by Go 1.17 or later (the register ABI the kernel
//! programs read); the functions are found in `.symtab`, or when stripped (`-s`) in the runtime's
//! own table (`go_pclntab`, Go 1.18+). Nothing here touches a kernel handle.

use iced_x86::{Code, Decoder, DecoderOptions, Mnemonic, OpKind, Register};

use crate::host::{
    dynamic_symbols::{self, Positioned},
    go_pclntab,
    tls_libraries::{Entries, LibraryError, MAX_SYMBOL_BYTES, TlsCall},
};

/// The functions hooked, by their `.symtab` name. The handshake is hooked where it runs
/// (`serverHandshake`, `clientHandshake`: once per connection), not at `handshakeContext`, which
/// every `Read` and `Write` calls first (6 more traps per HTTP/1.1 request through net/http).
pub const GO_CALLS: &[(&str, TlsCall)] = &[
    ("crypto/tls.(*Conn).Read", TlsCall::GoRead),
    ("crypto/tls.(*Conn).Write", TlsCall::GoWrite),
    ("crypto/tls.(*Conn).serverHandshake", TlsCall::GoHandshake),
    ("crypto/tls.(*Conn).clientHandshake", TlsCall::GoHandshake),
];

/// A hooked function larger than this is not decoded (`Write` is 2 kB in Go 1.19).
const MAX_FUNCTION_BYTES: u64 = 64 << 10;

/// The start of `.go.buildinfo` read: its header and the version string after it.
const BUILDINFO_BYTES: u64 = 64;

/// Go 1.17 introduced the register ABI on x86-64.
const FIRST_REGISTER_ABI_MINOR: u32 = 17;

#[derive(Debug, thiserror::Error)]
pub enum GoError {
    #[error("Go {0}: its calls pass arguments on the stack (Go 1.17+ is hooked)")]
    StackAbi(String),
    #[error("its Go version is not recorded in the form Go 1.18+ writes")]
    UnknownVersion,
    #[error("a Go executable for another machine than x86-64")]
    NotX86,
    #[error("{0} could not be decoded to its RET instructions")]
    Undecodable(&'static str),
}

/// Whether the file is a Go executable (it has `.go.buildinfo`): then its `crypto/tls` calls are
/// looked for, and a failure to find them is worth reporting.
pub fn is_go(file: &(impl Positioned + ?Sized)) -> bool {
    matches!(dynamic_symbols::named_section(file, ".go.buildinfo"), Ok((_, Some(_))))
}

/// The entries and RET sites of the hooked calls a Go executable links in: `NoCalls` for a file
/// that is not Go, or a Go program without `crypto/tls`.
pub fn entries(file: &(impl Positioned + ?Sized)) -> Result<Entries, LibraryError> {
    let (machine, buildinfo) = dynamic_symbols::named_section(file, ".go.buildinfo")?;
    let Some(buildinfo) = buildinfo else { return Err(LibraryError::NoCalls) };
    if machine != object::elf::EM_X86_64 {
        return Err(GoError::NotX86.into());
    }
    let mut header = vec![0u8; (buildinfo.end - buildinfo.start).min(BUILDINFO_BYTES) as usize];
    file.read_exact_at(&mut header, buildinfo.start).map_err(dynamic_symbols::SymbolsError::Read)?;
    let version = buildinfo_version(&header).ok_or(GoError::UnknownVersion)?;
    if !has_register_abi(&version) {
        return Err(GoError::StackAbi(version).into());
    }
    let names: Vec<&str> = GO_CALLS.iter().map(|(name, _)| *name).collect();
    let mut found: Entries = Vec::new();
    let mut symbols = dynamic_symbols::find_static(file, &names, MAX_SYMBOL_BYTES)?;
    if symbols.is_empty() {
        // Stripped: `.gopclntab` names the same functions (its sizes include alignment padding).
        symbols = go_pclntab::find(file, &names, MAX_SYMBOL_BYTES)?;
    }
    for symbol in symbols {
        let (name, call) = GO_CALLS[symbol.index];
        if symbol.size == 0 || symbol.size > MAX_FUNCTION_BYTES {
            return Err(GoError::Undecodable(name).into());
        }
        let mut code = vec![0u8; symbol.size as usize];
        file.read_exact_at(&mut code, symbol.offset).map_err(dynamic_symbols::SymbolsError::Read)?;
        let rets = ret_offsets(&code).ok_or(GoError::Undecodable(name))?;
        if rets.is_empty() {
            return Err(GoError::Undecodable(name).into());
        }
        found.push((name, call, symbol.offset + entry_probe_offset(&code)));
        let ret = if call == TlsCall::GoHandshake { TlsCall::GoHandshakeReturn } else { TlsCall::GoReturn };
        found.extend(rets.into_iter().map(|at| (name, ret, symbol.offset + at)));
    }
    if !found.iter().any(|(_, call, _)| matches!(call, TlsCall::GoRead | TlsCall::GoWrite)) {
        return Err(LibraryError::NoCalls);
    }
    found.sort_unstable();
    Ok(found)
}

/// Where a function's entry uprobe goes, as an offset from its entry. Go functions open with
/// their stack check, `cmp rsp, [r14+16]` (or, for a larger frame, `lea r12, [rsp-N]` then
/// `cmp r12, [r14+16]`), and a `jbe` to the stack growth at their end. The kernel's
/// uprobes do not emulate the compare or the `lea` (the trap single-steps them out of line, 5-7 us
/// here) but do emulate a branch (under 1 us). Neither writes a register the programs read
/// (compare: flags only; R12 is scratch in Go's ABI, no argument), so on the jump the arguments
/// and g are the entry's. Any other opening keeps the entry.
fn entry_probe_offset(code: &[u8]) -> u64 {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut next = decoder.decode();
    let mut compared = Register::RSP;
    let is_frame_bound = next.code() == Code::Lea_r64_m
        && next.op0_register() == Register::R12
        && next.memory_base() == Register::RSP
        && next.memory_index() == Register::None;
    if is_frame_bound {
        compared = Register::R12;
        next = decoder.decode();
    }
    let check = next;
    let jump = decoder.decode();
    let is_stack_check = check.code() == Code::Cmp_r64_rm64
        && check.op0_register() == compared
        && check.op1_kind() == OpKind::Memory
        && check.memory_base() == Register::R14
        && check.memory_index() == Register::None
        && check.memory_displacement64() == 0x10
        && check.segment_prefix() == Register::None;
    // Go's compiler branches to the stack growth with JLS (`jbe`).
    let is_conditional_jump = jump.op0_kind() == OpKind::NearBranch64 && jump.mnemonic() == Mnemonic::Jbe;
    if is_stack_check && is_conditional_jump { jump.ip() } else { 0 }
}

/// The offsets in `code` (one function's bytes, from its entry) of its RET instructions, or None
/// if some bytes are not an instruction.
pub fn ret_offsets(code: &[u8]) -> Option<Vec<u64>> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut rets = Vec::new();
    while decoder.can_decode() {
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            return None;
        }
        if instruction.mnemonic() == Mnemonic::Ret {
            rets.push(instruction.ip());
        }
    }
    Some(rets)
}

/// The Go version in a `.go.buildinfo` header as Go 1.18+ writes it: a 14-byte magic, pointer
/// size, a flags byte whose bit 1 says the strings are inline, then from byte 32 the version as a
/// length-prefixed (varint) string.
fn buildinfo_version(header: &[u8]) -> Option<String> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if !header.starts_with(MAGIC) || header.get(15)? & 2 == 0 {
        return None;
    }
    let len = usize::from(*header.get(32)?);
    // A one-byte varint: versions are short.
    if len >= 0x80 {
        return None;
    }
    let version = header.get(33..33 + len)?;
    String::from_utf8(version.to_vec()).ok()
}

/// Whether a release `go1.N[.P]` has the register ABI (1.17+).
fn has_register_abi(version: &str) -> bool {
    let Some(rest) = version.strip_prefix("go1.") else { return false };
    let minor = rest.split(|c: char| !c.is_ascii_digit()).next().and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|minor| minor >= FIRST_REGISTER_ABI_MINOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rets_are_found_on_instruction_boundaries_only() {
        // cmp rsp,[r14+0x10]; mov eax,0xc3 (a C3 byte inside an instruction); ret; int3
        let code = [0x49, 0x3b, 0x66, 0x10, 0xb8, 0xc3, 0x00, 0x00, 0x00, 0xc3, 0xcc];
        assert_eq!(ret_offsets(&code), Some(vec![9]));
        // A truncated instruction at the end: refused.
        assert_eq!(ret_offsets(&[0xc3, 0xb8, 0xc3]), None);
    }

    #[test]
    fn the_entry_probe_goes_on_the_stack_checks_jump() {
        // cmp rsp,[r14+0x10]; jbe +0x50; push rbp
        assert_eq!(entry_probe_offset(&[0x49, 0x3b, 0x66, 0x10, 0x76, 0x50, 0x55]), 4);
        // The same with a near jbe.
        assert_eq!(entry_probe_offset(&[0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0, 1, 0, 0]), 4);
        // A larger frame's check: lea r12,[rsp-0x68]; cmp r12,[r14+0x10]; jbe.
        assert_eq!(entry_probe_offset(&[0x4c, 0x8d, 0x64, 0x24, 0x98, 0x4d, 0x3b, 0x66, 0x10, 0x76, 0x50]), 9);
        // lea into another register, or r12 compared without its lea: the entry.
        assert_eq!(entry_probe_offset(&[0x4c, 0x8d, 0x6c, 0x24, 0x98, 0x4d, 0x3b, 0x66, 0x10, 0x76, 0x50]), 0);
        assert_eq!(entry_probe_offset(&[0x4d, 0x3b, 0x66, 0x10, 0x76, 0x50]), 0);
        // cmp rsp,[r14+0x18] (not the stack guard); then a jmp (not the branch); then cut short.
        assert_eq!(entry_probe_offset(&[0x49, 0x3b, 0x66, 0x18, 0x76, 0x50]), 0);
        assert_eq!(entry_probe_offset(&[0x49, 0x3b, 0x66, 0x10, 0xeb, 0x50]), 0);
        assert_eq!(entry_probe_offset(&[0x49, 0x3b, 0x66, 0x10, 0x0f]), 0);
        assert_eq!(entry_probe_offset(&[]), 0);
    }

    #[test]
    fn the_version_is_read_from_buildinfo() {
        let mut header = b"\xff Go buildinf:\x08\x02".to_vec();
        header.resize(32, 0);
        header.push(8);
        header.extend_from_slice(b"go1.19.8path");
        assert_eq!(buildinfo_version(&header).as_deref(), Some("go1.19.8"));
        header[15] = 0;
        assert_eq!(buildinfo_version(&header), None, "pointer form (before 1.18)");
        assert!(has_register_abi("go1.19.8") && has_register_abi("go1.22rc1") && has_register_abi("go1.17"));
        assert!(!has_register_abi("go1.16.5") && !has_register_abi("devel go1.23") && !has_register_abi("go2"));
    }

    /// The TLS test server built with the host's Go (`extra`: more `go build` flags), or None
    /// without `go`.
    fn built_server(tag: &str, extra: &[&str]) -> Option<Vec<u8>> {
        let dir = std::env::temp_dir().join(format!("go-tls-unit-{tag}-{}", std::process::id()));
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/go/tls_server.go");
        let out = dir.join("server");
        let built = std::process::Command::new("go")
            .arg("build")
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg(source)
            .env("GOCACHE", dir.join("cache"))
            .env("GOPATH", dir.join("gopath"))
            .env("GOENV", "off")
            .env("GOFLAGS", "")
            .env("GO111MODULE", "off")
            .status();
        let bytes = built.is_ok_and(|status| status.success()).then(|| std::fs::read(&out).expect("read the server"));
        let _ = std::fs::remove_dir_all(&dir);
        if bytes.is_none() {
            eprintln!("no Go toolchain: skipped");
        }
        bytes
    }

    /// The TLS test server (skipped without `go`): each hooked function found, a RET byte at every
    /// return site, and the sites of one function inside its bytes. Stripped (`-s -w`: no
    /// `.symtab`), `.gopclntab` gives the same sites; and on the unstripped file it finds each
    /// function where `.symtab` does, its size up to the 32-byte alignment padding larger.
    #[test]
    fn a_go_https_server_has_its_calls_and_return_sites_found() {
        let Some(bytes) = built_server("full", &[]) else { return };
        let found = entries(bytes.as_slice()).expect("crypto/tls calls");
        for (name, call) in GO_CALLS.iter().filter(|(name, _)| !name.contains("clientHandshake")) {
            let entry = found.iter().find(|(n, c, _)| n == name && c == call).expect("its entry");
            // On the stack check's jump (jbe: 0x76 or 0x0f 0x86), after `cmp rsp|r12, [r14+16]`.
            let at = entry.2 as usize;
            assert!(
                matches!(bytes[at - 4..at], [0x49 | 0x4d, 0x3b, 0x66, 0x10]),
                "{name}: no stack check before {at:#x}"
            );
            assert!(bytes[at] == 0x76 || bytes[at..at + 2] == [0x0f, 0x86], "{name}: no jbe at {at:#x}");
            let rets: Vec<u64> =
                found.iter().filter(|(n, c, _)| n == name && c.is_go_return()).map(|&(_, _, offset)| offset).collect();
            assert!(!rets.is_empty(), "{name} has return sites");
            for at in rets {
                assert_eq!(bytes[at as usize], 0xc3, "{name}: RET at {at:#x}");
                assert!(at > entry.2 && at - entry.2 < MAX_FUNCTION_BYTES, "{name}: {at:#x} inside the function");
            }
        }
        let names: Vec<&str> = GO_CALLS.iter().map(|(name, _)| *name).collect();
        let mut symtab = dynamic_symbols::find_static(bytes.as_slice(), &names, MAX_SYMBOL_BYTES).expect(".symtab");
        let mut pclntab = go_pclntab::find(bytes.as_slice(), &names, MAX_SYMBOL_BYTES).expect(".gopclntab");
        symtab.sort_by_key(|f| f.index);
        pclntab.sort_by_key(|f| f.index);
        assert_eq!(symtab.len(), pclntab.len());
        for (s, p) in symtab.iter().zip(&pclntab) {
            assert_eq!((s.index, s.offset), (p.index, p.offset), "{}", names[s.index]);
            assert!(p.size >= s.size && p.size - s.size < 32, "{}: {} vs {} bytes", names[s.index], p.size, s.size);
        }
        let Some(stripped) = built_server("stripped", &["-ldflags=-s -w"]) else { return };
        assert!(dynamic_symbols::find_static(stripped.as_slice(), &names, MAX_SYMBOL_BYTES).expect("ELF").is_empty());
        assert_eq!(entries(stripped.as_slice()).expect("crypto/tls calls, stripped"), found);
        // The file cut short anywhere, or its table's bytes overwritten: an error or fewer calls,
        // never a panic.
        let (_, table) = dynamic_symbols::named_section(stripped.as_slice(), ".gopclntab").expect("ELF");
        let table = table.expect(".gopclntab");
        for cut in [0, 64, table.start + 40, table.start + 4096, table.end - 8, stripped.len() as u64 - 1] {
            let _ = entries(&stripped[..cut as usize]);
        }
        for at in (table.start..table.start + 72).chain((table.start..table.end).step_by(16411)) {
            let mut corrupt = stripped.clone();
            corrupt[at as usize] ^= 0xa5;
            let _ = entries(corrupt.as_slice());
        }
    }
}
