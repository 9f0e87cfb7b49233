//! The thread that takes thread dumps, so the tick never waits on a JVM: requests go through a
//! bounded queue (a full queue drops the request, retried at a later tick), parsed dumps come back
//! through a channel the collector drains at each tick.
//!
//! A dump is one sample, and a loop that blocks part of the time may be caught idle in its
//! selector, between two waits. A request for a loop's stack therefore takes up to `dumps` dumps
//! [`SAMPLE_GAP`] apart and stops at the first that caught the loop elsewhere: the evidence is back
//! within a few hundred milliseconds instead of a dump per tick.

use std::{
    sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError},
    time::{Duration, Instant},
};

use super::{attach, dump, idle};

/// Dumps waiting to be taken; one JVM's dump takes up to a few seconds in the worst case.
const QUEUE: usize = 4;
/// Between two dumps of one request: longer than a loop's usual return to its selector between
/// two blocking calls, short enough that a few fit well within one tick.
pub const SAMPLE_GAP: Duration = Duration::from_millis(60);

/// A dump of JVM `pid` (host pid), for the thread `loop_nid` (in the JVM's pid namespace) when
/// the stack of a blocked loop is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpRequest {
    pub pid: u32,
    pub loop_nid: Option<u32>,
    /// Dumps this request may take, at least one.
    pub dumps: usize,
}

/// What a dump request gave: the threads, or why none.
#[derive(Debug)]
pub struct DumpResult {
    pub request: DumpRequest,
    /// The last dump's threads.
    pub threads: Result<Vec<dump::JavaThread>, attach::AttachError>,
    /// Dumps taken (each a safepoint pause of the JVM).
    pub dumps: usize,
    /// The loop was idle in its selector in every dump taken.
    pub loop_idle: bool,
    /// How long the attach and the dumps took, seen from here.
    pub took: Duration,
}

#[derive(Debug)]
pub struct DumpWorker {
    requests: SyncSender<DumpRequest>,
    results: Receiver<DumpResult>,
}

impl DumpWorker {
    /// Starts the worker thread; `None` if the thread cannot be created.
    pub fn start() -> Option<Self> {
        let (requests, incoming) = mpsc::sync_channel::<DumpRequest>(QUEUE);
        let (send, results) = mpsc::channel();
        std::thread::Builder::new()
            .name("jvm-dumps".into())
            .spawn(move || {
                for request in incoming {
                    let result = take(request, |pid| {
                        attach::thread_dump(pid, dump::MAX_DUMP_BYTES).map(|text| dump::parse(&text))
                    });
                    if send.send(result).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Self { requests, results })
    }

    /// Queues `request`; false if the queue is full or the worker is gone.
    pub fn request(&self, request: DumpRequest) -> bool {
        match self.requests.try_send(request) {
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

type Threads = Result<Vec<dump::JavaThread>, attach::AttachError>;

/// Takes `request`'s dumps with `dump_of`, until one caught its loop outside its selector.
fn take(request: DumpRequest, mut dump_of: impl FnMut(u32) -> Threads) -> DumpResult {
    let start = Instant::now();
    let mut dumps = 0;
    loop {
        let threads = dump_of(request.pid);
        dumps += 1;
        let loop_idle = match (&threads, request.loop_nid) {
            (Ok(threads), Some(nid)) => threads.iter().any(|t| t.nid == nid && idle::in_selector(t)),
            _ => false,
        };
        if !loop_idle || dumps >= request.dumps.max(1) {
            return DumpResult { request, threads, dumps, loop_idle, took: start.elapsed() };
        }
        std::thread::sleep(SAMPLE_GAP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jvm_attach::dump::parse;

    const IDLE: &str = include_str!("../../testdata/jvm/netty-loops-idle.txt");
    const CONTENDED: &str = include_str!("../../testdata/jvm/netty-loops-contended-monitor.txt");

    /// A request that replays `dumps` in order.
    fn replay(request: DumpRequest, dumps: &[&str]) -> (DumpResult, usize) {
        let mut next = dumps.iter();
        let mut taken = 0;
        let result = take(request, |_| {
            taken += 1;
            Ok(parse(next.next().expect("no more dumps than the request allows")))
        });
        (result, taken)
    }

    #[test]
    fn a_loop_caught_idle_is_dumped_again_until_caught_blocked() {
        let request = DumpRequest { pid: 1, loop_nid: Some(0x7891), dumps: 3 };
        let (result, taken) = replay(request, &[IDLE, IDLE, CONTENDED]);
        assert_eq!((taken, result.dumps, result.loop_idle), (3, 3, false));
        assert!(result.took >= SAMPLE_GAP * 2, "{:?}", result.took);
        let (result, taken) = replay(request, &[CONTENDED, IDLE]);
        assert_eq!((taken, result.loop_idle), (1, false), "the first dump that caught it blocked ends it");
    }

    #[test]
    fn the_request_caps_the_dumps() {
        // Loop 2 (nid 0x7892) is idle in both dumps.
        let request = DumpRequest { pid: 1, loop_nid: Some(0x7892), dumps: 2 };
        let (result, taken) = replay(request, &[IDLE, CONTENDED]);
        assert_eq!((taken, result.loop_idle), (2, true));
        // A pool's request (no loop) and a failed dump take one.
        let (_, taken) = replay(DumpRequest { loop_nid: None, ..request }, &[IDLE]);
        assert_eq!(taken, 1);
        let result = take(request, |pid| Err(attach::AttachError::Gone(pid)));
        assert_eq!((result.dumps, result.loop_idle), (1, false));
        let (_, taken) = replay(DumpRequest { dumps: 0, ..request }, &[IDLE]);
        assert_eq!(taken, 1, "at least one");
    }
}
