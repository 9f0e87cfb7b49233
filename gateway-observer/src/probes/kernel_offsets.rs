//! Struct field offsets of the running kernel, read from its BTF. Rust eBPF programs get no CO-RE
//! relocations, so the few fields they read (task_struct's pid and tgid, the syscall argument
//! registers in pt_regs) are located here and passed in as load-time globals.

use btf_rs::{Btf, Type};

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    #[error("cannot read kernel BTF at {path}: {source}")]
    Read { path: String, source: btf_rs::Error },
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    #[error("kernel BTF has no field {field} in struct {name}")]
    NoField { name: String, field: String },
    #[error("field {field} of struct {name} is a bitfield or not byte-aligned")]
    NotByteAligned { name: String, field: String },
}

/// The offsets the kernel programs need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOffsets {
    pub task_pid: u32,
    pub task_tgid: u32,
    /// pt_regs fields holding syscall arguments 0, 1, 3 and 4 on x86-64 (di, si, r10, r8).
    pub regs_arg0: u32,
    pub regs_arg1: u32,
    pub regs_arg3: u32,
    pub regs_arg4: u32,
}

impl KernelOffsets {
    pub fn from_vmlinux() -> Result<Self, OffsetError> {
        let btf = Btf::from_file(VMLINUX_BTF)
            .map_err(|source| OffsetError::Read { path: VMLINUX_BTF.to_owned(), source })?;
        Ok(Self {
            task_pid: field_offset(&btf, "task_struct", "pid")?,
            task_tgid: field_offset(&btf, "task_struct", "tgid")?,
            regs_arg0: field_offset(&btf, "pt_regs", "di")?,
            regs_arg1: field_offset(&btf, "pt_regs", "si")?,
            regs_arg3: field_offset(&btf, "pt_regs", "r10")?,
            regs_arg4: field_offset(&btf, "pt_regs", "r8")?,
        })
    }
}

/// Byte offset of a top-level field of a struct.
fn field_offset(btf: &Btf, name: &str, field: &str) -> Result<u32, OffsetError> {
    let types = btf.resolve_types_by_name(name).map_err(|_| OffsetError::NoStruct(name.into()))?;
    let strukt = types
        .iter()
        .find_map(|t| match t {
            Type::Struct(s) => Some(s),
            _ => None,
        })
        .ok_or_else(|| OffsetError::NoStruct(name.into()))?;
    let member = strukt
        .members
        .iter()
        .find(|m| btf.resolve_name(*m).is_ok_and(|n| n == field))
        .ok_or_else(|| OffsetError::NoField { name: name.into(), field: field.into() })?;
    let bits = member.bit_offset();
    if member.bitfield_size().is_some_and(|size| size != 0) || bits % 8 != 0 {
        return Err(OffsetError::NotByteAligned { name: name.into(), field: field.into() });
    }
    Ok(bits / 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pt_regs is a fixed ABI on x86-64 (arch/x86/include/asm/ptrace.h), so it checks the parser.
    #[test]
    fn pt_regs_matches_the_x86_64_abi() {
        if !std::path::Path::new(VMLINUX_BTF).exists() {
            eprintln!("skipped: no {VMLINUX_BTF} on this host");
            return;
        }
        let offsets = KernelOffsets::from_vmlinux().expect("offsets from BTF");
        assert_eq!(offsets.regs_arg0, 112);
        assert_eq!(offsets.regs_arg1, 104);
        assert_eq!(offsets.regs_arg3, 56);
        assert_eq!(offsets.regs_arg4, 72);
        assert_eq!(offsets.task_tgid, offsets.task_pid + 4, "pid and tgid are adjacent pid_t fields");
    }
}
