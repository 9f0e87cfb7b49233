//! Each target thread's slot, once a tick: its totals folded into the exported counters, its open
//! loop iteration judged, and its slot freed once the thread is gone.

use super::*;

impl Collector {
    /// Folds one thread's cumulative totals into its (process, group, ...) counters, then frees
    /// the slot of a thread that is gone.
    pub(super) fn fold_thread(
        &mut self,
        slot: u32,
        state: &ThreadState,
        now: Instant,
        now_mono: u64,
    ) -> Result<(), ProbeError> {
        let tid = state.tid;
        let process = self.names.process(state.tgid).to_owned();
        let (group, thread_name) = match exit_name(state) {
            // Exited: its last name, from the kernel, even if /proc never showed it alive; the
            // distinct name it had while alive if it was named then.
            Some(name) => {
                let known = self.names.known(tid, state.tgid).filter(|k| k.kernel_name == name);
                let shown = known.map_or_else(|| name.clone(), |k| k.name.clone());
                (crate::thread_group::thread_group(&name), shown)
            }
            None => {
                let name = self.names.thread(tid, state.tgid);
                (name.group.clone(), name.name.clone())
            }
        };
        let totals = with_open_span(state, now_mono);
        self.observe_thread(state, &totals, &process, &group);
        if state.exited == 0 {
            let label = thread_state_label(state);
            *self.thread_states.entry((process.clone(), group.clone(), label)).or_insert(0) += 1;
            if label == BLOCKED {
                self.blocked_in_work.insert(tid);
            }
        }
        let info = ThreadInfo { tid, tgid: state.tgid, comm: process.clone(), name: thread_name, group: group.clone() };
        self.memory.note_process(state.tgid, || procfs::process_age(state.tgid), now);
        self.memory.record(now, info, totals);
        self.memory.note_timed_waits(tid, state.futex_timeout_ns, state.futex_woken_ns, now);
        self.note_open_iteration(state, &totals, now, now_mono);
        // An exit the hook saw, or a thread gone without it (exited before it had a slot: rare,
        // so looked for every few ticks only; a stat per thread per tick showed in profiles).
        if state.exited == 0 && (!self.collections.is_multiple_of(GONE_CHECK_TICKS) || procfs::exists(tid)) {
            return Ok(());
        }
        // `state` is a copy from the start of the tick: the thread may have finished a wait and
        // exited since. It can no longer run, so what the slot holds now is final: fold that.
        if let Some(last) = self.probes.thread_slot(slot).filter(|last| last.tid == tid) {
            self.observe_thread(&last, &last.offcpu_ns, &process, &group);
        }
        self.thread_counters.forget(tid);
        for code in BLOCKING_REASONS.into_iter().chain([reason::FUTEX]) {
            self.loop_blocked.forget(&(tid, code));
        }
        self.untimed_loop_ns.remove(&tid);
        crate::heap::shrink_sparse_map(&mut self.untimed_loop_ns);
        self.names.forget_thread(tid);
        self.memory.forget(tid);
        self.probes.release_thread(slot, tid)
    }

    /// An event-loop iteration still running past the busy threshold is judged now, not when it
    /// ends (a loop spinning forever never ends it).
    fn note_open_iteration(&mut self, state: &ThreadState, totals: &[u64], now: Instant, now_mono: u64) {
        let offcpu: u64 = totals.iter().fold(0u64, |sum, ns| sum.wrapping_add(*ns));
        let busy_ns = u64::try_from(self.detect.event_loop.busy_iteration.as_nanos()).unwrap_or(u64::MAX);
        let completed: u64 = state.iter_hist.iter().map(|n| u64::from(*n)).sum();
        if completed < MIN_ITERATIONS_BEFORE_OPEN || state.exited != 0 {
            return;
        }
        let open =
            open_iteration(state.tid, state.tgid, state.iter_start_ns, state.iter_offcpu_base_ns, offcpu, now_mono);
        if let Some(open) = open.filter(|it| it.on_cpu_ns >= busy_ns) {
            self.memory.keep_as_loop(state.tid, now, self.detect.event_loop.loop_memory);
            self.open_iterations.push(open);
        }
    }

    /// A thread the fork hook gave a slot while userspace was giving it one too (a target added
    /// while it creates threads) has two slots; only the one TRACKED points at is live. The other
    /// is freed unread, so the thread is neither counted twice nor seen as blocked forever.
    pub(super) fn drop_orphan_slots(&mut self, threads: &mut Vec<(u32, ThreadState)>) -> Result<(), ProbeError> {
        let mut slots_of: HashMap<u32, usize> = HashMap::new();
        for (_, state) in threads.iter() {
            *slots_of.entry(state.tid).or_insert(0) += 1;
        }
        if slots_of.len() == threads.len() {
            return Ok(()); // one slot each: the usual case
        }
        let mut orphans = Vec::new();
        for (slot, state) in threads.iter() {
            if slots_of[&state.tid] > 1 && self.probes.tracked_slot(state.tid)? != Some(*slot) {
                orphans.push((*slot, state.tid));
            }
        }
        for &(slot, tid) in &orphans {
            self.probes.release_thread(slot, tid)?;
        }
        threads.retain(|(slot, state)| !orphans.contains(&(*slot, state.tid)));
        Ok(())
    }

    /// `totals` are the thread's off-CPU totals with its open span (`with_open_span`): a thread
    /// stuck in one wait for minutes counts as stuck in the exported counters while it is stuck.
    fn observe_thread(
        &mut self,
        state: &ThreadState,
        totals: &[u64; reason::COUNT as usize],
        process: &str,
        group: &str,
    ) {
        let reading = Reading {
            offcpu_ns: totals,
            long_blocks: &state.long_blocks,
            hists: [&state.runqueue_hist, &state.futex_hist, &state.iter_hist],
            sums: [state.offcpu_ns[reason::RUNQUEUE as usize], state.futex_wait_ns, state.iter_on_cpu_ns],
        };
        // Labels are built only for what grew: a label is an allocation (it holds names).
        let (offcpu, long_blocks, hist_count, hist_sum) =
            (&mut self.offcpu, &mut self.long_blocks, &mut self.hist_count, &mut self.hist_sum);
        self.thread_counters.observe(state.tid, &reading, |growth| match growth {
            Growth::OffCpu { reason, ns } => offcpu.add((process.to_owned(), group.to_owned(), reason), ns),
            Growth::LongBlocks { reason, count } => {
                long_blocks.add((process.to_owned(), group.to_owned(), reason), count);
            }
            Growth::HistCount { kind, bucket, count } => {
                hist_count.add((process.to_owned(), HIST_KINDS[kind], bucket), count);
            }
            Growth::HistSum { kind, delta } => hist_sum.add((process.to_owned(), HIST_KINDS[kind]), delta),
        });
    }
}
