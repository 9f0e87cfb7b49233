//! Which syscall a thread is in, read from the registers it entered the kernel with
//! (`bpf_task_pt_regs`: `orig_ax` holds the syscall number for as long as the syscall runs, the
//! argument registers its arguments). No hook runs on the syscall path, so no process on the
//! host pays for one; the registers are read only where a target thread is already in hand: when
//! it goes to sleep, when the socket layer reports its transfer, when it wakes one of ours.

use aya_ebpf::helpers::generated::{bpf_get_current_task_btf, bpf_task_pt_regs};
use gateway_observer_common::{ThreadState, futex_op_waits, syscall_class};

use crate::maps::{SYSCALL_CLASS, btf_field, config};

/// The syscall a task is in, as its saved registers tell.
#[derive(Clone, Copy)]
pub struct Call {
    pub nr: i64,
    pub regs: *const u8,
}

impl Call {
    /// The call of `task`, a BTF `task_struct` pointer.
    #[inline(always)]
    pub fn of_task(task: *const u8) -> Self {
        // SAFETY: `task` is a BTF task_struct pointer; the helper returns a pointer to that task's
        // saved user registers, which the verifier types as pt_regs.
        let regs = unsafe { bpf_task_pt_regs(task as *mut _) } as *const u8;
        Self { nr: btf_field(regs, config().regs_syscall_nr_offset), regs }
    }

    /// The call of the current task.
    #[inline(always)]
    pub fn current() -> Self {
        // SAFETY: a helper without arguments; it returns the current task as a trusted pointer.
        Self::of_task(unsafe { bpf_get_current_task_btf() } as *const u8)
    }

    /// `SYSCALL_CLASS` of the call: class (low bits) and data shape (high bits).
    #[inline(always)]
    pub fn packed_class(&self) -> u8 {
        if (0..gateway_observer_common::MAX_SYSCALL_NR as i64).contains(&self.nr) {
            SYSCALL_CLASS.get(self.nr as u32).copied().unwrap_or(syscall_class::NONE)
        } else {
            syscall_class::NONE
        }
    }

    #[inline(always)]
    pub fn class(&self) -> u8 {
        self.packed_class() & syscall_class::CLASS_MASK
    }

    #[inline(always)]
    pub fn arg(&self, offset: u32) -> u64 {
        btf_field(self.regs, offset)
    }

    #[inline(always)]
    pub fn arg0(&self) -> u64 {
        self.arg(config().regs_arg0_offset)
    }

    /// Whether this is the call the thread last slept in: the same syscall on the same first
    /// argument (futex word, fd).
    #[inline(always)]
    pub fn is_the_sleep_of(&self, state: &ThreadState) -> bool {
        self.nr == state.syscall_nr as i64 && self.arg0() == state.syscall_arg0
    }
}

/// A target thread goes to sleep in `call`: note it and the arguments its off-CPU reason needs.
/// Returns the syscall class.
#[inline(always)]
pub fn note_sleeping_call(state: &mut ThreadState, call: &Call) -> u8 {
    let class = call.class();
    let cfg = config();
    // Of futex ops only waits block; their timeout argument tells a timed wait (Thread.sleep,
    // parkNanos, a timed get) from a lock or condition wait.
    let timeout = match class {
        syscall_class::FUTEX if futex_op_waits(call.arg(cfg.regs_arg1_offset)) => call.arg(cfg.regs_arg3_offset),
        syscall_class::FUTEX_WAIT2 => call.arg(cfg.regs_arg4_offset),
        syscall_class::FUTEX_WAITV => call.arg(cfg.regs_arg3_offset),
        _ => 0,
    };
    state.syscall_nr = call.nr as i32;
    state.syscall_class = class;
    state.syscall_arg0 = call.arg0();
    state.futex_timed = (timeout != 0) as u8;
    class
}

/// Whether the current task is inside a futex call on `uaddr` (its first futex word, or the
/// second of a wake-op or requeue): a wakeup it makes of a thread waiting there is a futex wake.
/// A timer that ends a timed wait wakes it from interrupt context, where the interrupted task is
/// almost never in a futex call on that very word (it may well be in one on another: a busy
/// process's threads wake each other all the time).
#[inline(always)]
pub fn current_wakes_futex(uaddr: u64) -> bool {
    let call = Call::current();
    match call.class() {
        syscall_class::FUTEX => call.arg0() == uaddr || call.arg(config().regs_arg4_offset) == uaddr,
        // futex_wake and futex_wait (futex2) share a class; only the wake wakes anyone.
        syscall_class::FUTEX_WAIT2 => call.arg0() == uaddr,
        _ => false,
    }
}
