//! Java frames in the evidence of alerts on HotSpot JVMs: an EventLoopBlocked or PoolSaturated
//! finding asks for a thread dump (on the dump worker), and its findings carry the dump once it is
//! back (`java_stack`, `waiting_at`), from the next tick on. The tick never waits on a JVM.
//!
//! A dump is one sample: a loop that blocks part of the time may be caught idle in its selector,
//! between two waits. That stack is no evidence: the alert takes another dump a second later, up
//! to [`DUMPS_PER_WINDOW`] a minute, and keeps the first that caught the loop elsewhere.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::{
    alerts::Finding,
    api::v1::JavaDump,
    jvm_attach::{dump::JavaThread, idle, summary, worker::DumpWorker},
};

/// An alert's dumps are counted over this window; it takes a first one at most this often.
const DUMP_EVERY: Duration = Duration::from_secs(60);
/// Dumps an alert takes in one window at most: the first, and more while they catch its loop idle.
const DUMPS_PER_WINDOW: usize = 3;
/// A dump that caught the loop idle is followed by another no sooner than this after it was asked.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A dump and when it came back.
type Dump = (Result<Vec<JavaThread>, String>, Instant);

/// One alert's dumps.
#[derive(Debug, Default)]
struct AlertDumps {
    /// When it asked, within the last [`DUMP_EVERY`], oldest first.
    asked: Vec<Instant>,
    /// The blocked loop's Java stack from the first dump that caught it outside its selector, and
    /// when that dump was asked for.
    kept: Option<(Vec<String>, Instant)>,
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

    /// Takes the dumps finished since the last tick and forgets what is over two minutes old.
    pub fn collect(&mut self) {
        let Some(worker) = &self.worker else { return };
        let now = Instant::now();
        for done in worker.finished() {
            let threads = done.threads.map_err(|e| e.to_string());
            match &threads {
                Ok(threads) => {
                    tracing::debug!(pid = done.pid, threads = threads.len(), took = ?done.took, "thread dump")
                }
                Err(why) => tracing::info!(pid = done.pid, %why, "no thread dump of the JVM"),
            }
            self.dumps.insert(done.pid, (threads, now));
        }
        let recent = |at: &Instant| now.duration_since(*at) < DUMP_EVERY * 2;
        self.alerts.retain(|_, alert| alert.asked.last().is_some_and(recent));
        self.dumps.retain(|_, (_, at)| recent(at));
    }

    /// Queues a dump of `pid` for `alert`; false if none could be queued.
    fn ask(&mut self, pid: u32, alert: &mut AlertDumps, now: Instant) -> bool {
        if self.enabled && self.worker.is_none() {
            self.worker = DumpWorker::start();
            if self.worker.is_none() {
                tracing::warn!("cannot start the thread-dump worker: no Java frames in evidence");
                self.enabled = false;
            }
        }
        let asked = self.worker.as_ref().is_some_and(|worker| worker.request(pid));
        if asked {
            alert.asked.push(now);
        }
        asked
    }

