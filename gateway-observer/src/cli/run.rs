//! `gateway-observer run`: load and attach the probes, follow the targets, serve /metrics until
//! SIGINT or SIGTERM, then detach everything (dropping the aya objects detaches the programs).

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
    sync::watch,
};

use super::RunArgs;
use crate::{
    collector::Collector,
    config::Config,
    events,
    probes::{ProbeSettings, Probes},
    procfs,
    sinks::http::{self, Published},
    state::targets::TargetSpec,
};

/// Why `run` stopped early: usage problems exit 2, everything else 1.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Flags over file over defaults.
pub fn effective_config(args: &RunArgs) -> Result<Config, RunError> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(|e| RunError::Usage(e.to_string()))?,
        None => Config::default(),
    };
    config.targets.extend(args.targets.iter().cloned());
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(interval) = args.interval {
        config.interval = interval;
    }
    if let Some(threshold) = args.block_threshold {
        config.block_threshold = threshold;
    }
    config.validate().map_err(|e| RunError::Usage(e.to_string()))?;
    if config.targets.is_empty() {
        return Err(RunError::Usage("no target: pass --target pid=N or --target comm=NAME".into()));
    }
    for spec in &config.targets {
        if let TargetSpec::Pid(pid) = spec
            && !procfs::exists(*pid)
        {
            return Err(RunError::Usage(format!("target pid={pid}: no such process")));
        }
    }
    Ok(config)
}

pub async fn run(config: Config) -> Result<(), RunError> {
    let mut probes = Probes::load(ProbeSettings { block_threshold: config.block_threshold, max_threads: config.max_threads })
        .context("failed to load the eBPF programs (run `gateway-observer check`)")?;
    probes.attach_all().context("failed to attach the probes (run `gateway-observer check`)")?;
    let ring = probes.take_events().context("failed to open the event ring buffer")?;
    // SAFETY: the ring buffer owns its fd and is moved into the AsyncFd, which deregisters it
    // before dropping it; the fd is never closed while registered.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("failed to poll the event ring buffer: {e}"))?;
    let mut collector = Collector::new(probes, config.targets.clone());
    collector.tick().context("first collection failed")?;

    let listener = http::bind(config.listen)
        .await
        .with_context(|| format!("failed to listen on {}", config.listen))?;
    let (publish, published) = watch::channel(Published {
        metrics: Arc::new(collector.render_metrics()),
        ready: true,
    });
    let (stop_server, mut server_stopped) = watch::channel(false);
    let server = tokio::spawn(http::serve(listener, published, async move {
        let _ = server_stopped.wait_for(|stop| *stop).await;
    }));
    eprintln!("gateway-observer: watching {} target spec(s), metrics on http://{}/metrics", config.targets.len(), config.listen);

    let mut sigterm = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut ticker = tokio::time::interval(config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                if let Err(err) = collector.tick() {
                    eprintln!("gateway-observer: collection failed, retrying next tick: {err}");
                }
                publish.send_replace(Published { metrics: Arc::new(collector.render_metrics()), ready: true });
            }
            guard = ring.readable_mut() => {
                let mut guard = guard.context("event ring buffer failed")?;
                let ring = guard.get_inner_mut();
                while let Some(item) = ring.next() {
                    match events::decode(&item) {
                        Ok(record) => collector.handle_record(record),
                        Err(_) => collector.count_decode_error(),
                    }
                }
                guard.clear_ready();
            }
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    let _ = stop_server.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    drop(ring);
    drop(collector); // detaches every program
    eprintln!("gateway-observer: detached, exiting");
    Ok(())
}
