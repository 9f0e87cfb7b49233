//! Load-time constants the loader writes into the kernel programs.

/// Load-time constants for the kernel programs, read from the running kernel's BTF and set with
/// `EbpfLoader::override_global`. Rust eBPF gets no CO-RE relocations, so struct offsets come here.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Off-CPU waits at least this long are sent to the ring buffer.
    pub block_threshold_ns: u64,
    pub task_pid_offset: u32,
    pub task_tgid_offset: u32,
    /// Offsets in `struct pt_regs` of the syscall arguments 0, 1, 3 and 4 (x86-64: di, si, r10, r8).
    pub regs_arg0_offset: u32,
    pub regs_arg1_offset: u32,
    pub regs_arg3_offset: u32,
    pub regs_arg4_offset: u32,
    /// Event-loop iterations at least this long on CPU are sent to the ring buffer.
    pub busy_iteration_ns: u64,
    /// pt_regs offset of syscall argument 2 (x86-64: dx).
    pub regs_arg2_offset: u32,
    /// Offsets in `struct sock` (through `__sk_common`) of the connection's family, ports and
    /// addresses, and of `sk_protocol`.
    pub sock_family_offset: u32,
    pub sock_local_port_offset: u32,
    pub sock_remote_port_offset: u32,
    pub sock_local_addr_offset: u32,
    pub sock_remote_addr_offset: u32,
    pub sock_local_addr6_offset: u32,
    pub sock_remote_addr6_offset: u32,
    pub sock_protocol_offset: u32,
    /// Offsets in `struct tcp_sock` of snd_una and snd_nxt.
    pub tcp_snd_una_offset: u32,
    pub tcp_snd_nxt_offset: u32,
    /// Offset in `struct sock` of `__sk_common.skc_state`.
    pub sock_state_offset: u32,
    /// Offset in `struct sock` of `__sk_common.skc_net` (the `struct net *`), and in `struct net`
    /// of `ns.inum`: a socket's network namespace, as /proc/PID/ns/net names it.
    pub sock_net_offset: u32,
    pub net_inum_offset: u32,
    /// pt_regs offset of `orig_ax`: the syscall number of a task inside a syscall.
    pub regs_syscall_nr_offset: u32,
    /// Offsets in `struct msghdr` of its `msg_iter`'s type, user buffer (or iovec array: the
    /// same union), byte count and iovec count.
    pub msg_iter_type_offset: u32,
    pub msg_iter_buf_offset: u32,
    pub msg_iter_count_offset: u32,
    pub msg_iter_segs_offset: u32,
    /// `enum iter_type` values of a single user buffer and of an iovec array (they differ
    /// between kernel versions).
    pub iter_type_ubuf: u8,
    pub iter_type_iovec: u8,
    /// 1 when nothing decrypts TLS (TLS plaintext off): a connection whose first bytes are a TLS
    /// record has that record reported, so userspace counts it, and none of its ciphertext after.
    pub silence_tls: u8,
    pub _pad: u8,
    /// The budgets a child process the kernel starts following begins with (`TargetInfo`).
    pub thread_quota: u32,
    pub socket_quota: u32,
    /// pt_regs offset of the register Go's register ABI keeps the goroutine (`g`) in (x86-64:
    /// r14; 0 where the kernel's pt_regs has none: Go TLS calls are hooked on x86-64 only).
    pub regs_go_g_offset: u32,
    /// Offset in `struct inet_connection_sock` (which a TCP `struct sock` is) of `icsk_ulp_ops`:
    /// set on a kernel TLS socket. 0 where the kernel's BTF lacks it.
    pub icsk_ulp_ops_offset: u32,
}
const _: () = assert!(size_of::<ProbeConfig>() == 136);
