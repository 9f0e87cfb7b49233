//! What the collector publishes for the HTTP handlers. Alerts and readiness are published after
//! every tick. `/metrics` and the snapshot are rendered only when someone asks, at most once per
//! tick: Prometheus scrapes every 15 s or more, and rendering both every second cost an idle
//! daemon with 2,000 followed threads more than reading them did.
//!
//! A handler that finds its rendering older than the last tick asks the collector's loop for a
//! new one and waits for it (bounded by [`RENDER_WAIT`]; past that it serves the older one).

use std::{
    sync::Arc,
    sync::atomic::{AtomicU8, Ordering},
    time::Duration,
};

use tokio::sync::{Notify, watch};

/// Renderings a handler may ask for.
pub const METRICS: u8 = 1;
pub const SNAPSHOT: u8 = 2;

/// How long a handler waits for a rendering it asked for; the collector's loop renders between
/// two of its steps, so only a collection far slower than usual makes it wait that long.
pub const RENDER_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Default)]
pub struct Published {
    pub metrics: Arc<String>,
    pub alerts_json: Arc<String>,
    pub snapshot_json: Arc<String>,
    pub ready: bool,
    /// Ticks so far, and the tick each rendering is of.
    pub tick: u64,
    pub metrics_tick: u64,
    pub snapshot_tick: u64,
}

impl Published {
    fn is_fresh(&self, what: u8) -> bool {
        let rendered = if what == METRICS { self.metrics_tick } else { self.snapshot_tick };
        rendered >= self.tick
    }
}

/// Renderings asked for since the collector's loop last looked.
#[derive(Debug, Default)]
pub struct RenderRequests {
    wanted: AtomicU8,
    notify: Notify,
}

impl RenderRequests {
    pub fn ask(&self, what: u8) {
        self.wanted.fetch_or(what, Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// Waits until something is asked for, and takes what is.
    pub async fn asked(&self) -> u8 {
        self.notify.notified().await;
        self.wanted.swap(0, Ordering::Relaxed)
    }
}

/// The handlers' end: the latest publication and where to ask for a new rendering.
#[derive(Debug, Clone)]
pub struct Shared {
    pub published: watch::Receiver<Published>,
    pub renders: Arc<RenderRequests>,
}

impl Shared {
    /// The publication, with `what` rendered for the last tick if the collector answers within
    /// [`RENDER_WAIT`].
    pub async fn fresh(&self, what: u8) -> Published {
        let mut published = self.published.clone();
        if !published.borrow().is_fresh(what) {
            self.renders.ask(what);
            let _ = tokio::time::timeout(RENDER_WAIT, published.wait_for(|p| p.is_fresh(what))).await;
        }
        published.borrow().clone()
    }

    pub fn latest(&self) -> Published {
        self.published.borrow().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stale_rendering_is_asked_for_once_and_served_when_it_comes() {
        let (publish, published) = watch::channel(Published { tick: 3, metrics_tick: 2, ..Published::default() });
        let renders = Arc::new(RenderRequests::default());
        let shared = Shared { published, renders: Arc::clone(&renders) };
        let collector = tokio::spawn(async move {
            let asked = renders.asked().await;
            publish.send_modify(|p| {
                p.metrics = Arc::new(format!("rendered for {asked}"));
                p.metrics_tick = p.tick;
            });
            publish
        });
        let served = shared.fresh(METRICS).await;
        assert_eq!(served.metrics.as_str(), "rendered for 1", "only the metrics were asked for");
        let _publish = collector.await.expect("collector task");
        let again = shared.fresh(METRICS).await;
        assert_eq!(again.metrics_tick, 3, "fresh for this tick: served without asking");
    }

    #[tokio::test(start_paused = true)]
    async fn a_collector_that_never_answers_costs_the_wait_then_the_older_rendering() {
        let stale =
            Published { tick: 2, snapshot_tick: 1, snapshot_json: Arc::new("old".into()), ..Default::default() };
        let (_publish, published) = watch::channel(stale);
        let shared = Shared { published, renders: Arc::default() };
        let started = tokio::time::Instant::now();
        let served = shared.fresh(SNAPSHOT).await;
        assert_eq!(served.snapshot_json.as_str(), "old");
        assert_eq!(started.elapsed(), RENDER_WAIT);
    }
}
