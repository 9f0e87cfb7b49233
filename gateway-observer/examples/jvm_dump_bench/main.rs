//! What one thread dump, taken as the daemon takes it, costs a JVM: a JVM with N threads parked
//! some frames deep (`ParkedThreads.java`) is dumped through `jvm_attach::attach::thread_dump`,
//! the daemon's own code path, several times per size. The pause is read from the JVM's side:
//! its hsperfdata counters before and after each dump. HotSpot 17 runs a dump as three
//! safepoints (`PrintThreads`, `PrintJNI`, `FindDeadlocks`, as `-Xlog:safepoint` shows);
//! `sun.rt.safepointSyncTime` sums their time to stop every thread and `sun.rt.safepointTime`
//! their time stopped after that (-Xlog's "At safepoint"), so a thread that stopped first was held
//! for both. A Java thread running throughout reports the longest gap between two of its clock
//! reads: the longest single hold as a running thread saw it (an upper bound: it also counts time
//! the host's scheduler took the CPU away, as windows without a dump show). Run by `cargo xtask bench jvm-dump`; arguments: SIZES (`200,1024`) REPEATS
//! DEPTH.

mod jvm;

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use gateway_observer::{
    host::hsperfdata::{JvmCounters, file},
    jvm_attach::{attach, dump},
};
use jvm::{Classes, Jvm};

/// How long the Java thread runs per measurement; the dump starts `DUMP_AFTER` into it.
const SPIN_MS: u64 = 1_000;
const DUMP_AFTER: Duration = Duration::from_millis(300);
/// Windows without a dump per size: the host's own stalls.
const QUIET_WINDOWS: usize = 3;

/// The safepoint counters of one reading, in ns.
#[derive(Clone, Copy)]
struct Safepoints {
    count: u64,
    /// Stopped, once every thread was (`sun.rt.safepointTime`).
    at_ns: u64,
    /// Stopping them (`sun.rt.safepointSyncTime`).
    sync_ns: u64,
}

/// One dump's cost.
struct Sample {
    pause: Safepoints,
    wall: Duration,
    stall_ns: u64,
    threads: usize,
    bytes: usize,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [sizes, repeats, depth] = args.as_slice() else { bail!("usage: jvm_dump_bench SIZES REPEATS DEPTH") };
    let sizes: Vec<usize> = sizes.split(',').map(str::parse).collect::<Result<_, _>>().context("SIZES")?;
    let repeats: usize = repeats.parse().context("REPEATS")?;
    let depth: usize = depth.parse().context("DEPTH")?;
    let classes = Classes::compile()?;
    println!("each dump as the daemon takes it; {depth} frames per parked thread; {repeats} dumps per size");
    println!(
        "{:>8} {:>8} {:>7} {:>22} {:>22} {:>11} {:>22} {:>22} {:>12}",
        "parked",
        "threads",
        "dump",
        "stopped median/max",
        "of which reaching",
        "safepoints",
        "Java stall median/max",
        "dump wall median/max",
        "quiet stall"
    );
    for &size in &sizes {
        measure(&classes, size, repeats, depth)?;
    }
    Ok(())
}

/// Starts a JVM of `size` parked threads, dumps it once to start its attach listener (as the
/// daemon's first dump of a JVM does), then `repeats` times measured; prints one row.
fn measure(classes: &Classes, size: usize, repeats: usize, depth: usize) -> anyhow::Result<()> {
    let mut jvm = Jvm::start(classes, size, depth)?;
    let pid = jvm.pid();
    let location = file::locate(pid).context("the JVM's hsperfdata file")?;
    let read = || -> anyhow::Result<Safepoints> {
        let data = file::read(pid, &location)?;
        let counters = JvmCounters::from_perf_data(&data)?;
        let sync = data.long("sun.rt.safepointSyncTime").context("no sun.rt.safepointSyncTime")?;
        Ok(Safepoints {
            count: counters.safepoints,
            at_ns: counters.ns(counters.safepoint_ticks),
            sync_ns: counters.ns(u64::try_from(sync).unwrap_or(0)),
        })
    };
    let first = Instant::now();
    attach::thread_dump(pid, dump::MAX_DUMP_BYTES).context("the first dump")?;
    let first = first.elapsed();
    let mut quiet = 0;
    for _ in 0..QUIET_WINDOWS {
        jvm.send(&format!("spin {SPIN_MS}"))?;
        quiet = quiet.max(gap(&jvm)?);
    }
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let before = read()?;
        jvm.send(&format!("spin {SPIN_MS}"))?;
        std::thread::sleep(DUMP_AFTER);
        let start = Instant::now();
        let text = attach::thread_dump(pid, dump::MAX_DUMP_BYTES).context("a dump")?;
        let wall = start.elapsed();
        let stall_ns = gap(&jvm)?;
        let after = read()?;
        samples.push(Sample {
            pause: Safepoints {
                count: after.count - before.count,
                at_ns: after.at_ns - before.at_ns,
                sync_ns: after.sync_ns - before.sync_ns,
            },
            wall,
            stall_ns,
            threads: dump::parse(&text).len(),
            bytes: text.len(),
        });
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let pair = |values: Vec<u64>| {
        let (median, max) = median_max(values);
        format!("{:.2} / {:.2} ms", ms(median), ms(max))
    };
    let counts: Vec<u64> = samples.iter().map(|s| s.pause.count).collect();
    let (fewest, most) = (counts.iter().min().copied().unwrap_or(0), counts.iter().max().copied().unwrap_or(0));
    println!(
        "{:>8} {:>8} {:>6}K {:>22} {:>22} {:>11} {:>22} {:>22} {:>9.2} ms",
        size,
        samples.last().map_or(0, |s| s.threads),
        samples.last().map_or(0, |s| s.bytes) / 1024,
        pair(samples.iter().map(|s| s.pause.at_ns + s.pause.sync_ns).collect()),
        pair(samples.iter().map(|s| s.pause.sync_ns).collect()),
        if fewest == most { fewest.to_string() } else { format!("{fewest}-{most}") },
        pair(samples.iter().map(|s| s.stall_ns).collect()),
        pair(samples.iter().map(|s| u64::try_from(s.wall.as_nanos()).unwrap_or(u64::MAX)).collect()),
        ms(quiet),
    );
    println!("{:>8} first dump (starts the attach listener): {:.0} ms wall", "", first.as_secs_f64() * 1e3);
    Ok(())
}

/// The Java thread's answer to `spin`: its longest stall, in ns.
fn gap(jvm: &Jvm) -> anyhow::Result<u64> {
    let line = jvm.line(Duration::from_millis(SPIN_MS) + Duration::from_secs(30))?;
    let ns = line.strip_prefix("gap ").with_context(|| format!("the JVM said {line:?}"))?;
    ns.parse().with_context(|| format!("the JVM said {line:?}"))
}

/// The median (the upper one of an even count) and the maximum.
fn median_max(mut values: Vec<u64>) -> (u64, u64) {
    values.sort_unstable();
    (values.get(values.len() / 2).copied().unwrap_or(0), values.last().copied().unwrap_or(0))
}
