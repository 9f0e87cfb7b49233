//! A real redis-server on loopback for the access-check scenarios.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{free_port, listens_on, wait_for};

/// Fresh ports tried before giving up: each was free a moment before redis-server bound it.
const START_ATTEMPTS: usize = 5;

/// A real redis-server on a free loopback port, ours (not another test's that took the port
/// first); `None` (with the reason printed) when the binary is missing outside CI. In CI
/// (CI=true) a missing redis-server fails the test.
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
        for _ in 0..START_ATTEMPTS {
            match Self::start_on(free_port()) {
                Ok(redis) => return Some(redis),
                Err(port) => eprintln!("redis-server could not listen on port {port} (taken meanwhile); another port"),
            }
        }
        panic!("redis-server could not listen on any of {START_ATTEMPTS} free ports");
    }

    /// A redis-server listening on `port`; Err(port) when another process holds it, even another
    /// Redis that answers there.
    pub fn start_on(port: u16) -> Result<Redis, u16> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let mut redis = Redis { child, port };
        // Up once this redis-server listens on the port. A PING alone may be answered by another
        // test's Redis that took the port first: this test's keys would land there, and its
        // gateway and its CLIENT PAUSE would hit the other test's server.
        let up = wait_for(Duration::from_secs(10), || {
            if redis.child.try_wait().ok().flatten().is_some() {
                return Some(false); // could not listen there
            }
            let ping = || redis.try_conn().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok());
            (listens_on(redis.child.id(), port) && ping().is_some()).then_some(true)
        });
        match up {
            Some(true) => Ok(redis),
            Some(false) => Err(port),
            None => panic!("redis-server not listening on port {port} within 10 s"),
        }
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
