//! The daemon's configuration: a TOML file plus flags. Precedence: flag > file > default.
//! Unknown keys are rejected with their name; durations are humantime strings ("10ms", "1s").

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;

use crate::{detect::stalled::StalledConfig, state::targets::TargetSpec};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of /metrics, /live, /ready and the API (which answers loopback clients only,
    /// unless `api_token_file` is set).
    pub listen: SocketAddr,
    /// A file holding the bearer token with which clients other than loopback ones may read the
    /// API (`Authorization: Bearer <token>`); none: loopback clients only.
    pub api_token_file: Option<PathBuf>,
    /// Processes to watch (`pid=N`, `comm=NAME`, `port=N`, `cgroup=PATH`); flags add to these.
    pub targets: Vec<TargetSpec>,
    /// How often maps are read and metrics refreshed.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Off-CPU waits at least this long are sent from the kernel as events.
    #[serde(with = "humantime_serde")]
    pub block_threshold: Duration,
    /// An event-loop iteration on CPU at least this long is reported (EventLoopBusy).
    #[serde(with = "humantime_serde")]
    pub busy_iteration: Duration,
    /// Request bytes waiting unread in a target's socket this long raise RequestQueueing.
    #[serde(with = "humantime_serde")]
    pub request_queueing: Duration,
    /// When requests read and unanswered while the process idles raise RequestsStalled.
    pub requests_stalled: StalledConfig,
    /// How many target threads the kernel can follow at once (each slot is
    /// `THREAD_STATE_SIZE`, 840 bytes, of locked kernel memory). Threads beyond it are counted in bpf_map_full_total.
    pub max_threads: u32,
    /// Thread slots one target process may hold (default: a quarter of `max_threads`), so that
    /// any process a spec selects cannot take the room of the others. Beyond it a target's new
    /// threads are not followed (counted in quota_refused_total).
    pub max_threads_per_target: Option<u32>,
    /// Connections one target process may have followed at once (default: a quarter of the
    /// kernel's 65,536).
    pub max_connections_per_target: Option<u32>,
    /// Alertmanager to push alerts to (`http://host:port`), or none.
    pub alertmanager: Option<String>,
    /// Thread-name patterns that add or remove event loops.
    pub event_loops: EventLoopPatterns,
    /// HTTPS requests read from the targets' OpenSSL calls (uprobes per target process). Off by
    /// default: each hooked call traps into the kernel (README, TLS, for what it costs).
    pub tls_plaintext: bool,
    /// The daemon's nice value: by default it yields the CPU to the gateways it watches, so
    /// its bursts of decoding do not show in their tail latency.
    pub nice: i32,
    /// `[jvm]`: what the daemon may ask of the JVMs it watches.
    pub jvm: JvmConfig,
}

/// `[jvm]`: `thread_dumps` lets an EventLoopBlocked or PoolSaturated alert on a HotSpot JVM take
/// one thread dump (HotSpot's dynamic attach, as `jstack`) per alert per minute, for the Java
/// frames in its evidence; each costs the JVM a safepoint pause (see the README).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JvmConfig {
    pub thread_dumps: bool,
}

impl Default for JvmConfig {
    fn default() -> Self {
        Self { thread_dumps: true }
    }
}

/// `[event_loops]`: `include` names threads that are event loops even before they are seen
/// polling (a loop already stuck when the daemon starts); `exclude` names threads that never are.
/// Patterns match whole thread names; `*` matches any run of characters.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventLoopPatterns {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: crate::sinks::http::default_listen(),
            api_token_file: None,
            targets: Vec::new(),
            interval: Duration::from_secs(1),
            block_threshold: Duration::from_millis(10),
            max_threads: gateway_observer_common::MAX_THREADS,
            max_threads_per_target: None,
            max_connections_per_target: None,
            tls_plaintext: false,
            busy_iteration: Duration::from_millis(100),
            request_queueing: Duration::from_millis(200),
            requests_stalled: StalledConfig::default(),
            alertmanager: None,
            event_loops: EventLoopPatterns::default(),
            nice: 10,
            jvm: JvmConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config: {0}")]
    Invalid(String),
}

