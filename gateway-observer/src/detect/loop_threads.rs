//! Which threads are event loops: a thread seen idling in epoll/poll/select lately, found
//! without configuration, and the names configuration includes or excludes.

use std::time::{Duration, Instant};

use crate::state::history::{History, ThreadInfo};

#[derive(Debug, Clone, PartialEq)]
pub struct EventLoopConfig {
    pub window: Duration,
    /// Blocked share of the window that is an incident on its own.
    pub blocked_share: f64,
    /// One block at least this long is an incident on its own.
    pub single_block: Duration,
    /// A thread seen idling in poll within this long is an event loop.
    pub loop_memory: Duration,
    /// One iteration on CPU at least this long (without returning to poll) is a long iteration;
    /// `busy_repeats` of them in the window are `EventLoopBusy`...
    pub busy_iteration: Duration,
    pub busy_repeats: u32,
    /// ...and so is one still running this long (a loop that does not come back).
    pub busy_stuck: Duration,
    /// Thread-name patterns (`*` matches any run) that are event loops even before they are seen
    /// polling, and that never are.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Default for EventLoopConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(5),
            blocked_share: 0.20,
            single_block: Duration::from_millis(50),
            loop_memory: Duration::from_secs(60),
            busy_iteration: Duration::from_millis(100),
            busy_repeats: 2,
            busy_stuck: Duration::from_secs(1),
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    if parts.is_empty() {
        return rest.is_empty();
    }
    let (last, middle) = parts.split_last().unwrap_or((&"", &[]));
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl EventLoopConfig {
    /// Whether a thread is an event loop: excluded by name never, included by name always,
    /// otherwise when it was seen idling in poll.
    pub fn is_event_loop(&self, name: &str, polled_recently: bool) -> bool {
        if self.exclude.iter().any(|p| name_matches(p, name)) {
            return false;
        }
        polled_recently || self.include.iter().any(|p| name_matches(p, name))
    }
}

/// The event loops: threads that idled in poll/epoll/select within the config's memory, or
/// that the config names as loops (and that it does not exclude).
pub fn event_loops<'a>(
    history: &'a History,
    now: Instant,
    config: &'a EventLoopConfig,
) -> impl Iterator<Item = &'a ThreadInfo> {
    history
        .threads_polled(now, config.loop_memory)
        .filter(|(info, polled)| config.is_event_loop(&info.name, *polled))
        .map(|(info, _)| info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_patterns() {
        assert!(name_matches("reactor-http-nio-*", "reactor-http-nio-2"));
        assert!(name_matches("*nio*", "reactor-http-nio-2"));
        assert!(name_matches("node", "node"));
        assert!(!name_matches("node", "node2"));
        assert!(!name_matches("gw-*-x", "gw-worker-1"));
        assert!(name_matches("gw-*-1", "gw-worker-1"));
        assert!(name_matches("*", "anything"));
    }
}
