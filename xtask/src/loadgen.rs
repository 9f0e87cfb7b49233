//! An open-loop HTTP/1.1 load generator in wrk2's model: each of N keep-alive connections sends
//! its share of a fixed rate at scheduled instants, and a request's latency is taken from its
//! *scheduled* instant, so a stall delays every request queued behind it and counts in the
//! percentiles (no coordinated omission). Bounded in time: nothing is scheduled after the
//! duration, and whatever is still unsent a grace period later is counted, not sent.
//!
//! One thread per connection with blocking sockets: at 10k req/s over 64 connections each thread
//! sleeps ~6 ms between requests, and a blocking read wakes as soon as the response lands.

use std::io::{BufReader, Write as _};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::demo::net::read_response;

/// How long past the schedule's end a connection may keep sending what it is late on.
const GRACE: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: xtask-loadgen\r\n\r\n";

#[derive(Clone, Copy)]
pub(crate) struct LoadSpec {
    pub(crate) port: u16,
    pub(crate) rate: f64,
    pub(crate) connections: usize,
    pub(crate) duration: Duration,
}

pub(crate) struct LoadResult {
    /// 2xx responses completed within the duration, per second.
    pub(crate) achieved_rps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// Failed requests: I/O errors, timeouts, non-2xx.
    pub(crate) errors: u64,
    /// Scheduled requests never sent because the connection was more than GRACE behind.
    pub(crate) unsent: u64,
}

/// Load under way; `finish` waits for it and sums the connections.
pub(crate) struct Running {
    threads: Vec<JoinHandle<ConnStats>>,
    duration: Duration,
}

#[derive(Default)]
struct ConnStats {
    latencies_us: Vec<u32>,
    in_window: u64,
    errors: u64,
    unsent: u64,
}

/// Starts the load now; the schedule begins a few milliseconds ahead so every thread is up.
pub(crate) fn start(spec: LoadSpec) -> Result<Running> {
    if spec.rate <= 0.0 || spec.connections == 0 {
        bail!("the load needs a positive rate and at least one connection");
    }
    let t0 = Instant::now() + Duration::from_millis(20);
    let threads = (0..spec.connections)
        .map(|index| {
            std::thread::Builder::new()
                .name(format!("loadgen-{index}"))
                .spawn(move || connection(spec, index, t0))
                .context("failed to spawn a load generator thread")
        })
        .collect::<Result<_>>()?;
    Ok(Running { threads, duration: spec.duration })
}

impl Running {
    pub(crate) fn finish(self) -> Result<LoadResult> {
        let mut total = ConnStats::default();
        for thread in self.threads {
            let s = thread.join().map_err(|_| anyhow::anyhow!("a load generator thread panicked"))?;
            total.latencies_us.extend(s.latencies_us);
            total.in_window += s.in_window;
            total.errors += s.errors;
            total.unsent += s.unsent;
        }
        total.latencies_us.sort_unstable();
        Ok(LoadResult {
            achieved_rps: total.in_window as f64 / self.duration.as_secs_f64(),
            p50_ms: percentile_ms(&total.latencies_us, 0.50),
            p99_ms: percentile_ms(&total.latencies_us, 0.99),
            errors: total.errors,
            unsent: total.unsent,
        })
    }
}

/// One connection's schedule: request k at t0 + offset + k * interval, connections staggered
/// evenly across one interval so the aggregate is smooth rather than 64-request bursts.
fn connection(spec: LoadSpec, index: usize, t0: Instant) -> ConnStats {
    precise_sleeps();
    let interval = Duration::from_secs_f64(spec.connections as f64 / spec.rate);
    let start = t0 + interval.mul_f64(index as f64 / spec.connections as f64);
    let end = t0 + spec.duration;
    let mut stats = ConnStats::default();
    let mut conn = Conn::default();
    for k in 0.. {
        let scheduled = start + interval * k;
        if scheduled >= end {
            break;
        }
        let now = Instant::now();
        if now > end + GRACE {
            stats.unsent += ((end - scheduled).as_secs_f64() / interval.as_secs_f64()).ceil() as u64;
            break;
        }
        if scheduled > now {
            std::thread::sleep(scheduled - now);
        }
        match conn.request(spec.port) {
            Ok(status) if (200..300).contains(&status) => {
                let done = Instant::now();
                let us = (done - scheduled).as_micros();
                stats.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                stats.in_window += u64::from(done <= end);
            }
            Ok(_) => stats.errors += 1,
            Err(_) => {
                stats.errors += 1;
                conn = Conn::default(); // a fresh connection for the next request
            }
        }
    }
    stats
}

/// Timer slack of 1 ns instead of the default 50 µs, so sleeps end when scheduled.
fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// A keep-alive connection, opened on first use and again after an error or `Connection: close`.
#[derive(Default)]
struct Conn(Option<BufReader<TcpStream>>);

impl Conn {
    /// Sends one request and reads its whole response; returns the status.
    fn request(&mut self, port: u16) -> Result<u16> {
        let stream = match &mut self.0 {
            Some(s) => s,
            None => self.0.insert(BufReader::new(connect(port)?)),
        };
        stream.get_mut().write_all(REQUEST)?;
        let response = read_response(stream)?;
        if !response.keep_alive {
            self.0 = None;
        }
        Ok(response.status)
    }
}

fn connect(port: u16) -> Result<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(stream)
}

fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len());
    f64::from(sorted_us[rank - 1]) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u32> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile_ms(&v, 0.50), 50.0);
        assert_eq!(percentile_ms(&v, 0.99), 99.0);
    }
}
