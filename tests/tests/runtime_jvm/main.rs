//! Gateways on the JVM, built from libraries this project did not write (Debian's Netty 4.1 and
//! Guava, the JDK's own com.sun.net.httpserver), watched from outside while they serve, then
//! broken in the same running process, then healed (fixtures in `tests/fixtures/jvm/`, harness in
//! `tests/src/jvm.rs`). Each scenario runs a healthy phase under load first, with the observer
//! already watching: nothing may fire. Then a fault is switched on over the fixture's stdin, and
//! the test waits for the alert the fault must raise, prints how long detection took, heals, and
//! prints how long resolution took. Lines starting `SUMMARY` collect the measurements.
//!
//! What the faults look like to the kernel (see /work/shared/RUNTIMES.md): `future.get(timeout)`,
//! `Thread.sleep` and Guava's `RateLimiter.acquire()` are timed futex waits; `future.get()`,
//! `join()`, Reactor's `block()` and a contended `synchronized` are untimed ones, which is also how
//! an idle JVM worker waits for work.
//!
//! One module per scenario family, one test binary.

mod cold_start;
mod dispatcher;
mod netty;
mod pause;
mod pools;

use std::time::Duration;

use tests::{jvm::JvmGateway, observer::Observer, redis_server::Redis};

/// The observer's tick in these tests (`Observer::start`).
const TICK: Duration = Duration::from_millis(500);
/// A thread dump is asked for at the alert's first tick, while it is pending (1 s: two ticks
/// before it fires), and a loop's request dumps again at once if it caught the loop idle: the Java
/// frames are in the evidence when the alert fires, one tick later at the latest (issue 17). The
/// margin: the tests poll every 100 ms, and a loaded host delays a tick by up to 200 ms.
pub(crate) const JAVA_FRAMES_WITHIN: Duration = Duration::from_millis(TICK.as_millis() as u64 + 300);

/// What `pick` finds in the evidence of a `kind` alert (the first that has it), once there:
/// `JAVA_FRAMES_WITHIN` after `name`'s alert was seen firing at most; prints how long after.
pub(crate) fn java_evidence(
    observer: &Observer,
    kind: &str,
    name: &str,
    pick: impl Fn(&serde_json::Value) -> Option<serde_json::Value>,
) -> serde_json::Value {
    let (value, after) = tests::alerts::wait_for_evidence(observer, kind, JAVA_FRAMES_WITHIN, pick);
    eprintln!("SUMMARY {name}: Java frames in the evidence {after:.0?} after the alert was seen firing");
    value
}

/// A blocked loop's `java_stack`.
pub(crate) fn java_stack(evidence: &serde_json::Value) -> Option<serde_json::Value> {
    Some(evidence["java_stack"].clone()).filter(|stack| !stack.is_null())
}

/// Netty's gateway, its access check asking a real redis-server; None (the test skips) without
/// one. The gateway is dropped before Redis.
pub(crate) fn netty_gateway() -> Option<(Redis, JvmGateway)> {
    let redis = Redis::start()?;
    let gateway = JvmGateway::start("NettyGateway", &[&redis.port.to_string()], &["-Xmx256m"]);
    Some((redis, gateway))
}
