//! Everything a request handler needs, built once from the config and shared by `Arc`.
//!
//! No globals: main builds an `App` and hands it to the listeners and the admin server.

use std::sync::Arc;

use crate::access_check::AccessCheck;
use crate::access_log::AccessLog;
use crate::config::Config;
use crate::faults::Faults;
use crate::metrics::{Metrics, PoolStats};
use crate::rate_limiter::RateLimiter;
use crate::routes::Routes;
use crate::rpc_pool::RpcPool;
use crate::upstream::Upstreams;

pub struct App {
    pub config: Config,
    pub routes: Routes,
    pub upstreams: Upstreams,
    pub faults: Faults,
    pub access: AccessCheck,
    pub pool: RpcPool,
    pub limiter: Arc<RateLimiter>,
    pub metrics: Metrics,
    pub log: AccessLog,
}

impl App {
    pub fn render_metrics(&self) -> String {
        let (threads, busy, rejected) = self.pool.stats();
        self.metrics.render(&PoolStats { threads, busy, rejected })
    }
}
