//! The gateway's configuration file: TOML, unknown keys rejected, durations as humantime strings.
//!
//! Owns parsing, defaults and validation only; nothing here opens a socket. Precedence: the
//! `--workers` flag overrides `server.workers`; everything else comes from the file or the
//! defaults below, which are the safe values an SRE would expect from a production proxy.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// The file is not valid TOML for this schema (names the offending key).
    #[error("invalid config {path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    /// The file parses but its values contradict each other.
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub timeouts: TimeoutConfig,
    #[serde(default)]
    pub limits: LimitConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub access_log: AccessLogConfig,
    #[serde(default)]
    pub redis: RedisConfig,
    #[serde(default)]
    pub faults: FaultConfig,
    #[serde(default)]
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Client-facing listeners, plain HTTP (HTTP/1.1 and h2c).
    pub listen: Vec<SocketAddr>,
    /// Client-facing listeners served over TLS (HTTP/1.1 and h2, by ALPN or the client preface),
    /// with `tls_certificate` and `tls_key`.
    pub tls_listen: Vec<SocketAddr>,
    /// PEM certificate chain, the server's own certificate first.
    pub tls_certificate: Option<PathBuf>,
    /// PEM private key of that certificate.
    pub tls_key: Option<PathBuf>,
    /// Tokio worker threads (incident 1 had 4 event loops).
    pub workers: usize,
    /// How long in-flight requests may run after SIGTERM before connections are closed.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            tls_listen: Vec::new(),
            tls_certificate: None,
            tls_key: None,
            workers: 4,
            drain_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    /// TCP connect to an upstream server.
    #[serde(with = "humantime_serde")]
    pub connect: Duration,
    /// From request sent to response headers received (incident 3 used 1800 s).
    #[serde(with = "humantime_serde")]
    pub upstream_response: Duration,
    /// A client must send complete request headers within this (cuts slowloris).
    #[serde(with = "humantime_serde")]
    pub client_header: Duration,
    /// An idle keep-alive client connection is closed after this.
    #[serde(with = "humantime_serde")]
    pub idle: Duration,
    /// Idle pooled upstream connections are closed after this.
    #[serde(with = "humantime_serde")]
    pub upstream_idle: Duration,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(2),
            upstream_response: Duration::from_secs(30),
            client_header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            upstream_idle: Duration::from_secs(90),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitConfig {
    /// Request line plus headers; larger requests get 431. hyper needs at least 8192.
    pub max_header_bytes: usize,
    /// Request body; larger bodies get 413.
    pub max_body_bytes: u64,
    /// Concurrent client connections; beyond this a connection gets 503 and is closed.
    pub max_connections: usize,
}

