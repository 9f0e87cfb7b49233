//! Userspace state built from what the kernel recorded: targets, thread names, monotonic totals,
//! per-thread history, connections and their requests, listener queues. Nothing here touches a
//! kernel handle.

pub mod counters;
pub mod histogram;
pub mod history;
pub mod liveness;
pub mod request_queues;
pub mod requests;
pub mod targets;
pub mod threads;
