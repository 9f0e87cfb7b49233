//! Off-CPU spans of target threads: `sched_switch` opens and closes them, `sched_waking` splits
//! them into the wait itself and the run-queue delay that follows. A thread that goes to sleep
//! has the syscall it sleeps in read from its registers there, for the span's reason.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use gateway_observer_common::{
    Event, ThreadState, block_detail, drop_index, event_kind, reason, reason_for_syscall, split_span, syscall_class,
};

use crate::{
    loop_iterations::{end_iteration, iteration_starts, vote_home_epoll},
    maps::{BLOCK_DETAIL, btf_field, config, count_drop, current_ids, emit, hist_add, now_ns, thread_state},
    syscalls::{Call, current_wakes_futex, note_sleeping_call},
    waits::{take_stack, timed_wait_ended},
};

/// `TASK_UNINTERRUPTIBLE` in `prev_state`.
const TASK_UNINTERRUPTIBLE: u32 = 0x2;

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> u32 {
    // `current` is still prev here, so its ids come from a helper, not from the struct.
    let (prev_tid, _) = current_ids();
    let next: *const u8 = ctx.arg(2);
    let next_tid: u32 = btf_field(next, config().task_pid_offset);
    let prev = if prev_tid == 0 { None } else { thread_state(prev_tid) };
    let next = if next_tid == 0 { None } else { thread_state(next_tid) };
    if prev.is_none() && next.is_none() {
        return 0; // the common case: neither thread is ours
    }
    let now = now_ns();
    if let Some(state) = prev {
        // A preempted thread is runnable whatever its state word says (it may be preempted
        // between setting TASK_INTERRUPTIBLE and calling schedule()).
        let preempt: u64 = ctx.arg(0);
        let prev_state: u32 = if preempt & 1 != 0 { 0 } else { ctx.arg(3) };
        if prev_state != 0 {
            going_to_sleep(&ctx, state, prev_tid, now);
        }
        switch_out(state, prev_state, now);
    }
    if let Some(state) = next {
        close_offcpu_span(state, next_tid, now);
    }
    0
}

/// sched_waking(struct task_struct *p): fires in the waker's context (sched_wakeup may fire later
/// on the wakee's CPU, from an interrupt, when the wakeup is queued there), so `current` is the
/// waker.
#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> u32 {
    let task: *const u8 = ctx.arg(0);
    let tid: u32 = btf_field(task, config().task_pid_offset);
    let Some(state) = thread_state(tid) else { return 0 };
    if state.offcpu_start_ns != 0 && state.wakeup_ns == 0 {
        state.wakeup_ns = now_ns();
        state.waker_tid = current_ids().0;
        if matches!(state.offcpu_reason, reason::FUTEX_TIMED | reason::FUTEX_SLEEP) {
            // A timed wait woken by a futex wake returns 0; one its timer wakes has timed out.
            state.woken_by_futex = current_wakes_futex(state.syscall_arg0) as u8;
        }
    }
    0
}

/// A target thread goes to sleep (`current` is still that thread): note the call it sleeps in.
/// Sleeping in a poll ends the loop's iteration; sleeping again in the call that last blocked
/// long is where that call's user stack is taken.
#[inline(always)]
fn going_to_sleep(ctx: &BtfTracePointContext, state: &mut ThreadState, tid: u32, now: u64) {
    let call = Call::of_task(ctx.arg(1));
    if state.stack_wanted != 0 {
        if call.is_the_sleep_of(state) {
            take_stack(ctx, state);
        } else {
            state.stack_wanted = 0; // another call's stack would not be that one's
        }
    }
    let class = note_sleeping_call(state, &call);
    if syscall_class::polls(class) {
        if class == syscall_class::EPOLL {
            vote_home_epoll(state, state.syscall_arg0 as u32);
        }
        end_iteration(state, tid, now);
        // No TLS library call waits for events: one still open here lost its return (entered
        // before its uretprobe was attached), and must not hide this thread's next transfers.
        state.tls_depth = 0;
        state.tls_shape = gateway_observer_common::data_shape::NONE;
    }
}

