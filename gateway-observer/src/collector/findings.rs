//! What holds at the last tick, for the alert book: every detector's findings with the evidence only the
//! collector has (stacks, the requests clients saw meanwhile).

use super::{Collector, LIVE_STACK_FRAMES, STACK_FRAMES};
use crate::api::v1::{self, ClientRequests, StackSource};

impl Collector {
    /// What holds now, for the alert book. Blocked loops carry the stack of the blocked thread:
    /// unwound from userspace while it blocks (`stack_source` `live`), else the kernel's of its
    /// longest block (`kernel`). Saturated pools say where their threads wait (`waiting_at`). JVMs add
    /// Java frames from a thread dump (`java_stack`).
    /// Stacks are asked for here and come from the stack worker by the next tick.
    pub fn findings(&mut self) -> Vec<crate::alerts::Finding> {
        self.java_stacks.collect();
        let now = self.tick.at;
        self.live_stacks.collect(now);
        let mut blocked: Vec<crate::alerts::Finding> = Vec::new();
        for finding in &self.blocked_loops {
            let mut finding = finding.clone();
            let v1::Evidence::EventLoopBlocked(evidence) = &finding.evidence else { continue };
            let (pid, tid, syscall) = (finding.pid, evidence.tid, evidence.syscall.clone());
            if finding.active {
                self.live_stacks.ask(pid, &[tid], now);
            }
            let live = match syscall.as_deref() {
                Some(syscall) => self.live_stacks.stack_in(tid, syscall),
                None => self.live_stacks.stack(tid),
            };
            if let Some(frames) = live {
                finding.evidence.add_stack(frames[..frames.len().min(LIVE_STACK_FRAMES)].to_vec(), StackSource::Live);
            } else if let Some(ips) = finding.stack_id.and_then(|id| self.probes.user_stack(id)) {
                let frames = self.symbolizer.symbolize(pid, &ips);
                finding.evidence.add_stack(frames.into_iter().take(STACK_FRAMES).collect(), StackSource::Kernel);
            }
            if self.jvm.is_jvm(pid) {
                let java = self.java_stacks.annotate(&finding, Some(tid), None);
                finding.evidence.add_java_dump(java);
            }
            blocked.push(finding);
        }
        let mut pools = Vec::new();
        for finding in &self.saturated_pools {
            let mut finding = finding.clone();
            let v1::Evidence::PoolSaturated(evidence) = &finding.evidence else { continue };
            let (pid, group) = (finding.pid, evidence.thread_group.clone());
            // The threads blocked in work first: they are where the pool is stuck.
            let mut tids = self.memory.group_threads(pid, &group);
            tids.sort_by_key(|tid| (!self.blocked_in_work.contains(tid), *tid));
            tids.truncate(crate::stacks::MAX_THREADS);
            if finding.active {
                self.live_stacks.ask(pid, &tids, now);
            }
            let stacks = tids.iter().filter_map(|tid| self.live_stacks.stack(*tid));
            let waiting_at = crate::stacks::waiting_at(stacks);
            if !waiting_at.is_empty() {
                finding.evidence.add_waiting_at(waiting_at);
            }
            // A JVM's Java frames say more than its native ones (`Unsafe.park` in libjvm): they
            // replace the native `waiting_at` once a thread dump is in.
            if self.jvm.is_jvm(pid) {
                let java = self.java_stacks.annotate(&finding, None, Some(&group));
                finding.evidence.add_java_dump(java);
            }
            pools.push(finding);
        }
        let loops = blocked.into_iter();
        let pools = pools.into_iter();
        let busy = self.busy_loops.iter().cloned();
        let paused = self.paused_jvms.iter().cloned();
        let mut findings: Vec<crate::alerts::Finding> = loops.chain(busy).chain(pools).chain(paused).collect();
        self.add_client_impact(&mut findings);
        let peers = self.requests.peer_facts(self.tick.mono_ns);
        let upstream = &self.detect.upstream;
        findings.extend(crate::detect::upstream::upstream_no_response(&peers, upstream));
        findings.extend(crate::detect::upstream::one_way_stall(&peers, upstream));
        let queueing = &self.detect.queueing;
        findings.extend(crate::detect::queueing::request_queueing(&self.request_queues.last, &findings, queueing));
        let mut stalled = self.requests_stalled(&findings);
        self.add_client_impact(&mut stalled);
        findings.extend(stalled);
        findings
    }

    /// Processes whose read requests stall; `others` are this tick's other findings.
    fn requests_stalled(&self, others: &[crate::alerts::Finding]) -> Vec<crate::alerts::Finding> {
        let config = &self.detect.stalled;
        let mut facts = self.requests.stall_facts(self.tick.mono_ns, config.age_ns(), config.prompt_ns());
        for facts in &mut facts {
            facts.cpu_cores = self.cpu_cores.get(&facts.pid).copied();
            for waiting in &mut facts.waiting {
                waiting.reader_blocked_in_work = self.blocked_in_work.contains(&waiting.tid);
            }
        }
        crate::detect::stalled::requests_stalled(&facts, others, config)
    }

    /// What the process's clients went through during a finding's window: requests delayed in
    /// the socket (they waited while the loop was blocked) and refusals.
    fn add_client_impact(&self, findings: &mut [crate::alerts::Finding]) {
        let now = self.tick.mono_ns;
        let window = u64::try_from(self.detect.event_loop.window.as_nanos()).unwrap_or(u64::MAX);
        let since = now.saturating_sub(window);
        for finding in findings {
            let impact = self.requests.stats.impact_since(finding.pid, since);
            let in_flight = self
                .requests
                .in_flight(now)
                .remove(&finding.pid)
                .map(|(n, oldest)| (n, oldest.first().map(|r| r.age_seconds)));
            let requests = ClientRequests {
                window_seconds: window as f64 / 1e9,
                completed: impact.requests,
                delayed_in_socket: impact.delayed_in_socket,
                delayed_threshold_seconds: crate::state::requests::stats::DELAYED_QUEUE_NS as f64 / 1e9,
                max_socket_queue_seconds: impact.max_socket_queue_seconds,
                in_flight: in_flight.map_or(0, |(n, _)| n),
                oldest_in_flight_seconds: in_flight.and_then(|(_, age)| age),
            };
            finding.evidence.add_client_impact(requests, impact.refused);
        }
    }
}
