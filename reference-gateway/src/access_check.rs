//! The incident 1 access-check filter, backed by Redis: look the bearer token up, refresh its
//! TTL when it is below `token_ttl` (4 h), and turn its JSON value into user headers.
//!
//! Two clients do the same three commands (GET, TTL, EXPIRE when needed):
//! - `check_async`: redis' tokio `ConnectionManager`; the worker thread serves others meanwhile.
//! - `check_blocking`: redis' synchronous `Connection`, called directly on the tokio worker
//!   thread (no `spawn_blocking`, no `block_in_place`): the worker sits in a blocking socket read
//!   until Redis answers. That is the fault, on purpose; never "fix" it here.
//!
//! Token values are never logged.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::OnceCell;

use crate::config::RedisConfig;

/// Headers the filter owns: set from Redis, always stripped from what the client sent.
pub const USER_ID_HEADER: &str = "x-user-id";
pub const USER_NAME_HEADER: &str = "x-user-name";

/// What the token turned out to be.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    User {
        id: String,
        name: Option<String>,
    },
    /// Missing from Redis, or its value has no `userId`.
    Unknown,
    /// Redis failed or timed out; the message names the step, never the token.
    Error(String),
}

pub struct AccessCheck {
    client: redis::Client,
    manager: OnceCell<ConnectionManager>,
    /// Idle synchronous connections; each blocking check takes one so workers never share a socket.
    sync_idle: Mutex<Vec<redis::Connection>>,
    timeout: Duration,
    key_prefix: String,
    ttl_secs: i64,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid redis.url: {0}")]
pub struct BadUrl(#[from] redis::RedisError);

impl AccessCheck {
    pub fn new(config: &RedisConfig) -> Result<Self, BadUrl> {
        Ok(Self {
            client: redis::Client::open(config.url.as_str())?,
            manager: OnceCell::new(),
            sync_idle: Mutex::new(Vec::new()),
            timeout: config.timeout,
            key_prefix: config.key_prefix.clone(),
            ttl_secs: i64::try_from(config.token_ttl.as_secs()).unwrap_or(i64::MAX),
        })
    }

    fn key(&self, token: &str) -> String {
        format!("{}{}", self.key_prefix, token)
    }

    pub async fn check_async(&self, token: &str) -> Verdict {
        match tokio::time::timeout(self.timeout, self.check_async_inner(token)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => Verdict::Error(e),
            Err(_) => Verdict::Error("redis timed out".into()),
        }
    }

    async fn check_async_inner(&self, token: &str) -> Result<Verdict, String> {
        let manager = self
            .manager
            .get_or_try_init(|| self.client.get_connection_manager())
            .await
            .map_err(|e| format!("redis connect: {e}"))?;
        let mut con = manager.clone();
        let key = self.key(token);
        let value: Option<String> =
            redis::cmd("GET").arg(&key).query_async(&mut con).await.map_err(|e| format!("redis GET: {e}"))?;
        let Some(value) = value else { return Ok(Verdict::Unknown) };
        let ttl: i64 =
            redis::cmd("TTL").arg(&key).query_async(&mut con).await.map_err(|e| format!("redis TTL: {e}"))?;
        if ttl < self.ttl_secs {
            let _: i64 = redis::cmd("EXPIRE")
                .arg(&key)
                .arg(self.ttl_secs)
                .query_async(&mut con)
                .await
                .map_err(|e| format!("redis EXPIRE: {e}"))?;
        }
        Ok(parse_user(&value))
    }

    /// Runs on the calling thread and blocks it in socket reads until Redis answers.
    pub fn check_blocking(&self, token: &str) -> Verdict {
        let taken = self.lock_idle().pop();
        let mut con = match taken {
            Some(c) => c,
            None => match self.connect_sync() {
                Ok(c) => c,
                Err(e) => return Verdict::Error(e),
            },
        };
        let key = self.key(token);
        let result = (|| -> Result<Verdict, String> {
            let value: Option<String> =
                redis::cmd("GET").arg(&key).query(&mut con).map_err(|e| format!("redis GET: {e}"))?;
            let Some(value) = value else { return Ok(Verdict::Unknown) };
            let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut con).map_err(|e| format!("redis TTL: {e}"))?;
            if ttl < self.ttl_secs {
                let _: i64 = redis::cmd("EXPIRE")
                    .arg(&key)
                    .arg(self.ttl_secs)
                    .query(&mut con)
                    .map_err(|e| format!("redis EXPIRE: {e}"))?;
            }
            Ok(parse_user(&value))
        })();
        match result {
            // A failed connection may hold half a reply; only healthy ones go back.
            Ok(v) => {
                self.lock_idle().push(con);
                v
            }
            Err(e) => Verdict::Error(e),
        }
    }

    fn connect_sync(&self) -> Result<redis::Connection, String> {
        let con = self.client.get_connection_with_timeout(self.timeout).map_err(|e| format!("redis connect: {e}"))?;
        con.set_read_timeout(Some(self.timeout)).map_err(|e| format!("redis set timeout: {e}"))?;
        con.set_write_timeout(Some(self.timeout)).map_err(|e| format!("redis set timeout: {e}"))?;
        Ok(con)
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<redis::Connection>> {
        match self.sync_idle.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

/// The token from `Authorization: Bearer <token>`, if well formed.
pub fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    let ok = scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && token.len() <= 512
        && token.bytes().all(|b| b.is_ascii_graphic());
    ok.then_some(token)
}

fn parse_user(value: &str) -> Verdict {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(value) else { return Verdict::Unknown };
    let field = |name: &str| match json.get(name) {
        Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    match field("userId") {
        // Header values must be visible ASCII; anything else is treated as no user.
        Some(id) if id.bytes().all(|b| b.is_ascii_graphic()) => {
            Verdict::User { id, name: field("userName").filter(|n| n.bytes().all(|b| (b' '..=b'~').contains(&b))) }
        }
        _ => Verdict::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_user_and_bearer() {
        assert_eq!(
            parse_user(r#"{"userId":"u1","userName":"Ann"}"#),
            Verdict::User { id: "u1".into(), name: Some("Ann".into()) }
        );
        assert_eq!(parse_user(r#"{"userId":42}"#), Verdict::User { id: "42".into(), name: None });
        assert_eq!(parse_user(r#"{"userId":""}"#), Verdict::Unknown);
        assert_eq!(parse_user("not json"), Verdict::Unknown);
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "Bearer abc123".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("abc123"));
        h.insert(http::header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }
}
