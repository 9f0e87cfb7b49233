//! `gateway-observer run`: load and attach the probes, follow the targets, serve /metrics until
//! SIGINT or SIGTERM, then detach everything (dropping the aya objects detaches the programs).
//! SIGHUP is logged and ignored: there is no configuration reload.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
    sync::watch,
};

use super::RunArgs;
use crate::{
    alerts::{
        self, AlertState,
        lifecycle::{AlertBook, LifecycleConfig},
    },
    api::v1,
    collector::Collector,
    config::Config,
    detect::loop_threads::EventLoopConfig,
    events,
    host::privileges,
    host::procfs,
    probes::quotas::Quotas,
    probes::{DataHooks, ProbeSettings, Probes},
    sinks::{
        families,
        http::{self, Published},
        prometheus::Exposition,
        publication,
    },
    state::targets::{self, PortListeners, TargetSpec},
    uprobe_opener::{UprobeOpener, UprobePmu, helper::Helper},
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
    if let Some(path) = &args.api_token_file {
        config.api_token_file = Some(path.clone());
    }
    config.tls_plaintext |= args.tls_plaintext;
    if let Some(interval) = args.interval {
        config.interval = interval;
    }
    if let Some(threshold) = args.block_threshold {
        config.block_threshold = threshold;
    }
    if let Some(busy) = args.busy_iteration {
        config.busy_iteration = busy;
    }
    if let Some(url) = &args.alertmanager {
        config.alertmanager = Some(url.clone());
    }
    if let Some(nice) = args.nice {
        config.nice = nice;
    }
    config.validate().map_err(|e| RunError::Usage(e.to_string()))?;
    if let Some(path) = &config.api_token_file {
        // Read again when the listener starts; a bad file is a usage error before any probe loads.
        http::ApiAccess::from_token_file(path).map_err(RunError::Usage)?;
    }
    if config.targets.is_empty() {
        return Err(RunError::Usage("no target: pass --target pid=N, comm=NAME, port=N or cgroup=PATH".into()));
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

/// How often the ring buffers are drained when the kernel has not asked for it (it wakes the
/// daemon only when a ring is a quarter full). Records carry their own times, the tick drains
/// both rings before it looks, and it reads open spans from the slots, so a longer period delays
/// no finding; it makes batches larger, and a batch pays for bringing the connections' state back
/// into cache once (at 10k requests/s a 20 ms period cost the daemon a third more CPU).
const RING_DRAIN: Duration = Duration::from_millis(100);

fn drain_events(ring: &mut aya::maps::RingBuf<aya::maps::MapData>, collector: &mut Collector) {
    while let Some(item) = ring.next() {
        match events::decode(&item) {
            Ok(record) => collector.handle_record(record),
            Err(_) => collector.count_decode_error(),
        }
    }
}

fn drain_sockets(ring: &mut aya::maps::RingBuf<aya::maps::MapData>, collector: &mut Collector) {
    let mut drained = 0;
    while let Some(item) = ring.next() {
        collector.handle_socket_bytes(&item);
        drained += 1;
    }
    collector.after_socket_drain(drained);
}

/// Firing alerts are posted again this often: Alertmanager forgets one after its resolve_timeout
/// (5 min by default) without a post.
const ALERTMANAGER_REPOST: Duration = Duration::from_secs(60);

/// Posts the current alerts in the background; a failed push is logged and retried at the next
/// change or repost, never allowed to stall collection.
fn push_alerts(url: String, book: &AlertBook) {
    let alerts: Vec<alerts::Alert> = book.alerts().into_iter().cloned().collect();
    if alerts.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let refs: Vec<&alerts::Alert> = alerts.iter().collect();
        if let Err(err) = alerts::alertmanager::push(&url, &refs, Duration::from_secs(5)).await {
            tracing::warn!(error = %err, "Alertmanager push failed");
        }
    });
}

/// Logs one alert transition on stdout; false once stdout is closed or failing, after which the
/// daemon stops writing there (the API and the metrics still carry every alert).
fn log_transition(line: &str) -> bool {
    let why = match super::output::line(&crate::printable::json_text(line.to_owned())) {
        Ok(true) => return true,
        Ok(false) => "closed".to_owned(),
        Err(e) => e.to_string(),
    };
    tracing::warn!("stdout {why}: alert transitions are no longer logged there");
    false
}

/// Renders what the HTTP handlers asked for (`publication::METRICS`, `SNAPSHOT`) into the
/// publication, as of the last tick.
fn render(published: &mut Published, asked: u8, collector: &Collector, book: &AlertBook) {
    if asked & publication::METRICS != 0 {
        let mut metrics = collector.render_metrics();
        metrics.push_str(&alert_metrics(book));
        published.metrics = Arc::new(metrics);
        published.metrics_tick = published.tick;
    }
    if asked & publication::SNAPSHOT != 0 {
        published.snapshot_json = Arc::new(v1::body(&collector.snapshot()));
        published.snapshot_tick = published.tick;
    }
}

