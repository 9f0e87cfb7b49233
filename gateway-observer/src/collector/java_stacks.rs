//! Java frames in the evidence of alerts on HotSpot JVMs: an EventLoopBlocked or PoolSaturated
//! finding asks for a thread dump (on the dump worker) at its first tick, while its alert is
//! pending (1 s before it fires), and its findings carry the dump once it is back (`java_stack`,
//! `waiting_at`), from the next tick on: by the time the alert fires. The tick never waits on a
//! JVM.
//!
//! A dump is one sample: a loop that blocks part of the time may be caught idle in its selector,
//! between two waits. A loop's request takes up to [`DUMPS_PER_ASK`] dumps a few tens of
//! milliseconds apart (`worker`) and keeps the first that caught the loop elsewhere.
//!
//! An alert asks at most once a minute. Its stack lives as long as its finding: a finding gone for
//! [`GONE_AFTER`] (a pending alert that never fired, an alert that resolved) leaves no stack behind
//! for the next alert of the same id. A shorter gap is the same alert (a detector's finding may
//! miss a tick while its alert keeps firing), which keeps its stack.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::{
    alerts::Finding,
    api::v1::JavaDump,
    jvm_attach::{
        dump::JavaThread,
        idle, summary,
        worker::{DumpRequest, DumpWorker},
    },
};

/// An alert asks for a dump at most this often.
const DUMP_EVERY: Duration = Duration::from_secs(60);
/// Dumps one ask of a blocked loop may take: the first, and more while they catch it idle.
pub const DUMPS_PER_ASK: usize = 3;
/// A finding absent this long is over: the alert book resolves a firing alert absent 5 s
/// (`LifecycleConfig::resolve_after`), and a detector's 5 s window forgets a condition by then.
const GONE_AFTER: Duration = Duration::from_secs(5);

/// A JVM's last dump, when it came back and what it was asked for.
#[derive(Debug)]
struct Dump {
    threads: Result<Vec<JavaThread>, String>,
    at: Instant,
    request: DumpRequest,
    /// Every dump of the request caught its loop idle in its selector.
    loop_idle: bool,
    dumps: usize,
}

/// One alert's dumps.
#[derive(Debug, Default)]
struct AlertDumps {
    /// When it last asked for a dump.
    asked: Option<Instant>,
    /// Since when its finding holds without a break: older dumps are not its evidence.
    since: Option<Instant>,
    /// The blocked loop's Java stack from a dump since `since` that caught it outside its selector.
    stack: Option<Vec<String>>,
    /// When its finding was last annotated.
    seen: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct JavaStacks {
    /// Thread dumps are on in the config.
    enabled: bool,
    /// Started at the first dump asked for: the daemon drops its capabilities after startup,
    /// which it can do only while it runs one thread. None: not yet, or it could not start.
    worker: Option<DumpWorker>,
    /// (pid, alert kind, subject) → its dumps.
    alerts: HashMap<(u32, String, String), AlertDumps>,
    /// pid → its last dump.
    dumps: HashMap<u32, Dump>,
}

impl JavaStacks {
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        if !enabled {
            self.worker = None;
        }
    }

    /// Takes the dumps finished since the last tick, forgets the stacks of findings that went
    /// away, and what is over two minutes old.
    pub fn collect(&mut self) {
        let now = Instant::now();
        if let Some(worker) = &self.worker {
            for done in worker.finished() {
                let threads = done.threads.map_err(|e| e.to_string());
                let pid = done.request.pid;
                match &threads {
                    Ok(threads) => {
                        tracing::debug!(pid, threads = threads.len(), dumps = done.dumps, took = ?done.took, "thread dump")
                    }
                    Err(why) => tracing::info!(pid, %why, "no thread dump of the JVM"),
                }
                let dump =
                    Dump { threads, at: now, request: done.request, loop_idle: done.loop_idle, dumps: done.dumps };
                self.dumps.insert(pid, dump);
            }
        }
        self.forget_gone(now);
    }

    /// Forgets the stacks of findings gone for [`GONE_AFTER`], and old dumps.
    fn forget_gone(&mut self, now: Instant) {
        let lately = |at: Option<Instant>, within: Duration| at.is_some_and(|at| now.duration_since(at) < within);
        // Gone findings keep only their last ask, for the rate limit.
        self.alerts.retain(|_, alert| lately(alert.seen, GONE_AFTER) || lately(alert.asked, DUMP_EVERY));
        for alert in self.alerts.values_mut().filter(|alert| !lately(alert.seen, GONE_AFTER)) {
            (alert.since, alert.stack) = (None, None);
        }
        self.dumps.retain(|_, dump| now.duration_since(dump.at) < DUMP_EVERY * 2);
    }

