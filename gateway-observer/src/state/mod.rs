//! Userspace state built from what the kernel recorded: targets, thread names, monotonic totals,
//! per-thread history and what the thread detectors keep between ticks (`thread_memory`),
//! connections and their requests, listener queues. Nothing here touches a
//! kernel handle.

pub mod counters;
pub mod histogram;
pub mod history;
pub mod host_scan;
pub mod jvm_pauses;
pub mod liveness;
pub mod loop_baselines;
pub mod request_queues;
pub mod requests;
pub mod targets;
pub mod thread_counters;
pub mod thread_memory;
pub mod threads;
pub mod timed_waits;
