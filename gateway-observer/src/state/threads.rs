//! Names of target threads and processes, read from /proc and cached. Threads are usually
//! renamed just after they start (Rust, a JVM and glibc pools name a thread from inside it), so a
//! young thread's name is re-read at every tick, an older one's every `refresh_every` ticks.

use std::collections::HashMap;

use crate::{procfs, thread_group::thread_group};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadName {
    pub tgid: u32,
    pub name: String,
    pub group: String,
}

/// A thread is young, and its name re-read at every tick, for this many ticks after first seen.
const YOUNG_TICKS: u64 = 10;

#[derive(Debug)]
pub struct ThreadNames {
    /// tid → (name, tick it was read, tick the thread was first seen).
    threads: HashMap<u32, (ThreadName, u64, u64)>,
    processes: HashMap<u32, String>,
    tick: u64,
    refresh_every: u64,
}

impl ThreadNames {
    pub fn new(refresh_every: u64) -> Self {
        Self { threads: HashMap::new(), processes: HashMap::new(), tick: 0, refresh_every }
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
            let name = procfs::thread_comm(tgid, tid)
                .or_else(|| known.map(|(k, _, _)| k.name.clone()))
                .unwrap_or_else(|| format!("tid-{tid}"));
            let group = thread_group(&name);
            self.threads.insert(tid, (ThreadName { tgid, name, group }, tick, first_seen));
        }
        &self.threads[&tid].0
    }

    /// The process's comm: the `process` label.
    pub fn process(&mut self, tgid: u32) -> &str {
        self.processes.entry(tgid).or_insert_with(|| procfs::comm(tgid).unwrap_or_else(|| format!("pid-{tgid}")))
    }

    pub fn forget_thread(&mut self, tid: u32) {
        self.threads.remove(&tid);
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
}
