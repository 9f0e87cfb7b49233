//! Whether a dump caught an event loop idle in its selector. A dump is one sample: a loop that an
//! alert says blocks part of the time may be caught between two waits, back in `epoll_wait`, and
//! that stack says nothing about what blocks it.

use super::dump::JavaThread;

/// Innermost Java frames (`Class.method(`, package cut) of a selector waiting for I/O: the JDK's
/// NIO selectors (Linux epoll, JDK 8 and 11+; poll; BSD/macOS kqueue; Windows), Netty's native
/// epoll, kqueue and io_uring transports.
const SELECTOR_WAITS: &[&str] = &[
    "EPoll.wait(",
    "EPoll.epollWait(",
    "EPollArrayWrapper.epollWait(",
    "Net.poll(",
    "PollSelectorImpl.poll(",
    "PollArrayWrapper.poll0(",
    "KQueue.poll(",
    "KQueue.keventPoll(",
    "KQueueArrayWrapper.kevent0(",
    "WEPoll.wait(",
    "WindowsSelectorImpl$SubSelector.poll0(",
    "Native.epollWait",
    "Native.epollBusyWait",
    "Native.keventWait",
    "Native.ioUringEnter",
    // A thread caught on its way into or out of the selector's native wait shows no native frame:
    // the selector's Java code that calls it is on top (seen on JDK 17 under load).
    "EPollSelectorImpl.doSelect(",
    "PollSelectorImpl.doSelect(",
    "KQueueSelectorImpl.doSelect(",
    "WEPollSelectorImpl.doSelect(",
    "WindowsSelectorImpl.doSelect(",
    "EpollEventLoop.epollWait(",
    "EpollEventLoop.epollBusyWait(",
    "KQueueEventLoop.kqueueWait(",
];

/// The thread is RUNNABLE (HotSpot's state for a thread in native code) with its innermost Java
/// frame in a selector's wait: idle, waiting for I/O.
pub fn in_selector(thread: &JavaThread) -> bool {
    thread.state.starts_with("RUNNABLE")
        && thread.java_frames().next().is_some_and(|top| SELECTOR_WAITS.iter().any(|wait| top.starts_with(wait)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jvm_attach::dump::parse;

    /// Real `jstack` dumps of the Netty fixture (see `testdata/jvm/README.md`).
    const IDLE: &str = include_str!("../../testdata/jvm/netty-loops-idle.txt");
    const CONTENDED: &str = include_str!("../../testdata/jvm/netty-loops-contended-monitor.txt");

    fn loops(dump: &str) -> Vec<(String, bool)> {
        parse(dump)
            .iter()
            .filter(|t| t.name.starts_with("reactor-http-nio-"))
            .map(|t| (t.name.clone(), in_selector(t)))
            .collect()
    }

    #[test]
    fn loops_waiting_for_io_are_idle() {
        let loops = loops(IDLE);
        assert_eq!(loops.len(), 4, "{loops:?}");
        assert!(loops.iter().all(|(_, idle)| *idle), "{loops:?}");
    }

    #[test]
    fn loops_blocked_on_a_monitor_are_not_idle_and_their_neighbours_are() {
        let loops = loops(CONTENDED);
        let idle: Vec<bool> = loops.iter().map(|(_, idle)| *idle).collect();
        assert_eq!(idle, [false, true, true, false], "{loops:?}");
    }

    #[test]
    fn other_threads_of_a_dump_are_not_idle_loops() {
        // Parked workers, the JVM's own threads, a monitor waiter: none waits in a selector.
        let threads = parse(CONTENDED);
        let idle: Vec<&str> = threads.iter().filter(|t| in_selector(t)).map(|t| t.name.as_str()).collect();
        assert_eq!(idle, ["lettuce-nioEventLoop-4-1", "reactor-http-nio-2", "reactor-http-nio-3"]);
        let blocked = threads.iter().find(|t| t.name == "reactor-http-nio-1").expect("loop 1");
        assert_eq!(blocked.state, "BLOCKED (on object monitor)");
        assert_eq!(blocked.frames[1], "- waiting to lock Object");
        // A thread in native code (RUNNABLE) elsewhere, or a selector frame deeper down, is no idle wait.
        let mut reading = blocked.clone();
        reading.state = "RUNNABLE".into();
        assert!(!in_selector(&reading));
        let mut waiting = threads.iter().find(|t| t.name == "reactor-http-nio-2").expect("loop 2").clone();
        assert!(in_selector(&waiting));
        // Caught between the selector and its native wait (a `runtime_jvm` run's dump).
        let mut between = waiting.clone();
        between.frames.retain(|f| !f.starts_with("EPoll.wait("));
        assert!(between.frames[0].starts_with("EPollSelectorImpl.doSelect("), "{between:#?}");
        assert!(in_selector(&between));
        waiting.state = "WAITING (parking)".into();
        assert!(!in_selector(&waiting));
    }
}
