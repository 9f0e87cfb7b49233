//! Userspace state built from what the kernel recorded: targets, thread names, monotonic totals.
//! Nothing here touches a kernel handle.

pub mod counters;
pub mod liveness;
pub mod quotas;
pub mod targets;
pub mod threads;
