//! What the churn bench measures, at the baseline and after each phase: the kernel maps' entries
//! (the daemon's own gauges, and `bpftool` counting the hash maps it holds), what the live
//! targets really have (threads in /proc, TCP connections through their fds), the daemon's
//! memory, and the label values in `/metrics` that name processes, threads, peers and ports.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::fleet::Fleet;
use crate::demo::net::request;

/// Labels whose values name something that can go away.
const IDENTITY_LABELS: [&str; 5] = ["process", "thread", "thread_group", "peer", "port"];
/// Hash maps counted with bpftool (THREADS is an array: the daemon's gauge counts its slots).
pub(crate) const COUNTED_MAPS: [&str; 5] = ["TARGETS", "SOCKS", "LISTEN_PORTS", "BLOCK_DETAIL", "STACKS"];
/// The RSS goal: within this share of the baseline's.
pub(crate) const RSS_TOLERANCE: f64 = 0.10;
/// The heap's own bound: three quarters of the RSS are the kernel's ring buffers and the binary,
/// so ±10 % of RSS would let the heap grow fourfold unseen. A MiB covers caches that are meant
/// to stay (parsed symbol files, thread names of the baseline).
const HEAP_TOLERANCE_MIB: f64 = 1.0;

/// One scrape of `/metrics`, reduced to what the bench judges.
pub(crate) struct Scrape {
    map_entries: BTreeMap<String, f64>,
    /// The daemon's heap in use by live allocations (`gateway_observer_heap_bytes`), in MiB.
    heap_in_use_mib: f64,
    /// (label, value) → a series that carries it, for the report.
    identities: BTreeMap<(String, String), String>,
}

impl Scrape {
    pub(crate) fn map_entries(&self, map: &str) -> f64 {
        self.map_entries.get(map).copied().unwrap_or(f64::NAN)
    }
}

pub(crate) fn scrape(port: u16) -> Result<Scrape> {
    let response = request(port, "GET", "/metrics", "", Duration::from_secs(10))?;
    if response.status != 200 {
        bail!("GET /metrics answered {}", response.status);
    }
    Ok(parse_scrape(&response.body))
}

fn parse_scrape(text: &str) -> Scrape {
    let mut scrape = Scrape { map_entries: BTreeMap::new(), heap_in_use_mib: f64::NAN, identities: BTreeMap::new() };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Some((name, labels)) = series.split_once('{') else { continue };
        let labels: Vec<(&str, &str)> = labels
            .trim_end_matches('}')
            .split("\",")
            .filter_map(|pair| pair.split_once("=\""))
            .map(|(k, v)| (k, v.trim_end_matches('"')))
            .collect();
        if name == "gateway_observer_bpf_map_entries"
            && let Some((_, map)) = labels.iter().find(|(k, _)| *k == "map")
        {
            scrape.map_entries.insert((*map).to_owned(), value.parse().unwrap_or(f64::NAN));
        }
        if name == "gateway_observer_heap_bytes" && labels.contains(&("state", "in_use")) {
            scrape.heap_in_use_mib = value.parse::<f64>().unwrap_or(f64::NAN) / (1024.0 * 1024.0);
        }
        for (key, value) in labels.into_iter().filter(|(k, _)| IDENTITY_LABELS.contains(k)) {
            scrape.identities.entry((key.to_owned(), value.to_owned())).or_insert_with(|| series.to_owned());
        }
    }
    scrape
}

/// Pids of the processes in the daemon's snapshot.
pub(crate) fn snapshot_pids(port: u16) -> Result<Vec<u32>> {
    let response = request(port, "GET", "/api/v1/snapshot", "", Duration::from_secs(5))?;
    let snapshot: Value = serde_json::from_str(&response.body).context("the snapshot is not JSON")?;
    Ok(snapshot["processes"]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["pid"].as_u64()).map(|p| p as u32).collect())
        .unwrap_or_default())
}

/// Threads of a process (0 once it is gone).
pub(crate) fn task_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// TCP connections (not listeners) the process holds: its socket fds found among its network
/// namespace's TCP rows.
fn tcp_connections(pid: u32) -> usize {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
        .collect();
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok())
        .flat_map(|text| text.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter(|row| {
            let fields: Vec<&str> = row.split_whitespace().collect();
            fields.get(3) != Some(&"0A") && fields.get(9).is_some_and(|inode| inodes.contains(*inode))
        })
        .count()
}

