//! Refuses a daemon built with the empty stand-in kernel object (gateway-observer's build.rs
//! writes one when bpf-linker is not on PATH): such a binary installs fine and then fails every
//! `run` and `check`. The real object is an ELF file for the BPF machine embedded whole in the
//! binary's read-only data (`EBPF_OBJECT`), so its header is looked for in the bytes that ship.

use std::path::Path;

use anyhow::{Context as _, bail};

/// `EM_BPF` in an ELF header's `e_machine`.
const EM_BPF: u16 = 247;

pub fn require_real_object(binary: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    if !embeds_bpf_object(&bytes) {
        bail!(
            "{} embeds no eBPF object: it was built with the empty stand-in (bpf-linker was not on \
             PATH). `cargo xtask setup` installs bpf-linker into ~/.cargo/bin; put that on PATH and \
             run `cargo xtask package` again",
            binary.display()
        );
    }
    Ok(())
}

/// Whether the bytes hold the header of a 64-bit little-endian relocatable ELF object for BPF.
fn embeds_bpf_object(bytes: &[u8]) -> bool {
    const IDENT: [u8; 7] = [0x7f, b'E', b'L', b'F', 2, 1, 1]; // magic, ELFCLASS64, LSB, EV_CURRENT
    const ET_REL: u16 = 1;
    bytes.windows(20).any(|header| {
        header.starts_with(&IDENT)
            && u16::from_le_bytes([header[16], header[17]]) == ET_REL
            && u16::from_le_bytes([header[18], header[19]]) == EM_BPF
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf_header(machine: u16) -> Vec<u8> {
        let mut header = vec![0x7f, b'E', b'L', b'F', 2, 1, 1];
        header.resize(16, 0);
        header.extend(1u16.to_le_bytes());
        header.extend(machine.to_le_bytes());
        header.resize(64, 0);
        header
    }

    #[test]
    fn an_embedded_bpf_object_is_found_anywhere_in_the_binary() {
        let mut binary = elf_header(62); // the host binary's own header: EM_X86_64
        binary.extend([0xaa; 1000]);
        binary.extend(elf_header(EM_BPF));
        binary.extend([0x55; 100]);
        assert!(embeds_bpf_object(&binary));
    }

    #[test]
    fn a_binary_with_the_stand_in_holds_no_bpf_object() {
        let mut binary = elf_header(62);
        binary.extend([0; 4096]);
        assert!(!embeds_bpf_object(&binary));
        assert!(!embeds_bpf_object(&[]));
        // A BPF header cut short at the end of the file is no object.
        let cut = elf_header(EM_BPF);
        assert!(!embeds_bpf_object(&cut[..19]));
    }
}