/// After a tick: the alerts, always (Alertmanager and `top` follow them); the metrics and the
/// snapshot are stale from now on and rendered when next asked for.
fn publish_tick(published: &mut Published, book: &AlertBook) {
    let alerts = v1::Alerts { alerts: book.alerts().into_iter().map(v1::Alert::from).collect() };
    published.alerts_json = Arc::new(v1::body(&alerts));
    published.ready = true;
    published.tick += 1;
}

/// `gateway_observer_alerts{kind,process,subject}`: 1 while firing, 0 while pending or resolved.
/// A resolved alert leaves `/metrics` after `GONE_SERIES_KEEP` (the API lists it 10 minutes):
/// its process may be gone, and the series would name it that long.
fn alert_metrics(book: &AlertBook) -> String {
    let mut e = Exposition::default();
    let name = &families::ALERTS;
    e.family(name);
    let now = std::time::SystemTime::now();
    let recent = |at: std::time::SystemTime| {
        now.duration_since(at).unwrap_or_default() < crate::state::liveness::GONE_SERIES_KEEP
    };
    for alert in book.alerts().iter().filter(|a| a.resolved_at().is_none_or(recent)) {
        let labels = [("kind", alert.kind().as_str()), ("process", alert.comm()), ("subject", alert.subject())];
        e.sample(name, &labels, f64::from(u8::from(alert.state() == AlertState::Firing)));
    }
    e.finish()
}

/// Sets the daemon's nice value. Called before any other thread starts: threads inherit it.
pub fn set_nice(nice: i32) {
    // SAFETY: setpriority with constant arguments; it only changes this process's priority.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        tracing::warn!(nice, error = %std::io::Error::last_os_error(), "cannot set the nice value");
    }
}

