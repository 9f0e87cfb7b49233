//! `reference-gateway`: the tokio/hyper reverse proxy that gateway-observer watches.
//!
//! A real, usable proxy (routes, upstream pools, timeouts, limits, access log, metrics, graceful
//! drain) with switchable faults that reproduce the three incidents in DESIGN.md. It imports
//! nothing from the observer: it must look to the observer like any other gateway.

mod access_check;
mod access_log;
mod admin;
mod app;
mod config;
mod conn_io;
mod faults;
mod framing;
mod headers;
mod metrics;
mod proxy;
mod rate_limiter;
mod responses;
mod routes;
mod rpc_pool;
mod server;
mod tls;
mod upstream;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::app::App;
use crate::config::Config;

// glibc malloc showed up at ~8 % of CPU under load (many small per-request allocations across
// worker threads); mimalloc's thread-local free lists make those cheap.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "reference-gateway", about = "Reverse proxy with switchable incident faults")]
struct Args {
    /// TOML configuration file (see examples/gateway.toml).
    #[arg(long)]
    config: PathBuf,
    /// Overrides server.workers.
    #[arg(long)]
    workers: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = Config::load(&args.config).with_context(|| format!("failed to load {}", args.config.display()))?;
    if let Some(w) = args.workers {
        config.server.workers = w;
        config.validate().context("invalid --workers")?;
    }
    // Names like Netty's reactor-http-nio-N, so the observer can group the event loops.
    let seq = AtomicUsize::new(0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.server.workers)
        .thread_name_fn(move || format!("gw-worker-{}", seq.fetch_add(1, Ordering::Relaxed)))
        .enable_all()
        .build()
        .context("failed to build the tokio runtime")?;
    let result = runtime.block_on(run(config));
    // Connections still open past the drain deadline are dropped here.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

async fn run(config: Config) -> anyhow::Result<()> {
    // Certificate and key are read (and checked to match) before any port is taken.
    let acceptor = match (&config.server.tls_certificate, &config.server.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(tls::Acceptor::from_files(cert, key)?)),
        _ => None,
    };
    let mut listeners = Vec::new();
    let plain = config.server.listen.iter().map(|a| (a, None));
    for (addr, tls) in plain.chain(config.server.tls_listen.iter().map(|a| (a, acceptor.clone()))) {
        let std_listener = server::bind(*addr).with_context(|| format!("failed to listen on {addr}"))?;
        let listener = TcpListener::from_std(std_listener).with_context(|| format!("failed to register {addr}"))?;
        listeners.push((listener, tls));
    }
    let admin_listener = match config.admin.listen {
        Some(addr) => {
            Some(TcpListener::bind(addr).await.with_context(|| format!("failed to listen on admin address {addr}"))?)
        }
        None => None,
    };
    let app = Arc::new(App {
        routes: routes::Routes::new(&config.routes),
        upstreams: upstream::Upstreams::new(&config.upstreams, &config.timeouts)?,
        faults: faults::Faults::new(&config.faults),
        access: access_check::AccessCheck::new(&config.redis).context("failed to set up the Redis client")?,
        pool: rpc_pool::RpcPool::new(config.faults.pool.core, config.faults.pool.max, config.faults.pool.keep_alive),
        limiter: Arc::new(rate_limiter::RateLimiter::new()),
        metrics: metrics::Metrics::default(),
        log: access_log::AccessLog::start(&config.access_log.output).context("failed to start the access log")?,
        config,
    });

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let max_conns = app.config.limits.max_connections;
    let conns = Arc::new(Semaphore::new(max_conns));
    for (l, tls) in listeners {
        let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let scheme = if tls.is_some() { "https" } else { "http" };
        eprintln!("reference-gateway: listening on {addr} ({scheme})");
        tokio::spawn(server::accept_loop(Arc::clone(&app), l, tls, Arc::clone(&conns), shutdown_rx.clone()));
    }
    if let Some(l) = admin_listener {
        let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        eprintln!("reference-gateway: admin on {addr}");
        tokio::spawn(admin::serve(Arc::clone(&app), l, shutdown_rx.clone()));
    }

    let signal = wait_for_signal().await?;
    let drain = app.config.server.drain_timeout;
    eprintln!(
        "reference-gateway: {signal}: no longer accepting, draining {} in-flight request(s) for up to {drain:?}",
        app.metrics.in_flight()
    );
    let _ = shutdown_tx.send(true);
    let all = u32::try_from(max_conns).unwrap_or(u32::MAX);
    match tokio::time::timeout(drain, conns.acquire_many(all)).await {
        Ok(_) => eprintln!("reference-gateway: drained, exiting"),
        Err(_) => eprintln!(
            "reference-gateway: drain deadline passed with {} connection(s) open, closing them",
            max_conns - conns.available_permits()
        ),
    }
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("failed to install the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("failed to install the SIGINT handler")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}
