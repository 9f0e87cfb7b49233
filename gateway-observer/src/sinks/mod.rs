//! Where results go: Prometheus text, the HTTP server. Sinks read what the collector made; they
//! never touch the kernel.

pub mod families;
pub mod http;
pub mod prometheus;
pub mod publication;
pub mod request_metrics;
