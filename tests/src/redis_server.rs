//! A real redis-server on loopback for the access-check scenarios.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{free_port, wait_until};

/// A real redis-server on a free loopback port; `None` (with the reason printed) when the
/// binary is missing outside CI. In CI (CI=true) a missing redis-server fails the test.
pub struct Redis {
    child: Child,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Option<Redis> {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("redis-server").is_file()));
        if !found {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("redis-server not found on PATH and CI=true: install it (apt-get install redis-server)");
            }
            eprintln!(
                "SKIPPED: redis-server not found on PATH (apt-get install redis-server); this test needs a real Redis"
            );
            return None;
        }
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let redis = Redis { child, port };
        wait_until("redis-server PING", Duration::from_secs(10), || {
            redis.try_conn().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok()).is_some()
        });
        Some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_conn(&self) -> Option<redis::Connection> {
        redis::Client::open(self.url()).ok()?.get_connection_with_timeout(Duration::from_secs(1)).ok()
    }

    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to test redis")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