    /// Queues `request`; false if none could be queued.
    fn ask(&mut self, request: DumpRequest) -> bool {
        if self.enabled && self.worker.is_none() {
            self.worker = DumpWorker::start();
            if self.worker.is_none() {
                tracing::warn!("cannot start the thread-dump worker: no Java frames in evidence");
                self.enabled = false;
            }
        }
        self.worker.as_ref().is_some_and(|worker| worker.request(request))
    }

    /// Java frames for `finding` (about JVM `pid`) from a dump taken since its finding holds, or
    /// asks for one. `tid` is the blocked thread (host tid) of an EventLoopBlocked, `pool` the
    /// thread group of a PoolSaturated.
    pub fn annotate(&mut self, finding: &Finding, tid: Option<u32>, pool: Option<&str>) -> JavaDump {
        let mut java = JavaDump::default();
        if !self.enabled {
            return java;
        }
        let pid = finding.pid;
        let key = (pid, finding.kind().to_string(), finding.subject.clone());
        let now = Instant::now();
        let mut alert = self.alerts.remove(&key).unwrap_or_default();
        alert.seen = Some(now);
        let since = *alert.since.get_or_insert(now);
        let loop_nid = tid.map(|tid| crate::host::procfs::namespace_pid(tid).unwrap_or(tid));
        let due = alert.asked.is_none_or(|at| now.duration_since(at) >= DUMP_EVERY);
        if due && finding.active {
            let dumps = if loop_nid.is_some() { DUMPS_PER_ASK } else { 1 };
            if self.ask(DumpRequest { pid, loop_nid, dumps }) {
                alert.asked = Some(now);
            }
        }
        if let Some(asked) = alert.asked {
            self.add_dump(pid, &mut java, &mut alert, asked.max(since), loop_nid, pool);
            if asked < since && java == JavaDump::default() && alert.stack.is_none() {
                let next = DUMP_EVERY.saturating_sub(now.duration_since(asked));
                java.unavailable = Some(format!(
                    "one thread dump per alert a minute: the last was for an earlier alert, the next in {}s",
                    next.as_secs()
                ));
            }
        }
        java.stack.clone_from(&alert.stack);
        self.alerts.insert(key, alert);
        java
    }

