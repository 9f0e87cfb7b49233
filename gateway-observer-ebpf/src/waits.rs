//! The ends of blocking calls, hooked on the kernel functions that block (fexit): how a timed
//! futex wait ended, and the user stack of a call that blocked long. Only callers of these
//! functions pay, and a thread that is not ours returns after one array lookup.

use aya_ebpf::{
    helpers::generated::{bpf_get_current_task_btf, bpf_task_pt_regs},
    macros::fexit,
    programs::{FExitContext, tracing::StackIdContext},
};
use gateway_observer_common::{Event, ThreadState, event_kind};

use crate::maps::{STACKS, btf_field, config, current_ids, emit, now_ns, thread_state};

/// `bpf_get_stackid` flag: the user-space stack.
const BPF_F_USER_STACK: u64 = 1 << 8;
const ETIMEDOUT: i64 = 110;

/// futex_wait(u32 __user *uaddr, unsigned int flags, u32 val, ktime_t *abs_time, u32 bitset):
/// FUTEX_WAIT and FUTEX_WAIT_BITSET, the waits of every lock, condition and park.
#[fexit(function = "futex_wait")]
pub fn futex_wait_exit(ctx: FExitContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    stack_if_wanted(&ctx, state, tid);
    let abs_time: u64 = ctx.arg(3);
    if abs_time != 0 {
        let ret: i32 = ctx.arg(5);
        timed_wait_ended(state, ctx.arg(0), i64::from(ret));
    }
    state.futex_timed_pending_ns = 0;
    0
}

/// futex_wait_multiple(struct futex_vector *vs, unsigned int count, struct hrtimer_sleeper *to):
/// futex_waitv. Its outcome is not followed (no runtime of ours uses it); its time is let go.
#[fexit(function = "futex_wait_multiple")]
pub fn futex_wait_multiple_exit(ctx: FExitContext) -> u32 {
    let (tid, _) = current_ids();
    let Some(state) = thread_state(tid) else { return 0 };
    stack_if_wanted(&ctx, state, tid);
    state.futex_timed_pending_ns = 0;
    0
}

/// do_nanosleep(struct hrtimer_sleeper *t, enum hrtimer_mode mode): nanosleep, clock_nanosleep.
#[fexit(function = "do_nanosleep")]
pub fn do_nanosleep_exit(ctx: FExitContext) -> u32 {
    let (tid, _) = current_ids();
    if let Some(state) = thread_state(tid) {
        stack_if_wanted(&ctx, state, tid);
    }
    0
}

/// A timed futex wait on `uaddr` returned `ret`. How it ended tells how the thread's next wait
/// on that word is counted (`FUTEX_SLEEP` after a timeout), and, counted, how its thread
/// group's timed waits end.
#[inline(always)]
pub fn timed_wait_ended(state: &mut ThreadState, uaddr: u64, ret: i64) {
    let waited = state.futex_timed_pending_ns;
    if ret == -ETIMEDOUT {
        state.futex_sleep_uaddr = uaddr;
        state.futex_timeout_ns += waited;
    } else if ret == 0 {
        if state.futex_sleep_uaddr == uaddr {
            state.futex_sleep_uaddr = 0;
        }
        state.futex_woken_ns += waited;
    }
}

/// At the exit of a blocking function: if the call that just blocked long is this one (the
/// syscall in the thread's registers is the one it slept in), its user stack is the blocking
/// call's caller. Only after long blocks, so the cost stays off the hot path.
#[inline(always)]
pub fn stack_if_wanted<C: StackIdContext>(ctx: &C, state: &mut ThreadState, tid: u32) {
    if state.stack_wanted == 0 {
        return;
    }
    // SAFETY: helpers without side effects; the current task is a trusted BTF pointer.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const u8;
    let cfg = config();
    let nr: i64 = btf_field(regs, cfg.regs_syscall_nr_offset);
    let arg0: u64 = btf_field(regs, cfg.regs_arg0_offset);
    if nr == state.syscall_nr as i64 && arg0 == state.syscall_arg0 {
        take_stack(ctx, state, tid);
    }
}

/// Captures the current user stack for the thread's last long block.
#[inline(always)]
pub fn take_stack<C: StackIdContext>(ctx: &C, state: &mut ThreadState, tid: u32) {
    state.stack_wanted = 0;
    if let Ok(id) = ctx.get_stackid(&STACKS, BPF_F_USER_STACK) {
        emit(Event {
            kind: event_kind::BLOCK_STACK,
            tid,
            tgid: state.tgid,
            reason: id as u32,
            timestamp_ns: now_ns(),
            ..Event::default()
        });
    }
}
