//! Which kernel hooks the programs attach to (ARCHITECTURE.md, "Kernel hook plan"). None runs on
//! the syscall path, which every process on the host would pay for: the syscall a target thread
//! is in is read from its registers where it is already in hand (`sched_switch`, the socket
//! layer). The bytes of socket transfers come from the socket layer's tracepoints, or from TCP's
//! own functions on kernels without them.

/// How a program attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachKind {
    /// A BTF tracepoint (`tp_btf`).
    TracePoint,
    /// The entry of a kernel function (`fentry`, a BPF trampoline).
    Entry,
    /// The return of a kernel function (`fexit`).
    Exit,
}

/// One program and where it attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// The program's name in the object.
    pub program: &'static str,
    pub kind: AttachKind,
    /// The tracepoint or kernel function.
    pub target: &'static str,
}

impl Hook {
    const fn tp(name: &'static str) -> Self {
        Self { program: name, kind: AttachKind::TracePoint, target: name }
    }
    const fn entry(program: &'static str, function: &'static str) -> Self {
        Self { program, kind: AttachKind::Entry, target: function }
    }
    const fn exit(program: &'static str, function: &'static str) -> Self {
        Self { program, kind: AttachKind::Exit, target: function }
    }

    /// How `check` names it.
    pub fn describe(&self) -> String {
        match self.kind {
            AttachKind::TracePoint => format!("tracepoint {} (tp_btf)", self.target),
            AttachKind::Entry => format!("function {} (fentry)", self.target),
            AttachKind::Exit => format!("function {} (fexit)", self.target),
        }
    }
}

/// Required: scheduler, thread life, connection life.
pub const CORE_HOOKS: &[Hook] = &[
    Hook::tp("sched_switch"),
    Hook::tp("sched_waking"),
    Hook::tp("sched_process_fork"),
    Hook::tp("sched_process_exit"),
    Hook::tp("inet_sock_set_state"),
    Hook::tp("tcp_retransmit_skb"),
    Hook::tp("tcp_receive_reset"),
    Hook::tp("tcp_send_reset"),
];

/// A hook one capability needs and older kernels lack: without it the daemon runs the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalHook {
    pub hook: Hook,
    /// What it gives, and what is lost without it.
    pub capability: &'static str,
    pub consequence: &'static str,
}

/// `sk_data_ready` is 6.5 and later.
pub const OPTIONAL_HOOKS: &[OptionalHook] = &[OptionalHook {
    hook: Hook::tp("sk_data_ready"),
    capability: "socket queue wait",
    consequence: "how long request bytes waited unread in open connections is unknown (RequestQueueing \
                  sees the accept queue only), and stalled flows lack their last-receive time",
}];

/// The bytes of socket transfers, from the socket layer's tracepoints (6.5 and later).
pub const SOCKET_TRACEPOINT_HOOKS: &[Hook] = &[Hook::tp("sock_recv_length"), Hook::tp("sock_send_length")];

/// The continuation programs of the socket tracepoints' HTTP/2 walks: (program, tracepoint, the
/// program array it tail-calls through). Loaded, never attached: the tracepoint's program hands a
/// walk past its 32 frames on to them (`h2_continue.rs` in the kernel programs).
pub const WALK_CONTINUATIONS: &[(&str, &str, &str)] = &[
    ("sock_recv_length_more", "sock_recv_length", "H2_RECV_MORE"),
    ("sock_send_length_more", "sock_send_length", "H2_SEND_MORE"),
];

/// The same from TCP's own functions, where those tracepoints are missing.
pub const TCP_FUNCTION_HOOKS: &[Hook] = &[
    Hook::entry("tcp_recvmsg_enter", "tcp_recvmsg"),
    Hook::exit("tcp_recvmsg_exit", "tcp_recvmsg"),
    Hook::entry("tcp_sendmsg_enter", "tcp_sendmsg"),
    Hook::exit("tcp_sendmsg_exit", "tcp_sendmsg"),
];

/// Every program the daemon may attach.
pub fn all_hooks() -> impl Iterator<Item = &'static Hook> {
    CORE_HOOKS
        .iter()
        .chain(OPTIONAL_HOOKS.iter().map(|o| &o.hook))
        .chain(SOCKET_TRACEPOINT_HOOKS)
        .chain(TCP_FUNCTION_HOOKS)
}

/// Where the bytes of socket transfers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataHooks {
    SocketTracepoints,
    TcpFunctions,
}

impl DataHooks {
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Self::SocketTracepoints => SOCKET_TRACEPOINT_HOOKS,
            Self::TcpFunctions => TCP_FUNCTION_HOOKS,
        }
    }

    /// How `check` and the startup line name it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::SocketTracepoints => "socket tracepoints (sock_recv_length, sock_send_length)",
            Self::TcpFunctions => "TCP functions (fentry/fexit tcp_recvmsg, tcp_sendmsg)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_is_listed_once() {
        let mut names: Vec<_> = all_hooks().map(|h| h.program).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
    }

    #[test]
    fn each_walk_continuation_runs_on_a_socket_tracepoint() {
        for (program, tracepoint, _) in WALK_CONTINUATIONS {
            assert!(SOCKET_TRACEPOINT_HOOKS.iter().any(|h| h.target == *tracepoint), "{program}");
            assert!(all_hooks().all(|h| h.program != *program), "{program} is never attached");
        }
    }

    #[test]
    fn no_hook_on_the_syscall_path() {
        assert!(all_hooks().all(|h| !h.target.starts_with("sys_")));
    }
}