impl Config {
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse { path: path.display().to_string(), message },
            other => other,
        })
    }

    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: String::new(), message: e.message().to_owned() })?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval < Duration::from_millis(100) {
            return Err(ConfigError::Invalid(format!("interval {:?} is below 100ms", self.interval)));
        }
        if self.interval > Duration::from_secs(2) {
            // The detectors judge 5 s windows and need at least half a window of samples.
            return Err(ConfigError::Invalid(format!("interval {:?} is above 2s", self.interval)));
        }
        if self.block_threshold < Duration::from_micros(100) {
            return Err(ConfigError::Invalid(format!(
                "block_threshold {:?} is below 100µs: the ring buffer would flood",
                self.block_threshold
            )));
        }
        if let Some(url) = &self.alertmanager
            && !url.starts_with("http://")
        {
            return Err(ConfigError::Invalid(format!("alertmanager {url:?} must be an http:// URL")));
        }
        if self.busy_iteration < Duration::from_millis(1) {
            return Err(ConfigError::Invalid(format!("busy_iteration {:?} is below 1ms", self.busy_iteration)));
        }
        if self.request_queueing < Duration::from_millis(10) {
            return Err(ConfigError::Invalid(format!("request_queueing {:?} is below 10ms", self.request_queueing)));
        }
        if let Some(problem) = self.requests_stalled.problem() {
            return Err(ConfigError::Invalid(format!("requests_stalled: {problem}")));
        }
        if !(-20..=19).contains(&self.nice) {
            return Err(ConfigError::Invalid(format!("nice {} is outside -20..=19", self.nice)));
        }
        if !(16..=1 << 20).contains(&self.max_threads) {
            return Err(ConfigError::Invalid(format!("max_threads {} is outside 16..=1048576", self.max_threads)));
        }
        if !(1..=self.max_threads).contains(&self.thread_quota()) {
            return Err(ConfigError::Invalid(format!(
                "max_threads_per_target {} is outside 1..=max_threads ({})",
                self.thread_quota(),
                self.max_threads
            )));
        }
        if !(1..=gateway_observer_common::MAX_SOCKETS).contains(&self.connection_quota()) {
            return Err(ConfigError::Invalid(format!(
                "max_connections_per_target {} is outside 1..={}",
                self.connection_quota(),
                gateway_observer_common::MAX_SOCKETS
            )));
        }
        Ok(())
    }

    /// Thread slots one target may hold.
    pub fn thread_quota(&self) -> u32 {
        self.max_threads_per_target.unwrap_or(self.max_threads / 4)
    }

    /// Connections one target may have followed.
    pub fn connection_quota(&self) -> u32 {
        self.max_connections_per_target.unwrap_or(gateway_observer_common::MAX_SOCKETS / 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_default_to_a_quarter_and_stay_within_the_maps() {
        let config = Config::default();
        assert_eq!((config.thread_quota(), config.connection_quota()), (4096, 16384));
        let small: Config = toml::from_str("max_threads = 64").expect("parses");
        assert_eq!(small.thread_quota(), 16);
        for bad in [
            "max_threads_per_target = 0",
            "max_threads = 64\nmax_threads_per_target = 65",
            "max_connections_per_target = 65537",
        ] {
            let config: Config = toml::from_str(bad).expect("parses");
            assert!(config.validate().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(Config::from_toml("").expect("parses"), Config::default());
    }

    #[test]
    fn full_file() {
        let config = Config::from_toml(
            r#"
            listen = "127.0.0.1:9999"
            targets = ["pid=12", "comm=nginx"]
            interval = "500ms"
            block_threshold = "50ms"
            max_threads = 4096
            [requests_stalled]
            age = "1s"
            min_requests = 8
            [event_loops]
            include = ["reactor-http-nio-*"]
            exclude = ["pool-*"]
            [jvm]
            thread_dumps = false
            "#,
        )
        .expect("parses");
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(config.targets, vec![TargetSpec::Pid(12), TargetSpec::Comm("nginx".into())]);
        assert_eq!(config.interval, Duration::from_millis(500));
        assert_eq!(config.block_threshold, Duration::from_millis(50));
        assert_eq!(config.max_threads, 4096);
        assert_eq!(config.requests_stalled.age, Duration::from_secs(1));
        assert_eq!(config.requests_stalled.min_requests, 8);
        assert_eq!(config.requests_stalled.prompt, Duration::from_millis(100), "a key left out keeps its default");
        assert_eq!(config.event_loops.include, vec!["reactor-http-nio-*".to_owned()]);
        assert_eq!(config.event_loops.exclude, vec!["pool-*".to_owned()]);
        assert!(!config.jvm.thread_dumps);
        assert!(Config::default().jvm.thread_dumps, "on unless turned off");
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::from_toml("listne = \"127.0.0.1:1\"").expect_err("rejected").to_string();
        assert!(err.contains("listne"), "{err}");
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let err = Config::from_toml("interval = \"soon\"").expect_err("rejected").to_string();
        assert!(err.contains("soon") || err.contains("invalid"), "{err}");
        let err = Config::from_toml("targets = [\"pid=zero\"]").expect_err("rejected").to_string();
        assert!(err.contains("pid"), "{err}");
        let err = Config::from_toml("interval = \"1ms\"").expect_err("rejected").to_string();
        assert!(err.contains("below 100ms"), "{err}");
        let err = Config::from_toml("alertmanager = \"am:9093\"").expect_err("rejected").to_string();
        assert!(err.contains("http://"), "{err}");
        let err = Config::from_toml("[requests_stalled]\nprompt = \"2s\"").expect_err("rejected").to_string();
        assert!(err.contains("requests_stalled: prompt 2s must be above zero and below age 500ms"), "{err}");
        let err = Config::from_toml("[requests_stalled]\nage_ms = 5").expect_err("rejected").to_string();
        assert!(err.contains("age_ms"), "{err}");
    }
}