#[inline(always)]
fn switch_out(state: &mut ThreadState, prev_state: u32, now: u64) {
    if state.offcpu_start_ns != 0 {
        count_drop(drop_index::LOST_SPAN);
    }
    state.offcpu_start_ns = now;
    state.wakeup_ns = 0;
    state.waker_tid = 0;
    state.woken_by_futex = 0;
    state.offcpu_reason = offcpu_reason(state, prev_state);
}

/// The reason for the span that starts now. Preemption (still runnable) is run-queue time
/// whatever syscall the thread is in; D-state is disk; otherwise the syscall class decides.
#[inline(always)]
fn offcpu_reason(state: &ThreadState, prev_state: u32) -> u32 {
    if prev_state == 0 {
        return reason::RUNQUEUE;
    }
    if prev_state & TASK_UNINTERRUPTIBLE != 0 {
        return reason::DISK;
    }
    if state.syscall_class == syscall_class::EPOLL
        && state.home_epoll_votes > 0
        && state.syscall_arg0 != u64::from(state.home_epoll_fd)
    {
        return reason::POLL_OTHER;
    }
    let sleep_word = state.syscall_arg0 != 0 && state.syscall_arg0 == state.futex_sleep_uaddr;
    reason_for_syscall(state.syscall_class, state.futex_timed != 0, sleep_word)
}

/// Ends the thread's off-CPU span, at its switch-in.
#[inline(always)]
pub fn close_offcpu_span(state: &mut ThreadState, tid: u32, now: u64) {
    let start = state.offcpu_start_ns;
    state.offcpu_start_ns = 0;
    if start == 0 || now < start {
        return; // never opened, or clocks of two CPUs a hair apart: nothing to count
    }
    let span_reason = state.offcpu_reason;
    let (wait_ns, runqueue_ns) = split_span(span_reason, start, state.wakeup_ns, now);
    if let Some(total) = state.offcpu_ns.get_mut(span_reason as usize) {
        *total += wait_ns;
    }
    if runqueue_ns > 0 {
        state.offcpu_ns[reason::RUNQUEUE as usize] += runqueue_ns;
        hist_add(&mut state.runqueue_hist, runqueue_ns);
    }
    if matches!(span_reason, reason::FUTEX | reason::FUTEX_TIMED | reason::FUTEX_SLEEP) {
        // The futex wait as the thread lived it: blocked until it could run again.
        hist_add(&mut state.futex_hist, wait_ns + runqueue_ns);
        state.futex_wait_ns += wait_ns + runqueue_ns;
        if span_reason != reason::FUTEX && state.wakeup_ns != 0 {
            timed_wait_ended(state, state.syscall_arg0, state.woken_by_futex == 0, wait_ns);
        }
    }
    if matches!(span_reason, reason::POLL | reason::POLL_OTHER) {
        // Back from waiting for events: an event-loop iteration starts.
        iteration_starts(state, now);
    }
    // A loop idling in its own poll is no news: only its totals count (userspace never
    // looked at those events, and an idle host's loops sent thousands a second).
    if wait_ns >= config().block_threshold_ns && span_reason != reason::POLL {
        if let Some(count) = state.long_blocks.get_mut(span_reason as usize) {
            *count = count.wrapping_add(1);
        }
        let detail = |tid: u32| {
            // SAFETY: a plain value read of a map entry the program does not keep.
            unsafe { BLOCK_DETAIL.get(&tid) }.copied().unwrap_or(0)
        };
        if detail(tid) == block_detail::LOOP {
            state.stack_wanted = (state.syscall_nr >= 0) as u8;
        } else if state.waker_tid == 0 || detail(state.waker_tid) != block_detail::PAUSE_WAKER {
            return;
        }
        let futex_uaddr = match state.syscall_class {
            syscall_class::FUTEX | syscall_class::FUTEX_WAIT2 => state.syscall_arg0,
            _ => 0,
        };
        emit(Event {
            kind: event_kind::BLOCK,
            tid,
            tgid: state.tgid,
            reason: span_reason,
            syscall_nr: state.syscall_nr,
            waker_tid: state.waker_tid,
            wait_ns,
            runqueue_ns,
            futex_uaddr,
            timestamp_ns: now,
        });
    }
}
