//! Which kernel hooks the programs attach to, and the two paths they form (ARCHITECTURE.md,
//! "Kernel hook plan"). By default no hook runs on the syscall path: the syscall a thread sleeps
//! in is read from its registers at `sched_switch`, and the calls that matter are hooked on the
//! kernel functions themselves (fentry/fexit), which only their callers pay for. Where those
//! cannot attach, the raw syscall tracepoints take their place, at a cost to every syscall on
//! the host.

use serde::Deserialize;

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

/// Attached on every path: scheduler, thread life, connection life.
pub const CORE_HOOKS: &[Hook] = &[
    Hook::tp("sched_switch"),
    Hook::tp("sched_wakeup"),
    Hook::tp("sched_process_fork"),
    Hook::tp("sched_process_exit"),
    Hook::tp("sk_data_ready"),
    Hook::tp("inet_sock_set_state"),
    Hook::tp("tcp_retransmit_skb"),
    Hook::tp("tcp_receive_reset"),
    Hook::tp("tcp_send_reset"),
];

/// The default path: the blocking, polling and TCP functions, hooked where only callers pay.
pub const FUNCTION_HOOKS: &[Hook] = &[
    Hook::exit("futex_wait_exit", "futex_wait"),
    Hook::exit("futex_wait_multiple_exit", "futex_wait_multiple"),
    Hook::exit("do_nanosleep_exit", "do_nanosleep"),
    Hook::entry("do_epoll_wait_enter", "do_epoll_wait"),
    Hook::exit("do_epoll_wait_exit", "do_epoll_wait"),
    Hook::entry("do_sys_poll_enter", "do_sys_poll"),
    Hook::exit("do_sys_poll_exit", "do_sys_poll"),
    Hook::entry("core_sys_select_enter", "core_sys_select"),
    Hook::exit("core_sys_select_exit", "core_sys_select"),
    Hook::entry("tcp_recvmsg_enter", "tcp_recvmsg"),
    Hook::exit("tcp_recvmsg_exit", "tcp_recvmsg"),
    Hook::entry("tcp_sendmsg_enter", "tcp_sendmsg"),
    Hook::exit("tcp_sendmsg_exit", "tcp_sendmsg"),
];

/// The fallback path: every syscall of every process runs these.
pub const SYSCALL_HOOKS: &[Hook] =
    &[Hook::tp("sys_enter"), Hook::tp("sys_exit"), Hook::tp("sock_recv_length"), Hook::tp("sock_send_length")];

/// Every program the daemon may attach.
pub fn all_hooks() -> impl Iterator<Item = &'static Hook> {
    CORE_HOOKS.iter().chain(FUNCTION_HOOKS).chain(SYSCALL_HOOKS)
}

/// Which path is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPath {
    Functions,
    Syscalls,
}

impl HookPath {
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Self::Functions => FUNCTION_HOOKS,
            Self::Syscalls => SYSCALL_HOOKS,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Functions => "functions",
            Self::Syscalls => "syscalls",
        }
    }

    /// What it costs the host, for `check` and the startup line.
    pub fn cost(self) -> &'static str {
        match self {
            Self::Functions => "kernel functions (fentry/fexit): only callers of the hooked functions pay",
            Self::Syscalls => "syscall tracepoints (fallback): every syscall of every process on the host pays",
        }
    }
}

/// The `hooks` setting: `auto` takes the function hooks and falls back to the syscall
/// tracepoints where one of them cannot attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookChoice {
    #[default]
    Auto,
    Functions,
    Syscalls,
}

impl std::str::FromStr for HookChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "functions" => Ok(Self::Functions),
            "syscalls" => Ok(Self::Syscalls),
            other => Err(format!("hooks {other:?}: expected auto, functions or syscalls")),
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
    fn no_syscall_hook_on_the_default_path() {
        assert!(CORE_HOOKS.iter().chain(FUNCTION_HOOKS).all(|h| !h.target.starts_with("sys_")));
    }

    #[test]
    fn choice_parses_and_rejects_garbage() {
        assert_eq!("syscalls".parse::<HookChoice>(), Ok(HookChoice::Syscalls));
        assert!("fentry".parse::<HookChoice>().is_err());
    }
}
