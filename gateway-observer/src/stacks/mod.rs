//! Stacks of threads blocked right now, taken from userspace when an alert needs them (issue 17):
//! the thread's registers from `/proc/TID/syscall` (`live`), a bounded copy of its stack with
//! `process_vm_readv` (`memory`), unwound through `.eh_frame` (`unwind`, framehop) and named by
//! the symbolizer; in a CPython process, the eval loop's native frames are replaced by the Python
//! frames they run, read from the interpreter's state (`python`). It costs the target nothing until an alert fires, and alerts fire only on
//! conditions that hold now, so the alerted threads are still where they blocked.
//!
//! All of it runs on a worker thread that owns the file caches ([`LiveStacks`]): the tick thread
//! only sends (pid, tids) over a bounded channel (a full one drops the request and counts it) and
//! picks the answers up at its next tick. A thread is unwound again at most every
//! [`REUNWIND`]. Files are opened only through `target_files` (the symbolizer does).

pub mod live;
pub mod memory;
pub mod python;
pub mod unwind;

use std::{
    collections::{BTreeMap, HashMap},
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::symbolize::Symbolizer;

/// Requests waiting for the worker; past it they are dropped (and counted).
const QUEUE: usize = 16;
/// How long the worker keeps a parsed file no frame has needed: an alert asks for its threads'
/// stacks every [`REUNWIND`], so its files stay parsed while it lasts, and are dropped soon after
/// it ends (a debug build's symbols are megabytes).
const FILES_KEEP: Duration = Duration::from_secs(10);
/// A thread's stack is taken again at most this often.
pub const REUNWIND: Duration = Duration::from_secs(3);
/// A stack is shown this long after it was taken (a thread seen running at the next try keeps
/// the stack it was blocked in), and forgotten after.
const KEEP: Duration = Duration::from_secs(15);
/// Threads of one process unwound per request (a saturated pool's, the blocked ones first).
pub const MAX_THREADS: usize = 64;
/// Frames that make two threads' stacks the same place, for [`waiting_at`].
pub const GROUP_FRAMES: usize = 8;
/// Places listed in [`waiting_at`], the most crowded first.
pub const MAX_GROUPS: usize = 5;
/// Every outcome counted by [`LiveStacks::outcomes`], for metrics that show each from zero.
pub const OUTCOMES: [&str; 6] = ["unwound", "running", "gone", "denied", "error", "dropped"];

struct Request {
    pid: u32,
    tids: Vec<u32>,
}

/// One thread's stack, innermost first, with the syscall it was in, or why there is none (an
/// [`OUTCOMES`] label).
pub type Answer = (u32, Result<(Option<u64>, Vec<String>), &'static str>);

struct Reply {
    answers: Vec<Answer>,
    refusals: BTreeMap<&'static str, u64>,
}

/// The tick thread's end of the stack worker.
pub struct LiveStacks {
    /// The worker's channels, once started (at the first request: the daemon drops its
    /// capabilities while it has one thread, and the worker inherits what is left).
    worker: Option<(mpsc::SyncSender<Request>, mpsc::Receiver<Reply>)>,
    /// When each thread was last asked for.
    asked: HashMap<u32, Instant>,
    /// The last stack taken of each thread, when it came, and the syscall it was taken in.
    stacks: HashMap<u32, (Instant, Option<u64>, Vec<String>)>,
    outcomes: BTreeMap<&'static str, u64>,
    refusals: BTreeMap<&'static str, u64>,
}

impl Default for LiveStacks {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveStacks {
    /// No worker yet: it starts with the first request.
    pub fn new() -> Self {
        Self {
            worker: None,
            asked: HashMap::new(),
            stacks: HashMap::new(),
            outcomes: BTreeMap::new(),
            refusals: BTreeMap::new(),
        }
    }

    /// The worker's channels, started if need be. If no thread can be made, every request is
    /// dropped (and counted).
    fn worker(&mut self) -> &(mpsc::SyncSender<Request>, mpsc::Receiver<Reply>) {
        self.worker.get_or_insert_with(|| {
            let (requests, worker_requests) = mpsc::sync_channel(QUEUE);
            let (worker_replies, replies) = mpsc::channel();
            let started = std::thread::Builder::new()
                .name("live-stacks".to_owned())
                .spawn(move || serve(&worker_requests, &worker_replies));
            if let Err(err) = started {
                tracing::warn!(error = %err, "cannot start the stack worker: alerts carry the kernel's stacks only");
            }
            (requests, replies)
        })
    }

    /// Asks for the stacks of `tids` of process `pid`, those not asked for in the last
    /// [`REUNWIND`]; never waits.
    pub fn ask(&mut self, pid: u32, tids: &[u32], now: Instant) {
        let due = |tid: &u32| self.asked.get(tid).is_none_or(|at| now.duration_since(*at) >= REUNWIND);
        let tids: Vec<u32> = tids.iter().copied().filter(due).take(MAX_THREADS).collect();
        if tids.is_empty() {
            return;
        }
        let asked = tids.clone();
        match self.worker().0.try_send(Request { pid, tids }) {
            Ok(()) => {
                for tid in asked {
                    self.asked.insert(tid, now);
                }
            }
            Err(_) => *self.outcomes.entry("dropped").or_default() += 1,
        }
    }

    /// Takes in what the worker answered since the last call; forgets what is old.
    pub fn collect(&mut self, now: Instant) {
        while let Some(reply) = self.worker.as_ref().and_then(|(_, replies)| replies.try_recv().ok()) {
            self.refusals = reply.refusals;
            for (tid, answer) in reply.answers {
                match answer {
                    Ok((syscall, frames)) if !frames.is_empty() => {
                        *self.outcomes.entry("unwound").or_default() += 1;
                        self.stacks.insert(tid, (now, syscall, frames));
                    }
                    Ok(_) => *self.outcomes.entry("error").or_default() += 1,
                    Err(reason) => *self.outcomes.entry(reason).or_default() += 1,
                }
            }
        }
        self.stacks.retain(|_, (at, _, _)| now.duration_since(*at) < KEEP);
        self.asked.retain(|_, at| now.duration_since(*at) < KEEP);
    }

    /// The last stack taken of `tid`, innermost first.
    pub fn stack(&self, tid: u32) -> Option<&[String]> {
        self.stacks.get(&tid).map(|(_, _, frames)| frames.as_slice())
    }

    /// The last stack of `tid` if it was taken in `syscall` (the one the thread blocked in). A
    /// loop that blocks again and again is idle between the blocks: a stack taken there (tokio's
    /// park, epoll) names nothing that blocks, so it is dropped and the thread is asked for again
    /// at the next tick rather than after [`REUNWIND`].
    pub fn stack_in(&mut self, tid: u32, syscall: &str) -> Option<&[String]> {
        let taken_in = self.stacks.get(&tid)?.1;
        if taken_in.and_then(|nr| i32::try_from(nr).ok()).and_then(crate::syscalls::name_of) != Some(syscall) {
            self.stacks.remove(&tid);
            self.asked.remove(&tid);
            return None;
        }
        self.stack(tid)
    }

    /// Threads asked for, by outcome ([`OUTCOMES`]).
    pub fn outcomes(&self) -> &BTreeMap<&'static str, u64> {
        &self.outcomes
    }

    /// The worker's symbolizer's refused files, by reason (as of its last answer).
    pub fn refusals(&self) -> &BTreeMap<&'static str, u64> {
        &self.refusals
    }
}

fn serve(requests: &mpsc::Receiver<Request>, replies: &mpsc::Sender<Reply>) {
    let mut symbolizer = Symbolizer::with_unwind_tables();
    let mut unwinder = unwind::Unwinder::default();
    loop {
        // Files parsed for an alert that ended are dropped: a JVM's libjvm with its unwind
        // tables is tens of MiB.
        symbolizer.forget_unused(Instant::now(), FILES_KEEP);
        let request = match requests.recv_timeout(FILES_KEEP) {
            Ok(request) => request,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let answers = stacks_of(&mut symbolizer, &mut unwinder, request.pid, &request.tids);
        if replies.send(Reply { answers, refusals: symbolizer.refusals().clone() }).is_err() {
            return;
        }
    }
}

/// The named stacks of threads `tids` of process `pid`, each as it is now.
pub fn stacks_of(symbolizer: &mut Symbolizer, unwinder: &mut unwind::Unwinder, pid: u32, tids: &[u32]) -> Vec<Answer> {
    let mut image = None;
    tids.iter()
        .map(|&tid| {
            let stopped = match live::read(pid, tid) {
                Ok(stopped) => stopped,
                Err(err) => return (tid, Err(err.reason())),
            };
            let stack = match memory::read_stack(tid, stopped.sp, memory::WINDOW) {
                Ok(stack) => stack,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return (tid, Err("gone")),
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => return (tid, Err("denied")),
                Err(_) => return (tid, Err("error")),
            };
            // The mappings are read once per request, and only if a thread is stopped; a file
            // when a frame is first in it.
            let (image, jit, python) = image.get_or_insert_with(|| {
                let image = symbolizer.image(pid);
                let jit = image.jit_code();
                let python = symbolizer
                    .python_runtime(&image)
                    .and_then(|(version, runtime)| python::Interpreter::new(python::Process(pid), version, runtime));
                (image, jit, python)
            });
            let frames = unwinder.unwind(&mut |addr| symbolizer.tables_at(image, addr), jit, &stopped, &stack);
            let mut names = symbolizer.name_frames(image, &frames);
            if let Some(python) = python {
                names = python::merge(names, python.frames(tid));
            }
            (tid, Ok((stopped.syscall, names)))
        })
        .collect()
}

/// Where threads wait, as a thread dump's summary says it: threads grouped by their innermost
/// [`GROUP_FRAMES`] frames, the biggest group first, at most [`MAX_GROUPS`]:
/// `[{"threads": 61, "frames": ["futex_wait+0x.. (libc.so.6)", ...]}, ...]`.
pub fn waiting_at<'a>(stacks: impl IntoIterator<Item = &'a [String]>) -> Vec<crate::api::v1::WaitingGroup> {
    let mut groups: BTreeMap<&[String], usize> = BTreeMap::new();
    for stack in stacks {
        *groups.entry(&stack[..stack.len().min(GROUP_FRAMES)]).or_default() += 1;
    }
    let mut groups: Vec<(&[String], usize)> = groups.into_iter().filter(|(frames, _)| !frames.is_empty()).collect();
    // Ties in the order of the frames, so the same threads give the same evidence every tick.
    groups.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    groups
        .into_iter()
        .take(MAX_GROUPS)
        .map(|(frames, threads)| crate::api::v1::WaitingGroup { threads, frames: frames.to_vec() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn threads_group_by_their_innermost_frames_biggest_first() {
        let limiter = stack(&["futex_wait+0x1 (libc.so.6)", "acquire+0x10 (libgw.so)", "a", "b", "c", "d", "e", "f"]);
        let mut deeper = limiter.clone();
        deeper.push("main+0x4 (gw)".to_owned());
        let socket = stack(&["recv+0x2 (libc.so.6)", "redis_get+0x8 (gw)"]);
        let stacks = [limiter.clone(), socket.clone(), deeper, limiter.clone(), Vec::new()];
        let groups = serde_json::to_value(waiting_at(stacks.iter().map(Vec::as_slice))).expect("serializes");
        let expected = serde_json::json!([
            {"threads": 3, "frames": limiter},
            {"threads": 1, "frames": socket},
        ]);
        assert_eq!(
            groups, expected,
            "frames past the {GROUP_FRAMES}th do not split a group; empty stacks are no place"
        );
    }

    #[test]
    fn at_most_five_places_in_a_stable_order() {
        let stacks: Vec<Vec<String>> = (0..7).flat_map(|i| vec![stack(&[&format!("f{i}")]); 1 + i % 2]).collect();
        let groups = serde_json::to_value(waiting_at(stacks.iter().map(Vec::as_slice))).expect("serializes");
        let firsts: Vec<(u64, &str)> = groups
            .as_array()
            .expect("an array")
            .iter()
            .map(|g| (g["threads"].as_u64().expect("n"), g["frames"][0].as_str().expect("frame")))
            .collect();
        assert_eq!(firsts, vec![(2, "f1"), (2, "f3"), (2, "f5"), (1, "f0"), (1, "f2")]);
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_a_thread_is_not_asked_twice_at_once() {
        let (requests, _worker) = mpsc::sync_channel(1);
        let (_replies_tx, replies) = mpsc::channel();
        let mut stacks = LiveStacks { worker: Some((requests, replies)), ..LiveStacks::new() };
        let now = Instant::now();
        stacks.ask(1, &[10], now);
        stacks.ask(1, &[10], now + Duration::from_secs(1));
        assert_eq!(stacks.outcomes().get("dropped"), None, "asked again within {REUNWIND:?}");
        stacks.ask(1, &[11], now);
        assert_eq!(stacks.outcomes().get("dropped"), Some(&1), "the queue of one was full");
        stacks.ask(1, &[10], now + REUNWIND);
        assert_eq!(stacks.outcomes().get("dropped"), Some(&2), "due again, and the queue still full");
    }

    #[inline(never)]
    fn a_function_that_sleeps(ready: &mpsc::Sender<u32>) {
        // SAFETY: gettid has no preconditions.
        let _ = ready.send(unsafe { libc::gettid() } as u32);
        std::thread::sleep(Duration::from_millis(800));
        std::hint::black_box(());
    }

    /// A thread of this test binary asleep in a function of its own: the unwind goes from libc's
    /// clock_nanosleep (no frame pointers) up through std's sleep to that function.
    #[test]
    fn a_sleeping_thread_of_ours_unwinds_past_libc_to_its_caller() {
        let (tx, rx) = mpsc::channel();
        let sleeper = std::thread::spawn(move || a_function_that_sleeps(&tx));
        let tid = rx.recv().expect("tid");
        let pid = std::process::id();
        let (mut symbolizer, mut unwinder) = (Symbolizer::with_unwind_tables(), unwind::Unwinder::default());
        let deadline = Instant::now() + Duration::from_millis(500);
        let frames = loop {
            match stacks_of(&mut symbolizer, &mut unwinder, pid, &[tid]).pop() {
                Some((_, Ok((syscall, frames)))) => {
                    assert_eq!(syscall, Some(libc::SYS_clock_nanosleep as u64), "the syscall it sleeps in");
                    break frames;
                }
                Some((_, Err("running"))) if Instant::now() < deadline => std::thread::yield_now(),
                other => panic!("no stack of our sleeping thread: {other:?}"),
            }
        };
        // What an unwind costs the worker once the files are parsed (the target pays nothing).
        let started = Instant::now();
        let again = stacks_of(&mut symbolizer, &mut unwinder, pid, &[tid]);
        eprintln!("UNWIND_COST {:?} for {} frames, files cached", started.elapsed(), frames.len());
        assert!(matches!(again.first(), Some((_, Ok(_) | Err("running" | "gone")))), "{again:?}");
        sleeper.join().expect("join");
        let at = |needle: &str| frames.iter().position(|f| f.contains(needle));
        let (Some(libc_sleep), Some(ours)) = (at("nanosleep"), at("a_function_that_sleeps")) else {
            panic!("clock_nanosleep and a_function_that_sleeps expected in {frames:#?}");
        };
        assert!(libc_sleep < ours, "innermost first: {frames:#?}");
        assert!(frames.iter().all(|f| !f.starts_with("0x") && !f.contains("(0x")), "an address in {frames:#?}");
    }

    /// A loop's stack caught while it idles between blocks is no evidence of the block.
    #[test]
    fn a_stack_taken_outside_the_blocking_syscall_is_dropped_and_asked_again() {
        let now = Instant::now();
        let mut stacks = LiveStacks::new();
        let park = vec!["syscall+0x19 (libc.so.6)".to_owned(), "park_condvar (gw)".to_owned()];
        stacks.stacks.insert(7, (now, Some(libc::SYS_futex as u64), park));
        stacks.asked.insert(7, now);
        assert_eq!(stacks.stack_in(7, "recvfrom"), None, "taken in futex, blocked in recvfrom");
        assert!(stacks.stack(7).is_none() && !stacks.asked.contains_key(&7), "dropped, asked again next tick");
        let recv = vec!["recv+0x5a (libc.so.6)".to_owned(), "check_blocking (gw)".to_owned()];
        stacks.stacks.insert(7, (now, Some(libc::SYS_recvfrom as u64), recv.clone()));
        assert_eq!(stacks.stack_in(7, "recvfrom"), Some(recv.as_slice()));
    }
}
