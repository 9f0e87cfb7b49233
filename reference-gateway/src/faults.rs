//! The fault switches: the current value of each, readable on every request and changeable at
//! run time by the admin endpoint.
//!
//! Requests read a snapshot (`Arc`) so a switch flips between requests, never in the middle of
//! one. Holds no sockets and no threads: the pool and the Redis clients live elsewhere and are
//! only *selected* by these values.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{FaultConfig, RedisClientMode};

/// The switchable part of the faults, as the admin endpoint shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultState {
    pub redis_client: RedisClientMode,
    /// `None` means `timeouts.upstream_response` applies.
    #[serde(with = "humantime_serde")]
    pub upstream_response_timeout: Option<Duration>,
    pub pool_enabled: bool,
    pub pool_permits_per_second: f64,
}

/// A partial update from `PUT /admin/faults`: absent fields keep their value.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPatch {
    pub redis_client: Option<RedisClientMode>,
    /// `"off"` clears the override.
    pub upstream_response_timeout: Option<String>,
    pub pool_enabled: Option<bool>,
    pub pool_permits_per_second: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("upstream_response_timeout: {0}")]
    Duration(#[from] humantime::DurationError),
    #[error("pool_permits_per_second must be a positive number")]
    Rate,
}

pub struct Faults {
    current: RwLock<Arc<FaultState>>,
}

impl Faults {
    pub fn new(config: &FaultConfig) -> Self {
        let state = FaultState {
            redis_client: config.redis_client,
            upstream_response_timeout: config.upstream_response_timeout,
            pool_enabled: config.pool.enabled,
            pool_permits_per_second: config.pool.permits_per_second,
        };
        Self { current: RwLock::new(Arc::new(state)) }
    }

    pub fn snapshot(&self) -> Arc<FaultState> {
        // A poisoned lock only means a writer panicked after validation; the value is whole.
        match self.current.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    pub fn apply(&self, patch: FaultPatch) -> Result<Arc<FaultState>, PatchError> {
        let mut next = (*self.snapshot()).clone();
        if let Some(m) = patch.redis_client {
            next.redis_client = m;
        }
        if let Some(t) = patch.upstream_response_timeout {
            next.upstream_response_timeout = if t == "off" { None } else { Some(humantime::parse_duration(&t)?) };
        }
        if let Some(e) = patch.pool_enabled {
            next.pool_enabled = e;
        }
        if let Some(r) = patch.pool_permits_per_second {
            if !(r > 0.0 && r.is_finite()) {
                return Err(PatchError::Rate);
            }
            next.pool_permits_per_second = r;
        }
        let next = Arc::new(next);
        match self.current.write() {
            Ok(mut g) => *g = Arc::clone(&next),
            Err(p) => *p.into_inner() = Arc::clone(&next),
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_changes_only_given_fields() {
        let f = Faults::new(&FaultConfig::default());
        let patch: FaultPatch =
            serde_json::from_str(r#"{"redis_client":"blocking","upstream_response_timeout":"1800s"}"#).unwrap();
        let s = f.apply(patch).unwrap();
        assert_eq!(s.redis_client, RedisClientMode::Blocking);
        assert_eq!(s.upstream_response_timeout, Some(Duration::from_secs(1800)));
        assert!(!s.pool_enabled);
        let s = f.apply(serde_json::from_str(r#"{"upstream_response_timeout":"off"}"#).unwrap()).unwrap();
        assert_eq!(s.upstream_response_timeout, None);
        assert!(serde_json::from_str::<FaultPatch>(r#"{"bogus":1}"#).is_err());
    }
}
