//! The gateway's own Prometheus metrics (`reference_gateway_` prefix) and their text exposition.
//!
//! Plain atomics in one explicit registry passed around in `App`; no global. Labels are bounded
//! enums (status class, error kind), never paths, peers or ports.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency histogram, seconds.
const BUCKETS: [f64; 16] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// Why a request to an upstream failed; one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamErrorKind {
    ConnectRefused,
    ConnectTimeout,
    Connect,
    ResponseTimeout,
    /// Reset, closed early or a malformed response.
    Protocol,
    /// The TLS handshake failed (certificate not trusted, name mismatch, no common protocol).
    Tls,
}

impl UpstreamErrorKind {
    const ALL: [Self; 6] =
        [Self::ConnectRefused, Self::ConnectTimeout, Self::Connect, Self::ResponseTimeout, Self::Protocol, Self::Tls];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConnectRefused => "connect_refused",
            Self::ConnectTimeout => "connect_timeout",
            Self::Connect => "connect_other",
            Self::ResponseTimeout => "response_timeout",
            Self::Protocol => "protocol",
            Self::Tls => "tls_handshake",
        }
    }
}

/// Outcome of the Redis access check.
#[derive(Debug, Clone, Copy)]
pub enum AccessResult {
    Allowed,
    Unknown,
    Error,
}

#[derive(Default)]
pub struct Metrics {
    requests: [AtomicU64; 5],
    buckets: [AtomicU64; BUCKETS.len() + 1],
    duration_sum_us: AtomicU64,
    in_flight: AtomicI64,
    upstream_errors: [AtomicU64; UpstreamErrorKind::ALL.len()],
    upstream_ejections: AtomicU64,
    connections_open: AtomicI64,
    connections_rejected: AtomicU64,
    /// Client connections to a TLS listener whose handshake failed or timed out.
    tls_handshake_failures: AtomicU64,
    access: [AtomicU64; 3],
}

/// Pool numbers read at scrape time (the pool owns them).
pub struct PoolStats {
    pub threads: usize,
    pub busy: usize,
    pub rejected: u64,
}

impl Metrics {
    pub fn request_started(&self) {
        self.in_flight.fetch_add(1, Relaxed);
    }

    /// Pairs with `request_started`, also for requests dropped before an answer.
    pub fn request_done(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }

