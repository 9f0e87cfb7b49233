//! Names of target threads and processes, read from /proc and cached. Threads are usually
//! renamed just after they start (Rust, a JVM and glibc pools name a thread from inside it), so a
//! young thread's name is re-read at every tick, an older one's every `refresh_every` ticks.
//!
//! The kernel keeps 15 bytes of a name, so Netty's `reactor-http-nio-1` and `-2` are both
//! `reactor-http-ni`. Each live thread gets a name distinct among the live threads of every
//! process with the same comm (the `process` label: two nginx workers are both `nginx`, and so
//! are their main threads): the second thread with a kernel name gets `#2` after it, and so on.
//! A thread keeps its name for its life, and the numbers of threads that are gone are given
//! again, so the set of names stays bounded and every per-thread series is unique.

use std::collections::{BTreeMap, HashMap};

use crate::{host::procfs, thread_group::thread_group};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadName {
    pub tgid: u32,
    /// Distinct among the process's live threads: the kernel's name, `#N` after it when another
    /// live thread of the process has the same.
    pub name: String,
    /// Threads named alike (`rpc-pool-*`), from the kernel's name.
    pub group: String,
    /// The name as the kernel has it.
    pub kernel_name: String,
}

/// A thread is young, and its name re-read at every tick, for this many ticks after first seen.
const YOUNG_TICKS: u64 = 10;

#[derive(Debug)]
pub struct ThreadNames {
    /// tid → (name, tick it was read, tick the thread was first seen).
    threads: HashMap<u32, (ThreadName, u64, u64)>,
    processes: HashMap<u32, String>,
    /// Per (process comm, kernel name): the numbers given to live threads → their tid.
    numbers: HashMap<(String, String), BTreeMap<u32, u32>>,
    tick: u64,
    refresh_every: u64,
}

impl ThreadNames {
    pub fn new(refresh_every: u64) -> Self {
        Self { threads: HashMap::new(), processes: HashMap::new(), numbers: HashMap::new(), tick: 0, refresh_every }
    }

    pub fn next_tick(&mut self) {
        self.tick += 1;
    }

    /// The thread's name and group; a thread that has exited keeps its last known name, and one
    /// never seen is named after its tid.
    pub fn thread(&mut self, tid: u32, tgid: u32) -> &ThreadName {
        let tick = self.tick;
        let known = self.threads.get(&tid).filter(|(known, _, _)| known.tgid == tgid);
        let stale = known.is_none_or(|(_, read, first)| {
            let every = if tick < first + YOUNG_TICKS { 1 } else { self.refresh_every };
            tick >= read + every
        });
        if stale {
            let first_seen = known.map_or(tick, |(_, _, first)| *first);
            let kernel_name = procfs::thread_comm(tgid, tid)
                .or_else(|| known.map(|(k, _, _)| k.kernel_name.clone()))
                .unwrap_or_else(|| format!("tid-{tid}"));
            let same = known.is_some_and(|(k, _, _)| k.kernel_name == kernel_name);
            let name = match known {
                Some((k, _, _)) if same => k.name.clone(),
                _ => {
                    self.release_number(tid);
                    self.distinct_name(tid, tgid, &kernel_name)
                }
            };
            let group = thread_group(&kernel_name);
            self.threads.insert(tid, (ThreadName { tgid, name, group, kernel_name }, tick, first_seen));
        }
        &self.threads[&tid].0
    }

    /// The name already given to a thread of `tgid`, if any (an exited thread keeps it).
    pub fn known(&self, tid: u32, tgid: u32) -> Option<&ThreadName> {
        self.threads.get(&tid).map(|(known, _, _)| known).filter(|known| known.tgid == tgid)
    }

    /// The smallest number no live thread with this kernel name in a process of this comm has.
    fn distinct_name(&mut self, tid: u32, tgid: u32, kernel_name: &str) -> String {
        let comm = self.process(tgid).to_owned();
        let given = self.numbers.entry((comm, kernel_name.to_owned())).or_default();
        let number = (1..).find(|n| !given.contains_key(n)).unwrap_or(1);
        given.insert(number, tid);
        if number == 1 { kernel_name.to_owned() } else { format!("{kernel_name}#{number}") }
    }

    fn release_number(&mut self, tid: u32) {
        let Some((known, _, _)) = self.threads.get(&tid) else { return };
        let kernel_name = known.kernel_name.clone();
        // Numbers are per comm; the tid is unique, so any entry holding it is the thread's.
        self.numbers.retain(|(_, name), given| {
            if *name == kernel_name {
                given.retain(|_, owner| *owner != tid);
            }
            !given.is_empty()
        });
    }

    /// The process's comm: the `process` label.
    pub fn process(&mut self, tgid: u32) -> &str {
        self.processes.entry(tgid).or_insert_with(|| procfs::comm(tgid).unwrap_or_else(|| format!("pid-{tgid}")))
    }

    pub fn forget_thread(&mut self, tid: u32) {
        self.release_number(tid);
        self.threads.remove(&tid);
        crate::heap::shrink_sparse_map(&mut self.threads);
    }

    /// Forgets the names of processes no longer followed (and with no thread left to fold).
    pub fn retain_processes(&mut self, followed: &std::collections::HashSet<u32>) {
        self.processes.retain(|tgid, _| followed.contains(tgid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_this_process_threads_and_groups_them() {
        let me = std::process::id();
        let handle = std::thread::Builder::new()
            .name("probe-test-7".into())
            .spawn(|| {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() } as u32;
                let mut names = ThreadNames::new(5);
                let name = names.thread(tid, std::process::id()).clone();
                (tid, name)
            })
            .expect("spawn");
        let (tid, name) = handle.join().expect("join");
        assert_eq!(name.name, "probe-test-7");
        assert_eq!(name.group, "probe-test-*");
        // join() returns when the thread's tid is cleared; its /proc entry goes a moment later.
        let gone_by = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::path::Path::new(&format!("/proc/{me}/task/{tid}")).exists() && std::time::Instant::now() < gone_by {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut names = ThreadNames::new(5);
        assert_eq!(names.thread(tid, me).name, format!("tid-{tid}"), "an exited thread never seen");
        assert!(!names.process(me).is_empty());
    }

    #[test]
    fn threads_with_one_kernel_name_get_distinct_stable_names() {
        let me = std::process::id();
        let spawn = |n: usize| {
            std::thread::Builder::new()
                .name("reactor-http-nio".into())
                .spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() } as u32;
                    std::thread::sleep(std::time::Duration::from_millis(300 + 10 * n as u64));
                    tid
                })
                .expect("spawn")
        };
        let handles: Vec<_> = (0..3).map(spawn).collect();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let tids = crate::host::procfs::threads(me);
        let mut names = ThreadNames::new(5);
        let mut loops: Vec<(u32, String)> = tids
            .iter()
            .map(|&tid| (tid, names.thread(tid, me).clone()))
            .filter(|(_, n)| n.kernel_name == "reactor-http-ni")
            .map(|(tid, n)| (tid, n.name))
            .collect();
        loops.sort_by(|a, b| a.1.cmp(&b.1));
        let shown: Vec<&str> = loops.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(shown, ["reactor-http-ni", "reactor-http-ni#2", "reactor-http-ni#3"]);
        // Stable across re-reads, and a number freed by a thread that is gone is given again.
        names.next_tick();
        assert_eq!(names.thread(loops[1].0, me).name, "reactor-http-ni#2");
        names.forget_thread(loops[0].0);
        assert_eq!(names.distinct_name(1, me, "reactor-http-ni"), "reactor-http-ni");
        for h in handles {
            h.join().expect("join");
        }
    }
}