pub async fn run(config: Config) -> Result<(), RunError> {
    let mut probes = Probes::load(ProbeSettings {
        block_threshold: config.block_threshold,
        max_threads: config.max_threads,
        busy_iteration: config.busy_iteration,
        quotas: Quotas { threads: config.thread_quota(), connections: config.connection_quota() },
        tls_plaintext: config.tls_plaintext,
    })
    .context("failed to load the eBPF programs (run `gateway-observer check`)")?;
    let attached = probes.attach_all().context("failed to attach the probes (run `gateway-observer check`)")?;
    match &attached.data {
        Ok(source) => tracing::info!("socket bytes from {}", source.describe()),
        Err(e) => tracing::warn!("degraded: no source of socket bytes ({e}): requests are not timed"),
    }
    if let (Ok(DataHooks::SocketTracepoints), Err(e)) = (&attached.data, &attached.walk_continuations) {
        tracing::warn!("degraded: HTTP/2 frames past a transfer's head are not walked ({e})");
    }
    for (optional, e) in &attached.missing {
        tracing::warn!("degraded: no {} ({e}): {}", optional.capability, optional.consequence);
    }
    // Everything the daemon runs is attached: the parsed kernel BTF and what loading freed
    // would otherwise stay resident for its whole life.
    probes.forget_kernel_btf();
    crate::heap::give_back_freed();
    let ring = probes.take_events().context("failed to open the event ring buffer")?;
    // SAFETY: the ring buffer owns its fd and is moved into the AsyncFd, which deregisters it
    // before dropping it; the fd is never closed while registered.
    let mut ring =
        unsafe { AsyncFd::register(ring) }.map_err(|e| anyhow::anyhow!("failed to poll the event ring buffer: {e}"))?;
    let sockets = probes.take_socket_events().context("failed to open the socket ring buffer")?;
    // SAFETY: as for `ring` above.
    let mut sockets = unsafe { AsyncFd::register(sockets) }
        .map_err(|e| anyhow::anyhow!("failed to poll the socket ring buffer: {e}"))?;
    let event_loop = EventLoopConfig {
        busy_iteration: config.busy_iteration,
        include: config.event_loops.include.clone(),
        exclude: config.event_loops.exclude.clone(),
        ..EventLoopConfig::default()
    };
    let mut collector = Collector::new(probes, config.targets.clone(), event_loop);
    collector.set_request_queueing_threshold(config.request_queueing);
    collector.set_requests_stalled(config.requests_stalled.clone());
    if config.tls_plaintext {
        collector.enable_tls_plaintext(tls_uprobe_opener(&config.targets)?);
    }
    collector.set_thread_dumps(config.jvm.thread_dumps);
    collector.tick().context("first collection failed")?;

    let access = match &config.api_token_file {
        Some(path) => http::ApiAccess::from_token_file(path).map_err(RunError::Usage)?,
        None => http::ApiAccess::default(),
    };
    let listener = http::bind(config.listen).await.with_context(|| format!("failed to listen on {}", config.listen))?;
    // Loaded, attached and bound: from here on only what the daemon still does. Before the server
    // task and any Alertmanager push start a thread, since capabilities are per thread.
    let kept = privileges::drop_to_kept().context("failed to drop capabilities")?;
    tracing::info!("{kept}");
    let mut book = AlertBook::new(LifecycleConfig::default());
    let mut first = Published::default();
    publish_tick(&mut first, &book);
    render(&mut first, publication::METRICS | publication::SNAPSHOT, &collector, &book);
    let (publish, published) = watch::channel(first);
    let renders = Arc::new(publication::RenderRequests::default());
    let published = publication::Shared { published, renders: Arc::clone(&renders) };
    let (stop_server, mut server_stopped) = watch::channel(false);
    let server = tokio::spawn(http::serve(listener, published, http::ServeLimits::default(), access, async move {
        let _ = server_stopped.wait_for(|stop| *stop).await;
    }));
    tracing::info!("watching {} target spec(s), metrics on http://{}/metrics", config.targets.len(), config.listen);

    let mut sigterm = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut sighup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let mut log_transitions = true;
    let mut last_push = std::time::Instant::now();
    let mut ring_drain = tokio::time::interval(RING_DRAIN);
    ring_drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticker = tokio::time::interval(config.interval);
    // Ticks stay on one grid: a tick that fires late (a busy host) does not move the next ones.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            scheduled = ticker.tick() => {
                // What the rings hold is up to a drain period old: the tick judges it too.
                drain_events(ring.get_mut(), &mut collector);
                drain_sockets(sockets.get_mut(), &mut collector);
                if let Err(err) = collector.tick() {
                    tracing::error!(error = %err, "collection failed, retrying next tick");
                }
                // Alerts are judged at the tick's scheduled time, not when the collection ended:
                // ticks are then whole intervals apart, and a condition held for two 500 ms ticks
                // has been pending 1 s, not 0.998 s and one more tick (a collection or a wakeup
                // a few ms later than the one that opened the alert delayed it a whole interval,
                // in about half the runs).
                let now = SystemTime::now().checked_sub(scheduled.elapsed()).unwrap_or_else(SystemTime::now);
                let transitions = book.evaluate(now, collector.findings());
                for transition in &transitions {
                    if log_transitions {
                        log_transitions = log_transition(&alerts::log::transition_line(now, transition));
                    }
                }
                if let Some(url) = &config.alertmanager
                    && (!transitions.is_empty() || last_push.elapsed() >= ALERTMANAGER_REPOST)
                {
                    last_push = std::time::Instant::now();
                    push_alerts(url.clone(), &book);
                }
                publish.send_modify(|published| publish_tick(published, &book));
            }
            asked = renders.asked() => {
                publish.send_modify(|published| render(published, asked, &collector, &book));
            }
            guard = ring.readable_mut() => {
                let mut guard = guard.context("event ring buffer failed")?;
                drain_events(guard.get_inner_mut(), &mut collector);
                guard.clear_ready();
            }
            // The kernel wakes us only when a ring is a quarter full; otherwise both are drained
            // on this timer, so a busy gateway costs a wakeup per period, not one per record.
            _ = ring_drain.tick() => {
                drain_events(ring.get_mut(), &mut collector);
                drain_sockets(sockets.get_mut(), &mut collector);
            }
            guard = sockets.readable_mut() => {
                let mut guard = guard.context("socket ring buffer failed")?;
                drain_sockets(guard.get_inner_mut(), &mut collector);
                guard.clear_ready();
            }
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            // Its default action would kill the daemon (a `systemctl reload`, a terminal that
            // closed). The configuration is read once at start: nothing to reload.
            _ = sighup.recv() => {
                tracing::info!("SIGHUP ignored: the configuration is read at start; restart to apply a new one");
            }
        }
    }
    let _ = stop_server.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    drop(ring);
    drop(sockets);
    drop(collector); // detaches every program
    tracing::info!("detached, exiting");
    Ok(())
}

/// The uprobe opener of `--tls-plaintext`: a helper forked now, while the daemon has one thread
/// and CAP_SYS_ADMIN, so targets that start after the capability drop are hooked too
/// (`uprobe_opener`). It accepts only pids these specs select.
fn tls_uprobe_opener(specs: &[TargetSpec]) -> anyhow::Result<UprobeOpener> {
    let pmu = UprobePmu::read().context("--tls-plaintext: no uprobe PMU in /sys/bus/event_source")?;
    const CAP_SYS_ADMIN: u32 = 21;
    let effective =
        std::fs::read_to_string("/proc/self/status").ok().and_then(|s| procfs::parse_effective_capabilities(&s));
    let admin = effective.is_none_or(|caps| caps & 1 << CAP_SYS_ADMIN != 0);
    if !admin {
        tracing::warn!(
            "degraded: started without CAP_SYS_ADMIN, which the kernel requires to open uprobes: no TLS library will be hooked"
        );
    }
    let specs = specs.to_vec();
    let mut listeners = PortListeners::default();
    let is_target = move |pid| {
        listeners.refresh(&specs, std::time::Instant::now());
        targets::selects(&specs, &listeners, pid)
    };
    let helper = Helper::spawn(pmu, is_target).context("--tls-plaintext: cannot start the uprobe helper")?;
    if admin {
        tracing::info!(pid = helper.pid(), "TLS uprobes opened by a helper that keeps CAP_SYS_ADMIN");
    }
    Ok(UprobeOpener::Helper(helper))
}
