//! The thread that takes thread dumps, so the tick never waits on a JVM: requests go through a
//! bounded queue (a full queue drops the request, retried at a later tick), parsed dumps come back
//! through a channel the collector drains at each tick.

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};

use super::{attach, dump};

/// Dumps waiting to be taken; one JVM's dump takes up to a few seconds in the worst case.
const QUEUE: usize = 4;

/// What a dump request gave: the threads, or why none.
#[derive(Debug)]
pub struct DumpResult {
    pub pid: u32,
    pub threads: Result<Vec<dump::JavaThread>, attach::AttachError>,
    /// How long the attach and the dump took, seen from here.
    pub took: std::time::Duration,
}

#[derive(Debug)]
pub struct DumpWorker {
    requests: SyncSender<u32>,
    results: Receiver<DumpResult>,
}

impl DumpWorker {
    /// Starts the worker thread; `None` if the thread cannot be created.
    pub fn start() -> Option<Self> {
        let (requests, incoming) = mpsc::sync_channel::<u32>(QUEUE);
        let (send, results) = mpsc::channel();
        std::thread::Builder::new()
            .name("jvm-dumps".into())
            .spawn(move || {
                for pid in incoming {
                    let start = std::time::Instant::now();
                    let threads = attach::thread_dump(pid, dump::MAX_DUMP_BYTES).map(|text| dump::parse(&text));
                    if send.send(DumpResult { pid, threads, took: start.elapsed() }).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Self { requests, results })
    }

    /// Queues a dump of `pid`; false if the queue is full or the worker is gone.
    pub fn request(&self, pid: u32) -> bool {
        match self.requests.try_send(pid) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// The dumps finished since the last call.
    pub fn finished(&self) -> Vec<DumpResult> {
        let mut done = Vec::new();
        loop {
            match self.results.try_recv() {
                Ok(result) => done.push(result),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return done,
            }
        }
    }
}