    pub fn request_finished(&self, status: u16, took: Duration) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.requests[class].fetch_add(1, Relaxed);
        let secs = took.as_secs_f64();
        let i = BUCKETS.iter().position(|b| secs <= *b).unwrap_or(BUCKETS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.duration_sum_us.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    pub fn upstream_error(&self, kind: UpstreamErrorKind) {
        let i = UpstreamErrorKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.upstream_errors[i].fetch_add(1, Relaxed);
    }

    pub fn upstream_ejected(&self) {
        self.upstream_ejections.fetch_add(1, Relaxed);
    }

    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Relaxed);
    }

    pub fn connection_rejected(&self) {
        self.connections_rejected.fetch_add(1, Relaxed);
    }

    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.fetch_add(1, Relaxed);
    }

    pub fn access_check(&self, r: AccessResult) {
        self.access[r as usize].fetch_add(1, Relaxed);
    }

    pub fn in_flight(&self) -> i64 {
        self.in_flight.load(Relaxed)
    }

    pub fn render(&self, pool: &PoolStats) -> String {
        let mut o = String::with_capacity(4096);
        let p = "reference_gateway";
        // Writing to a String cannot fail; the results are ignored for that reason.
        let _ = writeln!(o, "# HELP {p}_requests_total Requests answered, by status class.");
        let _ = writeln!(o, "# TYPE {p}_requests_total counter");
        for (i, c) in self.requests.iter().enumerate() {
            let _ = writeln!(o, "{p}_requests_total{{status_class=\"{}xx\"}} {}", i + 1, c.load(Relaxed));
        }
        let _ =
            writeln!(o, "# HELP {p}_request_duration_seconds Time from request headers read to response headers sent.");
        let _ = writeln!(o, "# TYPE {p}_request_duration_seconds histogram");
        let mut cumulative = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            cumulative += b.load(Relaxed);
            let le = BUCKETS.get(i).map_or_else(|| "+Inf".to_owned(), |v| v.to_string());
            let _ = writeln!(o, "{p}_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.duration_sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(o, "{p}_request_duration_seconds_sum {sum}");
        let _ = writeln!(o, "{p}_request_duration_seconds_count {cumulative}");
        let _ = writeln!(o, "# HELP {p}_in_flight_requests Requests being handled now.");
        let _ = writeln!(o, "# TYPE {p}_in_flight_requests gauge");
        let _ = writeln!(o, "{p}_in_flight_requests {}", self.in_flight.load(Relaxed));
        let _ = writeln!(o, "# HELP {p}_upstream_errors_total Failed upstream requests, by kind.");
        let _ = writeln!(o, "# TYPE {p}_upstream_errors_total counter");
        for (k, c) in UpstreamErrorKind::ALL.iter().zip(&self.upstream_errors) {
            let _ = writeln!(o, "{p}_upstream_errors_total{{kind=\"{}\"}} {}", k.as_str(), c.load(Relaxed));
        }
        let _ = writeln!(o, "# HELP {p}_upstream_ejections_total Servers ejected by passive health checks.");
        let _ = writeln!(o, "# TYPE {p}_upstream_ejections_total counter");
        let _ = writeln!(o, "{p}_upstream_ejections_total {}", self.upstream_ejections.load(Relaxed));
        let _ = writeln!(o, "# TYPE {p}_connections_open gauge");
        let _ = writeln!(o, "{p}_connections_open {}", self.connections_open.load(Relaxed));
        let _ = writeln!(o, "# TYPE {p}_connections_rejected_total counter");
        let _ = writeln!(o, "{p}_connections_rejected_total {}", self.connections_rejected.load(Relaxed));
        let _ = writeln!(o, "# HELP {p}_tls_handshake_failures_total Client TLS handshakes failed or timed out.");
        let _ = writeln!(o, "# TYPE {p}_tls_handshake_failures_total counter");
        let _ = writeln!(o, "{p}_tls_handshake_failures_total {}", self.tls_handshake_failures.load(Relaxed));
        let _ = writeln!(o, "# HELP {p}_access_checks_total Redis access checks, by result.");
        let _ = writeln!(o, "# TYPE {p}_access_checks_total counter");
        for (name, c) in ["allowed", "unknown", "error"].iter().zip(&self.access) {
            let _ = writeln!(o, "{p}_access_checks_total{{result=\"{name}\"}} {}", c.load(Relaxed));
        }
        let _ = writeln!(o, "# HELP {p}_rpc_pool_threads Threads of the bounded rpc pool, by state.");
        let _ = writeln!(o, "# TYPE {p}_rpc_pool_threads gauge");
        let _ = writeln!(o, "{p}_rpc_pool_threads{{state=\"busy\"}} {}", pool.busy);
        let _ = writeln!(o, "{p}_rpc_pool_threads{{state=\"idle\"}} {}", pool.threads - pool.busy);
        let _ = writeln!(o, "# TYPE {p}_rpc_pool_rejected_total counter");
        let _ = writeln!(o, "{p}_rpc_pool_rejected_total {}", pool.rejected);
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let m = Metrics::default();
        m.request_started();
        m.request_finished(200, Duration::from_millis(3));
        m.request_done();
        m.request_started();
        m.request_finished(504, Duration::from_secs(2));
        m.request_done();
        let text = m.render(&PoolStats { threads: 0, busy: 0, rejected: 0 });
        assert!(text.contains("reference_gateway_request_duration_seconds_bucket{le=\"0.005\"} 1"), "{text}");
        assert!(text.contains("reference_gateway_request_duration_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("reference_gateway_requests_total{status_class=\"5xx\"} 1"));
        assert!(text.contains("reference_gateway_in_flight_requests 0"));
    }
}
