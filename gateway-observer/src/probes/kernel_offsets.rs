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
    pub regs_arg2: u32,
    /// `struct sock` fields, most inside `__sk_common` and its anonymous unions.
    pub sock_family: u32,
    pub sock_local_port: u32,
    pub sock_remote_port: u32,
    pub sock_local_addr: u32,
    pub sock_remote_addr: u32,
    pub sock_local_addr6: u32,
    pub sock_remote_addr6: u32,
    pub sock_protocol: u32,
    pub tcp_snd_una: u32,
    pub tcp_snd_nxt: u32,
    pub sock_state: u32,
    pub sock_net: u32,
    pub net_inum: u32,
    /// pt_regs `orig_ax`: the syscall number of a task inside a syscall.
    pub regs_syscall_nr: u32,
    /// pt_regs `r14`, where Go's register ABI keeps the goroutine; 0 on other architectures.
    pub regs_go_g: u32,
    /// `struct inet_connection_sock`'s `icsk_ulp_ops`, set on a kernel TLS socket; 0 if absent.
    pub icsk_ulp_ops: u32,
    /// Fields of `struct msghdr`'s `msg_iter` (a `struct iov_iter`) the data hooks read.
    pub msg_iter_type: u32,
    pub msg_iter_buf: u32,
    pub msg_iter_count: u32,
    pub msg_iter_segs: u32,
    /// `enum iter_type` values (reordered between 6.1 and 6.5).
    pub iter_type_ubuf: u8,
    pub iter_type_iovec: u8,
}

impl KernelOffsets {
    pub fn from_vmlinux() -> Result<Self, OffsetError> {
        let btf =
            Btf::from_file(VMLINUX_BTF).map_err(|source| OffsetError::Read { path: VMLINUX_BTF.to_owned(), source })?;
        Ok(Self {
            task_pid: field_offset(&btf, "task_struct", "pid")?,
            task_tgid: field_offset(&btf, "task_struct", "tgid")?,
            regs_arg0: field_offset(&btf, "pt_regs", "di")?,
            regs_arg1: field_offset(&btf, "pt_regs", "si")?,
            regs_arg3: field_offset(&btf, "pt_regs", "r10")?,
            regs_arg4: field_offset(&btf, "pt_regs", "r8")?,
            regs_arg2: field_offset(&btf, "pt_regs", "dx")?,
            sock_family: sock_common_offset(&btf, "skc_family")?,
            sock_local_port: sock_common_offset(&btf, "skc_num")?,
            sock_remote_port: sock_common_offset(&btf, "skc_dport")?,
            sock_local_addr: sock_common_offset(&btf, "skc_rcv_saddr")?,
            sock_remote_addr: sock_common_offset(&btf, "skc_daddr")?,
            sock_local_addr6: sock_common_offset(&btf, "skc_v6_rcv_saddr")?,
            sock_remote_addr6: sock_common_offset(&btf, "skc_v6_daddr")?,
            sock_protocol: field_offset(&btf, "sock", "sk_protocol")?,
            tcp_snd_una: field_offset(&btf, "tcp_sock", "snd_una")?,
            tcp_snd_nxt: field_offset(&btf, "tcp_sock", "snd_nxt")?,
            sock_state: sock_common_offset(&btf, "skc_state")?,
            sock_net: sock_common_offset(&btf, "skc_net")?,
            net_inum: field_offset(&btf, "net", "ns")? + field_offset(&btf, "ns_common", "inum")?,
            regs_syscall_nr: field_offset(&btf, "pt_regs", "orig_ax")?,
            regs_go_g: field_offset(&btf, "pt_regs", "r14").unwrap_or(0),
            icsk_ulp_ops: field_offset(&btf, "inet_connection_sock", "icsk_ulp_ops").unwrap_or(0),
            msg_iter_type: msg_iter_offset(&btf, "iter_type")?,
            // `ubuf` shares its union with the iovec array pointer (`__iov`, `iov` before 6.4).
            msg_iter_buf: msg_iter_offset(&btf, "ubuf")?,
            msg_iter_count: msg_iter_offset(&btf, "count")?,
            msg_iter_segs: msg_iter_offset(&btf, "nr_segs")?,
            iter_type_ubuf: enum_value(&btf, "iter_type", "ITER_UBUF")?,
            iter_type_iovec: enum_value(&btf, "iter_type", "ITER_IOVEC")?,
        })
    }
}

