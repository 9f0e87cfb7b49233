//! Java frames in the evidence of alerts on HotSpot JVMs: an EventLoopBlocked or PoolSaturated
//! finding asks for a thread dump (at most one per alert per minute, on the dump worker), and its
//! findings carry the dump once it is back (`java_stack`, `waiting_at`), from the next tick on.
//! The tick never waits on a JVM.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::{
    alerts::Finding,
    jvm_attach::{dump::JavaThread, summary, worker::DumpWorker},
};

/// An alert takes at most one dump this often.
const DUMP_EVERY: Duration = Duration::from_secs(60);

/// A dump and when it came back.
type Dump = (Result<Vec<JavaThread>, String>, Instant);

#[derive(Debug, Default)]
pub struct JavaStacks {
    /// Thread dumps are on in the config.
    enabled: bool,
    /// Started at the first dump asked for: the daemon drops its capabilities after startup,
    /// which it can do only while it runs one thread. None: not yet, or it could not start.
    worker: Option<DumpWorker>,
    /// (pid, alert kind, subject) → when its dump was asked for.
    asked: HashMap<(u32, String, String), Instant>,
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

    /// The worker, started now if dumps are on and it is not running yet.
    fn worker(&mut self) -> Option<&DumpWorker> {
        if self.enabled && self.worker.is_none() {
            self.worker = DumpWorker::start();
            if self.worker.is_none() {
                tracing::warn!("cannot start the thread-dump worker: no Java frames in evidence");
                self.enabled = false;
            }
        }
        self.worker.as_ref()
    }

    /// Takes the dumps finished since the last tick and forgets what is over a minute old.
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
        self.asked.retain(|_, at| now.duration_since(*at) < DUMP_EVERY * 2);
        self.dumps.retain(|_, (_, at)| now.duration_since(*at) < DUMP_EVERY * 2);
    }

    /// Adds Java frames to `finding` (about JVM `pid`) from a dump taken since its alert asked,
    /// or asks for one. `tid` is the blocked thread (host tid) of an EventLoopBlocked, `pool` the
    /// thread group of a PoolSaturated.
    pub fn annotate(&mut self, finding: &mut Finding, tid: Option<u32>, pool: Option<&str>) {
        if !self.enabled {
            return;
        }
        let pid = finding.pid;
        let key = (pid, finding.kind.to_string(), finding.subject.clone());
        let now = Instant::now();
        let asked = match self.asked.get(&key) {
            Some(at) if now.duration_since(*at) < DUMP_EVERY => *at,
            _ if finding.active => {
                if !self.worker().is_some_and(|worker| worker.request(pid)) {
                    return;
                }
                self.asked.insert(key, now);
                return;
            }
            _ => return,
        };
        let Some((dump, _)) = self.dumps.get(&pid).filter(|(_, at)| *at >= asked) else { return };
        let threads = match dump {
            Ok(threads) => threads,
            Err(why) => {
                finding.evidence["java_stack_unavailable"] = serde_json::json!(why);
                return;
            }
        };
        if let Some(tid) = tid {
            let nid = crate::host::procfs::namespace_pid(tid).unwrap_or(tid);
            if let Some(frames) = summary::java_stack(threads, nid) {
                finding.evidence["java_stack"] = serde_json::json!(frames);
            }
        }
        if let Some(pool) = pool {
            let member = |t: &JavaThread| crate::thread_group::thread_group(summary::kernel_name(&t.name)) == pool;
            finding.evidence["waiting_at"] = summary::waiting_at(threads, member);
        }
    }
}
