//! Where OpenSSL's read and write calls can be hooked cheaply. `SSL_read`, `SSL_read_ex` (and the
//! write pair) are thin wrappers around one internal function with `_ex`'s arguments
//! (`ssl_read_internal(ssl, buf, num, size_t *readbytes)`, returning > 0 on success). The
//! wrappers open with `sub rsp`, which x86 uprobes cannot emulate: each hit is single-stepped out
//! of line, about 5 µs in this VM, and a uretprobe needs that same entry breakpoint. The internal
//! function opens with `push`, which 6.18 emulates: entry and return together cost about 0.7 µs
//! (measured on tracefs uprobes over a 200k-call loop, 2026-12-06). So when both wrappers of a
//! pair visibly call the same function with their arguments untouched, that function is hooked
//! instead of the two wrappers (and a call through either is seen once).
//!
//! "Visibly": decoded from the wrapper's first bytes, the first direct call is reached through
//! instructions that are all of a short known list, none of which writes the argument registers
//! the call passes on (for `SSL_read`'s `int num`, a sign extension of it into `rdx`; its
//! `readbytes` is the wrapper's own, set in `rcx`). Anything else keeps the exported entries.

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

use crate::host::{
    dynamic_symbols::Positioned,
    tls_libraries::{Entries, TlsCall},
};

/// Bytes of a wrapper decoded: OpenSSL 3's `SSL_read` reaches its call in 30.
const WRAPPER_BYTES: usize = 96;

/// `entries` with each read and write pair replaced by the internal function both forward to,
/// hooked with the `_ex` programs; unchanged where a pair does not forward visibly.
pub fn prefer_forwarded(file: &(impl Positioned + ?Sized), entries: Entries) -> Entries {
    let offset_of = |call: TlsCall| entries.iter().find(|(_, c, _)| *c == call).map(|&(_, _, offset)| offset);
    let mut replaced: Vec<(TlsCall, TlsCall, &'static str, u64)> = Vec::new();
    for (plain, ex, name) in [
        (TlsCall::Read, TlsCall::ReadEx, "SSL_read/SSL_read_ex body"),
        (TlsCall::Write, TlsCall::WriteEx, "SSL_write/SSL_write_ex body"),
    ] {
        let (Some(plain_at), Some(ex_at)) = (offset_of(plain), offset_of(ex)) else { continue };
        let target = forwards_to(file, plain_at, false);
        if target.is_some() && target == forwards_to(file, ex_at, true) {
            replaced.push((plain, ex, name, target.unwrap_or_default()));
        }
    }
    let mut out: Entries = entries
        .into_iter()
        .filter(|(_, call, _)| !replaced.iter().any(|(plain, ex, ..)| call == plain || call == ex))
        .collect();
    out.extend(replaced.into_iter().map(|(_, ex, name, offset)| (name, ex, offset)));
    out.sort_unstable();
    out
}

/// The file offset of the function the wrapper at `offset` calls with its arguments as they
/// came (`ex`: all four; otherwise `ssl` and `buf`, `num` sign-extended, `readbytes` its own).
fn forwards_to(file: &(impl Positioned + ?Sized), offset: u64, ex: bool) -> Option<u64> {
    let size = file.size().ok()?;
    let len = usize::try_from(size.checked_sub(offset)?).ok()?.min(WRAPPER_BYTES);
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, offset).ok()?;
    let target = first_call_keeping_arguments(&bytes, offset, ex)?;
    (target < size && target != offset).then_some(target)
}

/// Decodes `code` (found at file offset `ip`) up to its first direct call: its target, if every
/// instruction before it is one a compiler's prologue or argument check uses and none writes
/// an argument register the call passes on.
fn first_call_keeping_arguments(code: &[u8], ip: u64, ex: bool) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            return None;
        }
        if instr.mnemonic() == Mnemonic::Call {
            return (instr.op0_kind() == OpKind::NearBranch64).then(|| instr.near_branch64());
        }
        if !keeps_arguments(&instr, ex) {
            return None;
        }
    }
    None
}

#[rustfmt::skip]
const CONDITIONAL_JUMPS: [Mnemonic; 16] = [
    Mnemonic::Ja, Mnemonic::Jae, Mnemonic::Jb, Mnemonic::Jbe, Mnemonic::Je, Mnemonic::Jne, Mnemonic::Jg, Mnemonic::Jge,
    Mnemonic::Jl, Mnemonic::Jle, Mnemonic::Jo, Mnemonic::Jno, Mnemonic::Jp, Mnemonic::Jnp, Mnemonic::Js, Mnemonic::Jns,
];