    /// Java frames for `finding` (about JVM `pid`) from a dump taken since its alert asked, or
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
        alert.asked.retain(|at| now.duration_since(*at) < DUMP_EVERY);
        match alert.asked.last().copied() {
            None if finding.active => {
                self.ask(pid, &mut alert, now);
            }
            None => {}
            Some(asked) => self.add_dump(finding, &mut java, &mut alert, (asked, now), tid, pool),
        }
        if let Some((frames, _)) = &alert.kept {
            java.stack = Some(frames.clone());
        }
        self.alerts.insert(key, alert);
        java
    }

    /// Adds what the dump of `finding`'s JVM taken since `asked` says, if it is back; asks for
    /// another if it caught the blocked loop idle.
    fn add_dump(
        &mut self,
        finding: &Finding,
        java: &mut JavaDump,
        alert: &mut AlertDumps,
        (asked, now): (Instant, Instant),
        tid: Option<u32>,
        pool: Option<&str>,
    ) {
        let pid = finding.pid;
        let Some((dump, _)) = self.dumps.get(&pid).filter(|(_, at)| *at >= asked) else { return };
        let threads = match dump {
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
        let Some(tid) = tid else { return };
        let nid = crate::host::procfs::namespace_pid(tid).unwrap_or(tid);
        if !threads.iter().any(|t| t.nid == nid && idle::in_selector(t)) {
            // The first dump of this window to catch the loop elsewhere is kept.
            let kept_earlier = alert.kept.as_ref().is_none_or(|(_, kept_asked)| *kept_asked < alert.asked[0]);
            if let Some(frames) = summary::java_stack(threads, nid).filter(|_| kept_earlier) {
                alert.kept = Some((frames, asked));
            }
            return;
        }
        let kept_now = alert.kept.as_ref().is_some_and(|(_, kept_asked)| *kept_asked >= alert.asked[0]);
        if kept_now {
            return;
        }
        if alert.asked.len() < DUMPS_PER_WINDOW {
            if finding.active && now.duration_since(asked) >= RETRY_AFTER {
                self.ask(pid, alert, now);
            }
        } else if alert.kept.is_none() {
            java.unavailable = Some(format!(
                "{DUMPS_PER_WINDOW} thread dumps caught the loop idle in its selector, between two waits"
            ));
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

    fn blocked_loop() -> Finding {
        let found = crate::detect::evidence_golden::blocked(None, None);
        let finding = crate::detect::event_loop::finding(&found, &Default::default());
        Finding { pid: PID, subject: "reactor-http-ni".into(), ..finding }
    }

    /// The alert's dump of `text` comes back, its asks having been made `RETRY_AFTER` ago, and
    /// the tick annotates its finding.
    fn dump_back(stacks: &mut JavaStacks, text: &str, tid: u32) -> JavaDump {
        for alert in stacks.alerts.values_mut() {
            for at in &mut alert.asked {
                *at = at.checked_sub(RETRY_AFTER).expect("the clock is past a second");
            }
        }
        stacks.dumps.insert(PID, (Ok(parse(text)), Instant::now()));
        stacks.annotate(&blocked_loop(), Some(tid), None)
    }

    fn asked(stacks: &JavaStacks) -> usize {
        stacks.alerts.values().map(|alert| alert.asked.len()).sum()
    }

    fn started() -> JavaStacks {
        let mut stacks = JavaStacks::default();
        stacks.set_enabled(true);
        let java = stacks.annotate(&blocked_loop(), Some(0x7891), None);
        assert_eq!(asked(&stacks), 1, "a pending alert asks for a dump");
        assert_eq!(java, JavaDump::default());
        stacks
    }

    #[test]
    fn a_loop_caught_idle_is_dumped_again_and_the_first_dump_outside_its_wait_is_kept() {
        let mut stacks = started();
        let java = dump_back(&mut stacks, IDLE, 0x7891);
        assert!(java.stack.is_none(), "an idle loop's stack is no evidence: {java:?}");
        assert_eq!(asked(&stacks), 2, "caught idle: another dump");
        let java = dump_back(&mut stacks, CONTENDED, 0x7891);
        let stack = java.stack.expect("the stack of a loop caught blocked");
        assert_eq!(stack[0], "NettyGateway$Handler.channelRead0(NettyGateway.java:181)", "{stack:#?}");
        assert_eq!(stack[1], "- waiting to lock Object");
        assert_eq!(asked(&stacks), 2, "no dump after evidence");
        // A later dump, asked by another alert on the JVM, catches the loop idle: the stack stays.
        let java = dump_back(&mut stacks, IDLE, 0x7891);
        assert_eq!(java.stack, Some(stack));
        assert_eq!(asked(&stacks), 2);
    }

    #[test]
    fn a_loop_caught_idle_by_every_dump_of_the_window_says_so() {
        let mut stacks = started();
        // Loop 2 (nid 0x7892) is idle in both dumps.
        for dumps in 2..=DUMPS_PER_WINDOW {
            dump_back(&mut stacks, [IDLE, CONTENDED][dumps % 2], 0x7892);
            assert_eq!(asked(&stacks), dumps);
        }
        let java = dump_back(&mut stacks, CONTENDED, 0x7892);
        assert_eq!(asked(&stacks), DUMPS_PER_WINDOW, "at most {DUMPS_PER_WINDOW} dumps a minute");
        assert!(java.stack.is_none(), "{java:?}");
        let why = java.unavailable.unwrap_or_default();
        assert!(why.contains("idle in its selector"), "{why}");
    }
}
