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

use tests::{jvm::JvmGateway, redis_server::Redis};

/// A thread dump is asked for when the alert is pending and lands a tick after it returns; a dump
/// that caught the loop idle is followed by another a second later, three at most.
pub(crate) const JAVA_FRAMES_WITHIN: Duration = Duration::from_secs(5);

/// Netty's gateway, its access check asking a real redis-server; None (the test skips) without
/// one. The gateway is dropped before Redis.
pub(crate) fn netty_gateway() -> Option<(Redis, JvmGateway)> {
    let redis = Redis::start()?;
    let gateway = JvmGateway::start("NettyGateway", &[&redis.port.to_string()], &["-Xmx256m"]);
    Some((redis, gateway))
}
