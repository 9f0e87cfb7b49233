//! A parsed thread dump summed up for alert evidence: one thread's Java stack, or where a pool's
//! threads wait, grouped as a reader of a thread dump would ("61 threads at RateLimiter.acquire").

use super::dump::JavaThread;
use crate::api::v1::WaitingGroup;

/// Frames of a blocked thread's Java stack in evidence, innermost first.
pub const STACK_FRAMES: usize = 20;
/// Threads whose first this many lines (frames and waits) are alike wait at the same place.
pub const GROUP_KEY_FRAMES: usize = 6;
/// Frames shown per group, and groups shown.
pub const GROUP_FRAMES: usize = 12;
pub const GROUPS: usize = 5;

/// The Java stack of the thread whose native id (in the JVM's pid namespace) is `nid`.
pub fn java_stack(threads: &[JavaThread], nid: u32) -> Option<Vec<String>> {
    let thread = threads.iter().find(|t| t.nid == nid)?;
    let frames: Vec<String> =
        thread.frames.iter().take(STACK_FRAMES).map(|f| crate::printable::escape(f).into_owned()).collect();
    (!frames.is_empty()).then_some(frames)
}

/// Where the threads `member` selects wait: `[{"threads": N, "frames": [...]}]`, biggest group
/// first, at most `GROUPS`. Threads with no Java frame (idle in native code) are left out.
pub fn waiting_at(threads: &[JavaThread], member: impl Fn(&JavaThread) -> bool) -> Vec<WaitingGroup> {
    let mut groups: Vec<(Vec<&str>, usize, &JavaThread)> = Vec::new();
    for thread in threads.iter().filter(|t| member(t) && t.java_frames().next().is_some()) {
        let key: Vec<&str> = thread.frames.iter().take(GROUP_KEY_FRAMES).map(String::as_str).collect();
        match groups.iter_mut().find(|(k, _, _)| *k == key) {
            Some(group) => group.1 += 1,
            None => groups.push((key, 1, thread)),
        }
    }
    // Biggest first; equal ones in the dump's order (the sort is stable).
    groups.sort_by_key(|group| std::cmp::Reverse(group.1));
    groups
        .iter()
        .take(GROUPS)
        .map(|(_, n, first)| {
            let frames = first.frames.iter().take(GROUP_FRAMES).map(|f| crate::printable::escape(f).into_owned());
            WaitingGroup { threads: *n, frames: frames.collect() }
        })
        .collect()
}

/// The kernel's name of a Java thread: HotSpot gives the kernel the first 15 bytes of its name.
pub fn kernel_name(java_name: &str) -> &str {
    let mut end = java_name.len().min(15);
    while !java_name.is_char_boundary(end) {
        end -= 1;
    }
    &java_name[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(name: &str, nid: u32, frames: &[&str]) -> JavaThread {
        JavaThread {
            name: name.into(),
            nid,
            state: String::new(),
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn the_blocked_threads_stack_by_its_native_id() {
        let threads = [thread("a", 1, &["X.a(X.java:1)"]), thread("b", 2, &["Y.b(Y.java:2)", "Z.c(Z.java:3)"])];
        assert_eq!(java_stack(&threads, 2), Some(vec!["Y.b(Y.java:2)".to_string(), "Z.c(Z.java:3)".to_string()]));
        assert_eq!(java_stack(&threads, 3), None);
    }

    #[test]
    fn pool_threads_grouped_by_where_they_wait_biggest_first() {
        let limited = ["Thread.sleep(Native Method)", "RateLimiter.acquire(RateLimiter.java:304)", "H.run(H.java:9)"];
        let queue = [
            "Unsafe.park(Native Method)",
            "- parking to wait for LinkedBlockingQueue",
            "LinkedBlockingQueue.take(LinkedBlockingQueue.java:435)",
        ];
        let mut threads = vec![thread("rpc-pool-1", 1, &queue)];
        threads.extend((2..9).map(|i| thread(&format!("rpc-pool-{i}"), i, &limited)));
        threads.push(thread("main", 20, &limited));
        threads.push(thread("rpc-pool-99", 21, &[]));
        let summary = waiting_at(&threads, |t| t.name.starts_with("rpc-pool-"));
        assert_eq!(summary[0].threads, 7, "{summary:#?}");
        assert_eq!(summary[0].frames[1], "RateLimiter.acquire(RateLimiter.java:304)");
        assert_eq!(summary[1].threads, 1);
        assert_eq!(summary.len(), 2);
    }

    #[test]
    fn kernel_names_are_fifteen_bytes() {
        assert_eq!(kernel_name("reactor-http-nio-1"), "reactor-http-ni");
        assert_eq!(kernel_name("short"), "short");
        assert_eq!(kernel_name("ééééééééé"), "ééééééé");
    }
}