/// Offset in `struct msghdr` of a field of its `msg_iter`.
fn msg_iter_offset(btf: &Btf, field: &str) -> Result<u32, OffsetError> {
    Ok(field_offset(btf, "msghdr", "msg_iter")? + field_offset(btf, "iov_iter", field)?)
}

/// The value of an enumerator that fits a byte (`enum iter_type`'s do).
fn enum_value(btf: &Btf, name: &str, enumerator: &str) -> Result<u8, OffsetError> {
    let types = btf.resolve_types_by_name(name).map_err(|_| OffsetError::NoStruct(name.into()))?;
    types
        .iter()
        .filter_map(|t| match t {
            Type::Enum(e) => Some(e),
            _ => None,
        })
        .flat_map(|e| e.members.iter())
        .find(|m| btf.resolve_name(*m).is_ok_and(|n| n == enumerator))
        .and_then(|m| u8::try_from(m.val()).ok())
        .ok_or_else(|| OffsetError::NoField { name: name.into(), field: enumerator.into() })
}

/// Offset in `struct sock` of a field of its `__sk_common` (a `struct sock_common`).
fn sock_common_offset(btf: &Btf, field: &str) -> Result<u32, OffsetError> {
    Ok(field_offset(btf, "sock", "__sk_common")? + field_offset(btf, "sock_common", field)?)
}

/// Byte offset of a field of a struct, also when it sits in anonymous unions or structs.
fn field_offset(btf: &Btf, name: &str, field: &str) -> Result<u32, OffsetError> {
    let types = btf.resolve_types_by_name(name).map_err(|_| OffsetError::NoStruct(name.into()))?;
    let strukt = types
        .iter()
        .find_map(|t| match t {
            Type::Struct(s) => Some(s),
            _ => None,
        })
        .ok_or_else(|| OffsetError::NoStruct(name.into()))?;
    let bits = member_bit_offset(btf, strukt, field, 0)
        .ok_or_else(|| OffsetError::NoField { name: name.into(), field: field.into() })??;
    if bits % 8 != 0 {
        return Err(OffsetError::NotByteAligned { name: name.into(), field: field.into() });
    }
    Ok(bits / 8)
}

/// Bit offset of `field` in `strukt`, searching anonymous members too (depth-limited). The inner
/// Result reports a bitfield match.
fn member_bit_offset(btf: &Btf, strukt: &btf_rs::Struct, field: &str, depth: u32) -> Option<Result<u32, OffsetError>> {
    for member in &strukt.members {
        let name = btf.resolve_name(member).unwrap_or_default();
        if name == field {
            if member.bitfield_size().is_some_and(|size| size != 0) {
                return Some(Err(OffsetError::NotByteAligned { name: "?".into(), field: field.into() }));
            }
            return Some(Ok(member.bit_offset()));
        }
        if name.is_empty() && depth < 4 {
            let inner = match btf.resolve_chained_type(member) {
                Ok(Type::Struct(s) | Type::Union(s)) => s,
                _ => continue,
            };
            if let Some(found) = member_bit_offset(btf, &inner, field, depth + 1) {
                return Some(found.map(|bits| bits + member.bit_offset()));
            }
        }
    }
    None
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
        assert_eq!(offsets.regs_arg2, 96);
        assert_eq!(offsets.regs_syscall_nr, 120);
        assert_eq!(offsets.regs_go_g, 8, "r14 follows r15");
        // struct iov_iter opens with its one-byte type; the user buffer comes after the offset.
        assert_eq!(offsets.msg_iter_type, 16, "msg_iter follows msg_name, msg_namelen and msg_inq");
        assert!(offsets.msg_iter_buf > offsets.msg_iter_type && offsets.msg_iter_segs > offsets.msg_iter_buf);
        assert_ne!(offsets.iter_type_ubuf, offsets.iter_type_iovec);
        assert_eq!(offsets.task_tgid, offsets.task_pid + 4, "pid and tgid are adjacent pid_t fields");
        // struct sock_common opens with the address pair, then the port pair (include/net/sock.h).
        assert_eq!((offsets.sock_remote_addr, offsets.sock_local_addr), (0, 4));
        assert_eq!((offsets.sock_remote_port, offsets.sock_local_port), (12, 14));
        assert_eq!(offsets.sock_family, 16);
        // inet_connection_sock opens with inet_sock, which opens with the struct sock.
        assert!(offsets.icsk_ulp_ops > offsets.sock_protocol, "{}", offsets.icsk_ulp_ops);
    }
}