/// An instruction of a wrapper's prologue or argument check that leaves the passed-on argument
/// registers alone: conditional branches (to an error path), stack and canary set-up, tests.
fn keeps_arguments(instr: &Instruction, ex: bool) -> bool {
    if CONDITIONAL_JUMPS.contains(&instr.mnemonic()) {
        return true;
    }
    match instr.mnemonic() {
        Mnemonic::Endbr64 | Mnemonic::Nop | Mnemonic::Test | Mnemonic::Cmp | Mnemonic::Push => true,
        Mnemonic::Sub | Mnemonic::Add | Mnemonic::Mov | Mnemonic::Movsxd | Mnemonic::Xor | Mnemonic::Lea => {
            if instr.op0_kind() != OpKind::Register {
                return true; // a store to memory (the canary on the stack)
            }
            match argument_register(instr.op0_register()) {
                Register::RDI | Register::RSI => false,
                // `SSL_read`'s `int num` widened for the `size_t` parameter.
                Register::RDX => !ex && instr.code() == Code::Movsxd_r64_rm32 && instr.op1_register() == Register::EDX,
                // `SSL_read`'s own `readbytes`, passed to the internal function.
                Register::RCX => !ex,
                _ => true,
            }
        }
        _ => false,
    }
}

/// The 64-bit argument register `register` is part of, for the four a wrapper passes on.
fn argument_register(register: Register) -> Register {
    match register {
        Register::RDI | Register::EDI | Register::DI | Register::DIL => Register::RDI,
        Register::RSI | Register::ESI | Register::SI | Register::SIL => Register::RSI,
        Register::RDX | Register::EDX | Register::DX | Register::DL | Register::DH => Register::RDX,
        Register::RCX | Register::ECX | Register::CX | Register::CL | Register::CH => Register::RCX,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenSSL 3.0's `SSL_read` (Debian 12): `sub rsp; canary; xor; test edx; js error;
    /// mov rcx, rsp; movsxd rdx, edx; call ssl_read_internal`.
    const SSL_READ: &[u8] = &[
        0x48, 0x83, 0xec, 0x18, 0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00, 0x48, 0x89, 0x44, 0x24, 0x08,
        0x31, 0xc0, 0x85, 0xd2, 0x78, 0x2f, 0x48, 0x89, 0xe1, 0x48, 0x63, 0xd2, 0xe8, 0x3d, 0xfe, 0xff, 0xff,
    ];
    /// `SSL_read_ex`: `sub rsp, 8; call ssl_read_internal`.
    const SSL_READ_EX: &[u8] = &[0x48, 0x83, 0xec, 0x08, 0xe8, 0xc7, 0xfd, 0xff, 0xff];

    #[test]
    fn the_wrappers_of_openssl_3_forward_to_one_function() {
        assert_eq!(first_call_keeping_arguments(SSL_READ, 0x35430, false), Some(0x35290));
        assert_eq!(first_call_keeping_arguments(SSL_READ_EX, 0x354c0, true), Some(0x35290));
    }

    #[test]
    fn a_wrapper_that_changes_an_argument_is_not_skipped() {
        // `SSL_read`'s bytes taken as an `_ex` form: it writes rcx and rdx.
        assert_eq!(first_call_keeping_arguments(SSL_READ, 0x35430, true), None);
        // `mov rsi, rax` before the call.
        let moves_buf = [0x48, 0x89, 0xc6, 0xe8, 0x00, 0x00, 0x00, 0x00];
        assert_eq!(first_call_keeping_arguments(&moves_buf, 0x1000, true), None);
        // An indirect call, a jump or a return first: no visible forwarding.
        for code in [&[0xff, 0xd0][..], &[0xeb, 0x00][..], &[0xc3][..]] {
            assert_eq!(first_call_keeping_arguments(code, 0x1000, true), None, "{code:x?}");
        }
    }

    #[test]
    fn the_system_libssl_read_and_write_pairs_are_hooked_in_their_bodies() {
        let Ok(file) = std::fs::File::open("/usr/lib/x86_64-linux-gnu/libssl.so.3") else {
            panic!("libssl3 is installed with the openssl package (cargo xtask setup)")
        };
        let exported = crate::host::tls_libraries::exported_entries(&file).expect("libssl exports its calls");
        let hooked = prefer_forwarded(&file, exported.clone());
        let kinds: Vec<TlsCall> = hooked.iter().map(|(_, call, _)| *call).collect();
        assert_eq!(kinds.iter().filter(|c| **c == TlsCall::ReadEx).count(), 1, "{hooked:?}");
        assert_eq!(kinds.iter().filter(|c| **c == TlsCall::WriteEx).count(), 1, "{hooked:?}");
        assert!(!kinds.contains(&TlsCall::Read) && !kinds.contains(&TlsCall::Write), "{hooked:?}");
        for (name, _, offset) in &hooked {
            // The body opens with a push (emulated), unlike the wrappers' `sub rsp`.
            if name.ends_with("body") {
                assert!(!exported.iter().any(|(_, _, o)| o == offset), "{name} is an exported entry");
                let mut first = [0u8; 2];
                crate::host::dynamic_symbols::Positioned::read_exact_at(&file, &mut first, *offset).unwrap();
                assert!(matches!(first, [0x41, 0x50..=0x57] | [0x50..=0x57, _]), "{name} opens with {first:x?}");
            }
        }
    }
}
