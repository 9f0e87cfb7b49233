//! How a timed futex wait ended, and the user stack of a call that blocked long, both without a
//! hook on the syscall path.

use aya_ebpf::programs::tracing::StackIdContext;
use gateway_observer_common::{Event, ThreadState, drop_index, event_kind};

use crate::{
    maps::{STACKS, count_drop, current_ids, emit, now_ns},
    syscalls::Call,
};

/// `bpf_get_stackid` flag: the user-space stack.
const BPF_F_USER_STACK: u64 = 1 << 8;

/// A timed futex wait on `uaddr` that lasted `waited_ns` ended, by its timeout or woken. How it
/// ended tells how the thread's next wait on that word is counted (`FUTEX_SLEEP` after a
/// timeout), and, counted, how its thread group's timed waits end.
#[inline(always)]
pub fn timed_wait_ended(state: &mut ThreadState, uaddr: u64, timed_out: bool, waited_ns: u64) {
    if timed_out {
        state.futex_sleep_uaddr = uaddr;
        state.futex_timeout_ns += waited_ns;
    } else {
        if state.futex_sleep_uaddr == uaddr {
            state.futex_sleep_uaddr = 0;
        }
        state.futex_woken_ns += waited_ns;
    }
}

/// Captures the current user stack for the thread's last long block. The caller has checked
/// that the current call is the one that blocked, so the stack is the blocking call's caller.
#[inline(always)]
pub fn take_stack<C: StackIdContext>(ctx: &C, state: &mut ThreadState) {
    state.stack_wanted = 0;
    match ctx.get_stackid(&STACKS, BPF_F_USER_STACK) {
        Ok(id) => emit(Event {
            kind: event_kind::BLOCK_STACK,
            tid: current_ids().0,
            tgid: state.tgid,
            reason: id as u32,
            timestamp_ns: now_ns(),
            ..Event::default()
        }),
        Err(_) => count_drop(drop_index::STACKS_FULL),
    }
}

/// In the current call's context (a transfer ending): if it is the call that last blocked long,
/// take its stack now.
#[inline(always)]
pub fn stack_if_same_call<C: StackIdContext>(ctx: &C, state: &mut ThreadState, call: &Call) {
    if state.stack_wanted != 0 && call.is_the_sleep_of(state) {
        take_stack(ctx, state);
    }
}