/// Entries of the daemon's hash maps, by name, from `bpftool` (None where it cannot count one).
fn bpftool_entries(daemon: u32) -> BTreeMap<&'static str, Option<usize>> {
    let maps: Value = crate::util::output("bpftool", &["map", "show", "-j"])
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    // The daemon's maps: the map ids in its descriptors' fdinfo (this bpftool lists no pids).
    let ids: BTreeSet<u64> = std::fs::read_dir(format!("/proc/{daemon}/fdinfo"))
        .into_iter()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
        .filter_map(|info| info.lines().find_map(|l| l.strip_prefix("map_id:"))?.trim().parse().ok())
        .collect();
    let held = |m: &Value| m["id"].as_u64().is_some_and(|id| ids.contains(&id));
    COUNTED_MAPS
        .into_iter()
        .map(|name| {
            let id = maps
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["name"] == name && held(m))
                .and_then(|m| m["id"].as_u64());
            let count = id.and_then(|id| {
                let out = Command::new("bpftool").args(["map", "dump", "id", &id.to_string(), "-j"]).output().ok()?;
                let dump: Value = serde_json::from_slice(&out.stdout).ok()?;
                Some(dump.as_array()?.len())
            });
            (name, count)
        })
        .collect()
}

/// VmRSS and VmHWM of a process, in MiB.
fn memory_mib(pid: u32) -> Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("failed to read /proc/{pid}/status"))?;
    let field = |key: &str| -> Result<f64> {
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {key} in /proc/{pid}/status"))?;
        Ok(kib / 1024.0)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Everything measured at one instant.
pub(crate) struct Measurement {
    /// Since the phase ended.
    pub(crate) after: Duration,
    /// The daemon's gauges: targets, threads, sockets.
    pub(crate) gauges: BTreeMap<String, f64>,
    pub(crate) bpftool: BTreeMap<&'static str, Option<usize>>,
    /// What the live targets hold: processes, threads, TCP connections.
    pub(crate) live_threads: usize,
    pub(crate) live_connections: usize,
    pub(crate) rss_mib: f64,
    pub(crate) hwm_mib: f64,
    /// Live allocations: what RSS hides under the kernel maps mapped into the daemon.
    pub(crate) heap_mib: f64,
    identities: BTreeMap<(String, String), String>,
}

/// The measurement before any phase, which every later one is held to.
pub(crate) struct Baseline(pub(crate) Measurement);

impl Baseline {
    pub(crate) fn measure(fleet: &mut Fleet) -> Result<Baseline> {
        Ok(Baseline(Measurement::take(fleet, Instant::now())?))
    }

    pub(crate) fn describe(&self) -> String {
        self.0.describe_maps()
    }
}

impl Measurement {
    pub(crate) fn take(fleet: &mut Fleet, since: Instant) -> Result<Measurement> {
        let scrape = fleet.scrape()?;
        let (rss_mib, hwm_mib) = memory_mib(fleet.daemon_pid)?;
        Ok(Measurement {
            after: since.elapsed(),
            gauges: scrape.map_entries,
            bpftool: bpftool_entries(fleet.daemon_pid),
            live_threads: task_count(fleet.gateway_pid),
            live_connections: tcp_connections(fleet.gateway_pid),
            rss_mib,
            hwm_mib,
            heap_mib: scrape.heap_in_use_mib,
            identities: scrape.identities,
        })
    }

    fn gauge(&self, map: &str) -> f64 {
        self.gauges.get(map).copied().unwrap_or(f64::NAN)
    }

    pub(crate) fn entries(&self, map: &str) -> Option<usize> {
        self.bpftool.get(map).copied().flatten()
    }

    /// SOCKS entries beyond the connections the live targets hold (closing ones, TIME_WAIT).
    pub(crate) fn socks_excess(&self) -> Option<i64> {
        Some(self.entries("SOCKS")? as i64 - self.live_connections as i64)
    }

    /// Series naming a process, thread, thread group, peer or port the baseline did not have.
    pub(crate) fn gone_series(&self, baseline: &Baseline) -> Vec<String> {
        self.identities
            .iter()
            .filter(|(identity, _)| !baseline.0.identities.contains_key(*identity))
            .map(|((key, value), _)| format!("{key}=\"{value}\""))
            .collect()
    }

    pub(crate) fn rss_change(&self, baseline: &Baseline) -> f64 {
        self.rss_mib / baseline.0.rss_mib - 1.0
    }

    /// Each goal: (goal, figure, met).
    pub(crate) fn verdicts(&self, baseline: &Baseline) -> Vec<(String, String, bool)> {
        let b = &baseline.0;
        let mut out = Vec::new();
        out.push((
            "targets: the baseline gateway only".to_owned(),
            format!(
                "gauge {:.0}, TARGETS {} (baseline {})",
                self.gauge("targets"),
                show(self.entries("TARGETS")),
                show(b.entries("TARGETS"))
            ),
            self.gauge("targets") == b.gauge("targets") && self.entries("TARGETS") == b.entries("TARGETS"),
        ));
        out.push((
            "threads followed = the gateway's threads".to_owned(),
            format!("{:.0} followed, {} live", self.gauge("threads"), self.live_threads),
            self.gauge("threads") == self.live_threads as f64,
        ));
        out.push((
            "SOCKS: no more than the live connections need".to_owned(),
            format!(
                "{} entries for {} connections (baseline {} for {})",
                show(self.entries("SOCKS")),
                self.live_connections,
                show(b.entries("SOCKS")),
                b.live_connections
            ),
            matches!((self.socks_excess(), b.socks_excess()), (Some(now), Some(then)) if now <= then.max(0)),
        ));
        for map in ["LISTEN_PORTS", "BLOCK_DETAIL", "STACKS"] {
            out.push((
                format!("{map} back to the baseline"),
                format!("{} (baseline {})", show(self.entries(map)), show(b.entries(map))),
                matches!((self.entries(map), b.entries(map)), (Some(now), Some(then)) if now <= then),
            ));
        }
        let change = self.rss_change(baseline);
        out.push((
            "daemon RSS within ±10 % of the baseline".to_owned(),
            format!("{:.1} MiB ({:+.1} %), peak {:.1} MiB", self.rss_mib, change * 100.0, self.hwm_mib),
            change.abs() <= RSS_TOLERANCE,
        ));
        out.push((
            "daemon heap in use within 1 MiB of the baseline".to_owned(),
            format!("{:.2} MiB (baseline {:.2} MiB)", self.heap_mib, b.heap_mib),
            self.heap_mib - b.heap_mib <= HEAP_TOLERANCE_MIB,
        ));
        let gone = self.gone_series(baseline);
        out.push((
            "no series of a gone process, thread, peer or port".to_owned(),
            if gone.is_empty() { "none".to_owned() } else { format!("{}: {}", gone.len(), abbreviate(&gone)) },
            gone.is_empty(),
        ));
        out
    }

    pub(crate) fn clean(&self, baseline: &Baseline) -> bool {
        self.verdicts(baseline).iter().all(|(_, _, met)| *met)
    }

    fn describe_maps(&self) -> String {
        format!(
            "targets {:.0}, threads {:.0} ({} live), sockets {:.0} (bpftool: {}; {} live connections), RSS {:.1} MiB, heap in use {:.2} MiB",
            self.gauge("targets"),
            self.gauge("threads"),
            self.live_threads,
            self.gauge("sockets"),
            self.bpftool.iter().map(|(m, n)| format!("{m} {}", show(*n))).collect::<Vec<_>>().join(", "),
            self.live_connections,
            self.rss_mib,
            self.heap_mib
        )
    }

    pub(crate) fn describe(&self, baseline: &Baseline) -> String {
        let failed: Vec<String> = self
            .verdicts(baseline)
            .into_iter()
            .filter(|(_, _, met)| !met)
            .map(|(goal, figure, _)| format!("{goal}: {figure}"))
            .collect();
        format!(
            "after {:.0} s: {}; {}",
            self.after.as_secs_f64(),
            self.describe_maps(),
            if failed.is_empty() { "every goal met".to_owned() } else { format!("NOT MET: {}", failed.join("; ")) }
        )
    }
}

fn show(n: Option<usize>) -> String {
    n.map_or_else(|| "?".to_owned(), |n| n.to_string())
}

/// The first few of a long list, and how many more.
fn abbreviate(items: &[String]) -> String {
    match items.len() {
        0..=4 => items.join(", "),
        n => format!("{}, and {} more", items[..4].join(", "), n - 4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_keeps_map_gauges_and_identities() {
        let text = "# TYPE x counter\ngateway_observer_bpf_map_entries{map=\"threads\"} 12\n\
                    gateway_observer_thread_offcpu_seconds_total{process=\"churn-gateway\",thread_group=\"gw-worker-*\",reason=\"poll\"} 1.5\n\
                    gateway_observer_collections_total 3\n";
        let scrape = parse_scrape(text);
        assert_eq!(scrape.map_entries("threads"), 12.0);
        assert!(scrape.map_entries("sockets").is_nan());
        let keys: Vec<_> = scrape.identities.keys().cloned().collect();
        assert_eq!(
            keys,
            [("process".to_owned(), "churn-gateway".to_owned()), ("thread_group".to_owned(), "gw-worker-*".to_owned())]
        );
    }
}
