//! The counters of a HotSpot perf-data file that say when the JVM stopped its threads.
//!
//! HotSpot adds one to `sun.rt.safepoints` when a safepoint begins and its length to
//! `sun.rt.safepointTime` when it ends (RuntimeService::record_safepoint_begin/_end), both in
//! ticks of `sun.os.hrt.frequency` per second. A stop-the-world collection runs inside one; each
//! collector also keeps its invocations, total time and the ticks its last run began and ended.

use super::format::PerfData;

/// Collectors looked for (`sun.gc.collector.0` ..): HotSpot has two or three.
const MAX_COLLECTORS: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorCounters {
    /// e.g. "Parallel full collection pauses", "G1 young collection pauses".
    pub name: String,
    pub invocations: u64,
    pub time_ticks: u64,
    pub last_entry_ticks: u64,
    pub last_exit_ticks: u64,
}

/// One reading of a JVM's stop-the-world counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmCounters {
    /// Ticks per second of every `_ticks` field.
    pub frequency: u64,
    pub safepoints: u64,
    pub safepoint_ticks: u64,
    pub collectors: Vec<CollectorCounters>,
    /// `sun.gc.lastCause`: why the last collection ran ("System.gc()", "Allocation Failure").
    pub last_cause: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    #[error("no {0} counter")]
    Missing(&'static str),
    #[error("sun.os.hrt.frequency is {0}: not a tick rate")]
    Frequency(i64),
}

impl JvmCounters {
    pub fn from_perf_data(data: &PerfData) -> Result<Self, CounterError> {
        let required = |name: &'static str| data.long(name).ok_or(CounterError::Missing(name));
        let frequency = required("sun.os.hrt.frequency")?;
        if frequency <= 0 {
            return Err(CounterError::Frequency(frequency));
        }
        let collectors = (0..MAX_COLLECTORS)
            .map_while(|i| {
                let long = |field: &str| data.long(&format!("sun.gc.collector.{i}.{field}")).map(non_negative);
                Some(CollectorCounters {
                    name: data.text(&format!("sun.gc.collector.{i}.name")).unwrap_or_default().to_owned(),
                    invocations: long("invocations")?,
                    time_ticks: long("time").unwrap_or(0),
                    last_entry_ticks: long("lastEntryTime").unwrap_or(0),
                    last_exit_ticks: long("lastExitTime").unwrap_or(0),
                })
            })
            .collect();
        Ok(Self {
            frequency: non_negative(frequency),
            safepoints: non_negative(required("sun.rt.safepoints")?),
            safepoint_ticks: non_negative(required("sun.rt.safepointTime")?),
            collectors,
            last_cause: data.text("sun.gc.lastCause").filter(|c| !c.is_empty()).map(str::to_owned),
        })
    }

    /// `ticks` of this JVM's clock in nanoseconds.
    pub fn ns(&self, ticks: u64) -> u64 {
        u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(self.frequency.max(1))).unwrap_or(u64::MAX)
    }
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::hsperfdata::format::{parse, tests::Builder};

    #[test]
    fn the_pause_counters_of_a_parallel_gc_jvm() {
        let file = Builder::new(true)
            .long("sun.os.hrt.frequency", 1_000_000)
            .long("sun.rt.safepoints", 7)
            .long("sun.rt.safepointTime", 143_043)
            .text("sun.gc.collector.0.name", "Parallel young collection pauses", 64)
            .long("sun.gc.collector.0.invocations", 4)
            .long("sun.gc.collector.0.time", 101_879)
            .long("sun.gc.collector.0.lastEntryTime", 2_252_764)
            .long("sun.gc.collector.0.lastExitTime", 2_253_466)
            .text("sun.gc.collector.1.name", "Parallel full collection pauses", 64)
            .long("sun.gc.collector.1.invocations", 2)
            .long("sun.gc.collector.1.time", -1)
            .text("sun.gc.lastCause", "System.gc()", 64)
            .build(2048);
        let c = JvmCounters::from_perf_data(&parse(&file).expect("parses")).expect("counters");
        assert_eq!((c.frequency, c.safepoints, c.safepoint_ticks), (1_000_000, 7, 143_043));
        assert_eq!(c.ns(c.safepoint_ticks), 143_043_000);
        assert_eq!(c.collectors.len(), 2);
        assert_eq!(c.collectors[0].name, "Parallel young collection pauses");
        assert_eq!(c.collectors[0].last_exit_ticks - c.collectors[0].last_entry_ticks, 702);
        assert_eq!(c.collectors[1].time_ticks, 0, "a negative counter reads as zero");
        assert_eq!(c.last_cause.as_deref(), Some("System.gc()"));
    }

    #[test]
    fn a_file_without_the_safepoint_counters_is_an_error() {
        let file = Builder::new(true).long("sun.os.hrt.frequency", 0).build(256);
        let data = parse(&file).expect("parses");
        assert_eq!(JvmCounters::from_perf_data(&data), Err(CounterError::Frequency(0)));
        let file = Builder::new(true).long("sun.os.hrt.frequency", 10).build(256);
        let data = parse(&file).expect("parses");
        assert_eq!(JvmCounters::from_perf_data(&data), Err(CounterError::Missing("sun.rt.safepoints")));
    }
}
