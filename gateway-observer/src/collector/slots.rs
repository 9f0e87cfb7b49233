//! Reading a thread's kernel slot: what it is doing now, its name at exit, its totals with the
//! span it is in, and the clock the kernel stamps events with.

use gateway_observer_common::{ThreadState, reason};

/// The state of a thread off the CPU in work (sleep, socket, I/O, disk), not waiting for it.
pub(super) const BLOCKED: &str = "blocked";

/// What a thread is doing right now, from its slot: on CPU, waiting for a CPU, waiting for work
/// (futex, timed futex, poll: the pool detector's idea of idle), or blocked in work.
pub(super) fn thread_state_label(state: &ThreadState) -> &'static str {
    if state.offcpu_start_ns == 0 {
        "running"
    } else if state.offcpu_reason == reason::RUNQUEUE || state.wakeup_ns != 0 {
        "runnable"
    } else if matches!(state.offcpu_reason, reason::FUTEX | reason::FUTEX_TIMED | reason::POLL) {
        "idle"
    } else {
        BLOCKED
    }
}

/// The name the kernel recorded when the thread exited, if it has.
pub(super) fn exit_name(state: &ThreadState) -> Option<String> {
    let len = state.exit_comm.iter().position(|b| *b == 0).unwrap_or(state.exit_comm.len());
    (state.exited != 0 && len > 0).then(|| String::from_utf8_lossy(&state.exit_comm[..len]).into_owned())
}

/// The thread's off-CPU totals including the span it is in right now, which the kernel only adds
/// at switch-in: a thread stuck for minutes must count as stuck while it is stuck. Reading a slot
/// while the kernel closes a span can see the span in neither place: a detector's next window
/// absorbs that, and the exported counters ignore a value lower than the last
/// (`ThreadCounters::observe`).
pub(super) fn with_open_span(state: &ThreadState, now_mono: u64) -> [u64; reason::COUNT as usize] {
    let mut totals = state.offcpu_ns;
    let start = state.offcpu_start_ns;
    if start == 0 || now_mono <= start {
        return totals;
    }
    let (wait, runqueue) = gateway_observer_common::split_span(state.offcpu_reason, start, state.wakeup_ns, now_mono);
    if let Some(slot) = totals.get_mut(state.offcpu_reason as usize) {
        *slot += wait;
    }
    totals[reason::RUNQUEUE as usize] += runqueue;
    totals
}

#[cfg(test)]
mod tests {
    use gateway_observer_common::{ThreadState, reason};

    use super::with_open_span;

    #[test]
    fn thread_states_from_slots() {
        use super::thread_state_label;
        let mut state = ThreadState { tid: 1, tgid: 1, ..ThreadState::default() };
        assert_eq!(thread_state_label(&state), "running");
        state.offcpu_start_ns = 5;
        state.offcpu_reason = reason::SLEEP;
        assert_eq!(thread_state_label(&state), "blocked");
        state.offcpu_reason = reason::FUTEX_TIMED;
        assert_eq!(thread_state_label(&state), "idle");
        state.wakeup_ns = 9;
        assert_eq!(thread_state_label(&state), "runnable");
    }

    #[test]
    fn an_open_span_counts_up_to_now_and_splits_at_the_wakeup() {
        let mut state = ThreadState { tid: 1, tgid: 1, ..ThreadState::default() };
        state.offcpu_ns[reason::SLEEP as usize] = 100;
        assert_eq!(with_open_span(&state, 5_000), state.offcpu_ns, "on CPU: nothing open");
        state.offcpu_start_ns = 1_000;
        state.offcpu_reason = reason::FUTEX_TIMED;
        let open = with_open_span(&state, 5_000);
        assert_eq!(open[reason::FUTEX_TIMED as usize], 4_000);
        assert_eq!(open[reason::SLEEP as usize], 100);
        state.wakeup_ns = 4_000;
        let split = with_open_span(&state, 5_000);
        assert_eq!(split[reason::FUTEX_TIMED as usize], 3_000);
        assert_eq!(split[reason::RUNQUEUE as usize], 1_000);
    }
}