impl Default for LimitConfig {
    fn default() -> Self {
        Self { max_header_bytes: 16 * 1024, max_body_bytes: 10 * 1024 * 1024, max_connections: 10_000 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Admin listener (`/admin/faults`, `/metrics`, `/health`); must be a loopback address.
    pub listen: Option<SocketAddr>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self { listen: Some(SocketAddr::from(([127, 0, 0, 1], 9901))) }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogConfig {
    /// `"stdout"`, `"off"`, or a file path to append JSON lines to.
    pub output: String,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        Self { output: "stdout".to_owned() }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    pub url: String,
    /// Per-command timeout, both clients.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Prepended to the bearer token to form the Redis key.
    pub key_prefix: String,
    /// The TTL the access check refreshes a token to when it is below it (incident 1: 4 h).
    #[serde(with = "humantime_serde")]
    pub token_ttl: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379/".to_owned(),
            timeout: Duration::from_secs(1),
            key_prefix: String::new(),
            token_ttl: Duration::from_secs(4 * 3600),
        }
    }
}

/// Which Redis client the access check uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RedisClientMode {
    /// tokio client; the worker thread keeps serving other connections while waiting.
    #[default]
    Async,
    /// Synchronous client on the worker thread (the incident 1 fault).
    Blocking,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultConfig {
    pub redis_client: RedisClientMode,
    /// Overrides `timeouts.upstream_response` while set (incident 3: 1800 s).
    #[serde(with = "humantime_serde")]
    pub upstream_response_timeout: Option<Duration>,
    pub pool: PoolFaultConfig,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self { redis_client: RedisClientMode::Async, upstream_response_timeout: None, pool: PoolFaultConfig::default() }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolFaultConfig {
    /// When true, `handler = "pool"` routes run on the bounded thread pool behind the limiter.
    pub enabled: bool,
    /// Threads kept even when idle.
    pub core: usize,
    /// Hard cap on threads; with no queue, a request finding all busy gets 503.
    pub max: usize,
    /// Threads above `core` exit after this long idle.
    #[serde(with = "humantime_serde")]
    pub keep_alive: Duration,
    /// Token-bucket rate; `acquire` sleeps the pool thread until its permit is due.
    pub permits_per_second: f64,
}

impl Default for PoolFaultConfig {
    fn default() -> Self {
        Self { enabled: false, core: 10, max: 1024, keep_alive: Duration::from_secs(60), permits_per_second: 1.0 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    pub servers: Vec<SocketAddr>,
    /// Consecutive failures (connect errors, timeouts) that eject a server.
    #[serde(default = "default_max_fails")]
    pub max_fails: u32,
    /// How long an ejected server is skipped before it gets traffic again.
    #[serde(default = "default_fail_timeout", with = "humantime_serde")]
    pub fail_timeout: Duration,
    /// Idle keep-alive connections kept per server.
    #[serde(default = "default_keepalive")]
    pub keepalive: usize,
    /// Speak TLS to the servers (through the system's OpenSSL).
    #[serde(default)]
    pub tls: bool,
    /// PEM CA certificates trusted for the servers, besides the system's.
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// Sent as SNI and checked against the certificate; by default the server's IP is checked.
    #[serde(default)]
    pub tls_server_name: Option<String>,
    /// `false` checks no certificate at all: only for self-signed test upstreams.
    #[serde(default = "default_true")]
    pub tls_verify: bool,
}

fn default_max_fails() -> u32 {
    3
}
fn default_fail_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_keepalive() -> usize {
    64
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AccessCheckMode {
    #[default]
    Off,
    /// Known tokens get user headers; unknown ones pass without them.
    Optional,
    /// Unknown or missing tokens get 401.
    Protected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HandlerKind {
    #[default]
    Proxy,
    /// A local "RPC" handler, run on the bounded pool when the pool fault is on.
    Pool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Exact host (port ignored) or absent for any host.
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default = "default_prefix")]
    pub path_prefix: String,
    #[serde(default)]
    pub upstream: Option<String>,
    #[serde(default)]
    pub handler: HandlerKind,
    #[serde(default)]
    pub access_check: AccessCheckMode,
}

fn default_prefix() -> String {
    "/".to_owned()
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let config: Config =
            toml::from_str(&text).map_err(|source| ConfigError::Parse { path: path.to_owned(), source })?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let server = &self.server;
        if server.listen.is_empty() && server.tls_listen.is_empty() {
            return invalid("server.listen and server.tls_listen are both empty".into());
        }
        match (server.tls_listen.is_empty(), &server.tls_certificate, &server.tls_key) {
            (false, Some(_), Some(_)) | (true, None, None) => {}
            (false, _, _) => {
                return invalid("server.tls_listen needs server.tls_certificate and server.tls_key".into());
            }
            (true, _, _) => {
                return invalid(
                    "server.tls_certificate and server.tls_key are for server.tls_listen, which is empty".into(),
                );
            }
        }
        if self.server.workers == 0 {
            return invalid("server.workers must be at least 1".into());
        }
        if self.limits.max_header_bytes < 8192 {
            return invalid("limits.max_header_bytes must be at least 8192 (hyper's minimum buffer)".into());
        }
        if self.limits.max_connections == 0 {
            return invalid("limits.max_connections must be at least 1".into());
        }
        if let Some(admin) = self.admin.listen
            && !admin.ip().is_loopback()
        {
            return invalid(format!("admin.listen {admin} is not a loopback address"));
        }
        let pool = &self.faults.pool;
        if pool.max == 0 || pool.core > pool.max {
            return invalid(format!("faults.pool needs 0 < core <= max (core {}, max {})", pool.core, pool.max));
        }
        if !(pool.permits_per_second > 0.0 && pool.permits_per_second.is_finite()) {
            return invalid("faults.pool.permits_per_second must be a positive number".into());
        }
        for (name, up) in &self.upstreams {
            if up.servers.is_empty() {
                return invalid(format!("upstream {name} has no servers"));
            }
            if up.max_fails == 0 {
                return invalid(format!("upstream {name}: max_fails must be at least 1"));
            }
            if !up.tls && (up.tls_ca.is_some() || up.tls_server_name.is_some() || !up.tls_verify) {
                return invalid(format!("upstream {name}: tls_ca, tls_server_name and tls_verify need tls = true"));
            }
            if !up.tls_verify && up.tls_ca.is_some() {
                return invalid(format!("upstream {name}: tls_ca is unused with tls_verify = false"));
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            if !r.path_prefix.starts_with('/') {
                return invalid(format!("routes[{i}].path_prefix must start with '/'"));
            }
            match (r.handler, &r.upstream) {
                (HandlerKind::Proxy, None) => return invalid(format!("routes[{i}] proxies but names no upstream")),
                (HandlerKind::Proxy, Some(u)) if !self.upstreams.contains_key(u) => {
                    return invalid(format!("routes[{i}] names unknown upstream {u}"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, String> {
        let c: Config = toml::from_str(s).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn defaults_are_the_safe_ones() {
        let c = parse("").unwrap();
        assert_eq!(c.timeouts.connect, Duration::from_secs(2));
        assert_eq!(c.timeouts.upstream_response, Duration::from_secs(30));
        assert_eq!(c.timeouts.client_header, Duration::from_secs(10));
        assert_eq!(c.server.workers, 4);
        assert_eq!(c.faults.pool.max, 1024);
        assert_eq!(c.faults.redis_client, RedisClientMode::Async);
    }

    #[test]
    fn example_config_is_valid() {
        let c = parse(include_str!("../gateway.toml")).unwrap();
        assert_eq!(c.routes.len(), 3);
        assert_eq!(c.upstreams["backend"].servers.len(), 2);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = parse("[timeouts]\nconect = \"1s\"").unwrap_err();
        assert!(e.contains("conect"), "{e}");
    }

    #[test]
    fn full_route_and_fault_config() {
        let c = parse(
            r#"
            [faults]
            redis_client = "blocking"
            upstream_response_timeout = "1800s"
            [faults.pool]
            enabled = true
            max = 16
            [upstreams.api]
            servers = ["127.0.0.1:9000"]
            [[routes]]
            host = "api.local"
            path_prefix = "/v1"
            upstream = "api"
            access_check = "protected"
            "#,
        )
        .unwrap();
        assert_eq!(c.faults.redis_client, RedisClientMode::Blocking);
        assert_eq!(c.faults.upstream_response_timeout, Some(Duration::from_secs(1800)));
        assert_eq!(c.routes[0].access_check, AccessCheckMode::Protected);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse("[admin]\nlisten = \"0.0.0.0:9901\"").unwrap_err().contains("loopback"));
        assert!(parse("[[routes]]\nupstream = \"nope\"").unwrap_err().contains("unknown upstream"));
        assert!(parse("[limits]\nmax_header_bytes = 100").is_err());
        assert!(parse("[faults.pool]\ncore = 20\nmax = 10").is_err());
    }

    #[test]
    fn tls_options_come_together() {
        let c = parse(
            "[server]\nlisten = []\ntls_listen = [\"127.0.0.1:8443\"]\ntls_certificate = \"c.pem\"\ntls_key = \"k.pem\"\n\
             [upstreams.u]\nservers = [\"127.0.0.1:9000\"]\ntls = true\ntls_ca = \"ca.pem\"",
        )
        .unwrap();
        assert!(c.upstreams["u"].tls && c.upstreams["u"].tls_verify);
        assert!(parse("[server]\ntls_listen = [\"127.0.0.1:8443\"]").unwrap_err().contains("tls_certificate"));
        assert!(parse("[server]\ntls_key = \"k.pem\"").unwrap_err().contains("tls_listen"));
        assert!(parse("[server]\nlisten = []").unwrap_err().contains("both empty"));
        let up = "[upstreams.u]\nservers = [\"127.0.0.1:9000\"]\n";
        assert!(parse(&format!("{up}tls_ca = \"ca.pem\"")).unwrap_err().contains("need tls = true"));
        assert!(parse(&format!("{up}tls = true\ntls_verify = false\ntls_ca = \"a\"")).unwrap_err().contains("unused"));
    }
}