    /// Adds what the last dump of JVM `pid` says, if it came back `after`.
    fn add_dump(
        &self,
        pid: u32,
        java: &mut JavaDump,
        alert: &mut AlertDumps,
        after: Instant,
        loop_nid: Option<u32>,
        pool: Option<&str>,
    ) {
        let Some(dump) = self.dumps.get(&pid).filter(|dump| dump.at >= after) else { return };
        let threads = match &dump.threads {
            Ok(threads) => threads,
            Err(why) => {
                java.unavailable = Some(why.clone());
                return;
            }
        };
        if let Some(pool) = pool {
            let member = |t: &JavaThread| crate::thread_group::thread_group(summary::kernel_name(&t.name)) == pool;
            java.waiting_at = Some(summary::waiting_at(threads, member));
        }
        let Some(nid) = loop_nid else { return };
        if !threads.iter().any(|t| t.nid == nid && idle::in_selector(t)) {
            if let Some(frames) = summary::java_stack(threads, nid) {
                alert.stack = Some(frames);
            }
        } else if alert.stack.is_none() && dump.request.loop_nid == Some(nid) && dump.loop_idle {
            java.unavailable =
                Some(format!("{} thread dumps caught the loop idle in its selector, between two waits", dump.dumps));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jvm_attach::dump::parse;

    /// Real `jstack` dumps of one Netty JVM (see `testdata/jvm/README.md`): idle, then with loops
    /// 1 (nid 0x7891) and 4 blocked on a monitor while 2 and 3 are between two waits.
    const IDLE: &str = include_str!("../../testdata/jvm/netty-loops-idle.txt");
    const CONTENDED: &str = include_str!("../../testdata/jvm/netty-loops-contended-monitor.txt");
    /// No such process: the dumps the worker takes of it fail, and the tests hand theirs in.
    const PID: u32 = 4_000_000;

    fn blocked_loop(active: bool) -> Finding {
        let found = crate::detect::evidence_golden::blocked(None, None);
        let finding = crate::detect::event_loop::finding(&found, &Default::default());
        Finding { pid: PID, subject: "reactor-http-ni".into(), active, ..finding }
    }

    /// The request for loop `nid` comes back with `text`, its dumps all having caught the loop
    /// idle if `idle`.
    fn back(stacks: &mut JavaStacks, text: &str, nid: u32, idle: bool) {
        let request = DumpRequest { pid: PID, loop_nid: Some(nid), dumps: DUMPS_PER_ASK };
        let dump =
            Dump { threads: Ok(parse(text)), at: Instant::now(), request, loop_idle: idle, dumps: DUMPS_PER_ASK };
        stacks.dumps.insert(PID, dump);
    }

    /// One tick's findings: the loop's, then what the next tick forgets.
    fn tick(stacks: &mut JavaStacks, finding: Option<&Finding>, nid: u32) -> JavaDump {
        let java = finding.map(|f| stacks.annotate(f, Some(nid), None)).unwrap_or_default();
        stacks.forget_gone(Instant::now());
        java
    }

    fn asks(stacks: &JavaStacks) -> Vec<Instant> {
        stacks.alerts.values().filter_map(|alert| alert.asked).collect()
    }

    fn started() -> JavaStacks {
        let mut stacks = JavaStacks::default();
        stacks.set_enabled(true);
        let java = tick(&mut stacks, Some(&blocked_loop(true)), 0x7891);
        assert_eq!(asks(&stacks).len(), 1, "a pending alert asks for a dump at its first tick");
        assert_eq!(java, JavaDump::default());
        stacks
    }

    #[test]
    fn the_dump_asked_while_pending_is_the_evidence_at_the_next_tick() {
        let mut stacks = started();
        let asked = asks(&stacks);
        back(&mut stacks, CONTENDED, 0x7891, false);
        let java = tick(&mut stacks, Some(&blocked_loop(true)), 0x7891);
        let stack = java.stack.expect("the stack of a loop caught blocked");
        assert_eq!(stack[0], "NettyGateway$Handler.channelRead0(NettyGateway.java:181)", "{stack:#?}");
        assert_eq!(stack[1], "- waiting to lock Object");
        // A later dump, asked by another alert on the JVM, catches the loop idle: the stack stays.
        back(&mut stacks, IDLE, 0x7892, false);
        let java = tick(&mut stacks, Some(&blocked_loop(true)), 0x7891);
        assert_eq!(java.stack, Some(stack));
        assert_eq!(asks(&stacks), asked, "one ask a minute");
    }

    #[test]
    fn a_request_whose_dumps_all_caught_the_loop_idle_says_so() {
        let mut stacks = started();
        // Loop 2 (nid 0x7892) is idle in both dumps.
        back(&mut stacks, CONTENDED, 0x7892, true);
        let java = tick(&mut stacks, Some(&blocked_loop(true)), 0x7892);
        assert!(java.stack.is_none(), "an idle loop's stack is no evidence: {java:?}");
        let why = java.unavailable.unwrap_or_default();
        assert!(why.contains(&format!("{DUMPS_PER_ASK} thread dumps caught the loop idle")), "{why}");
    }

    #[test]
    fn an_inactive_finding_asks_for_nothing() {
        let mut stacks = JavaStacks::default();
        stacks.set_enabled(true);
        assert_eq!(tick(&mut stacks, Some(&blocked_loop(false)), 0x7891), JavaDump::default());
        assert!(asks(&stacks).is_empty());
        stacks.set_enabled(false);
        assert_eq!(tick(&mut stacks, Some(&blocked_loop(true)), 0x7891), JavaDump::default());
        assert!(asks(&stacks).is_empty() && stacks.worker.is_none(), "thread dumps off: no dump, no worker");
    }

    #[test]
    fn a_pending_alert_that_goes_away_leaves_no_stack_behind() {
        let mut stacks = started();
        back(&mut stacks, CONTENDED, 0x7891, false);
        assert!(tick(&mut stacks, Some(&blocked_loop(true)), 0x7891).stack.is_some());
        // The finding misses a tick while its alert fires: the same alert, the same stack.
        tick(&mut stacks, None, 0x7891);
        assert!(tick(&mut stacks, Some(&blocked_loop(true)), 0x7891).stack.is_some(), "a one-tick gap");
        // The finding goes away before its alert fired: the stack goes with it.
        for alert in stacks.alerts.values_mut() {
            alert.seen = alert.seen.and_then(|at| at.checked_sub(GONE_AFTER));
        }
        tick(&mut stacks, None, 0x7891);
        assert!(stacks.alerts.values().all(|alert| alert.stack.is_none()), "{:?}", stacks.alerts);
        // Back within the minute: the old dump is not its evidence, and no new one is taken.
        let java = tick(&mut stacks, Some(&blocked_loop(true)), 0x7891);
        assert!(java.stack.is_none(), "{java:?}");
        assert!(java.unavailable.is_some_and(|why| why.contains("one thread dump per alert a minute")));
        assert_eq!(asks(&stacks).len(), 1);
        // A dump another alert asks for since then is.
        back(&mut stacks, CONTENDED, 0x7894, false);
        assert!(tick(&mut stacks, Some(&blocked_loop(true)), 0x7891).stack.is_some());
        // A minute after its ask, the alert asks again.
        for alert in stacks.alerts.values_mut() {
            alert.asked = alert.asked.and_then(|at| at.checked_sub(DUMP_EVERY));
        }
        let before = asks(&stacks);
        tick(&mut stacks, Some(&blocked_loop(true)), 0x7891);
        assert_ne!(asks(&stacks), before, "asked again");
    }
}
