//! A JVM's hsperfdata file as the daemon reads it: any bytes (the target writes the file) parsed
//! into counters, then the stop-the-world counters picked and converted to nanoseconds. A
//! malformed file is an error, never a panic, and never more than `MAX_ENTRIES` counters.

#![no_main]

use gateway_observer::host::hsperfdata::{
    JvmCounters,
    format::{self, MAX_ENTRIES},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(data) = format::parse(bytes) else { return };
    assert!(data.counters.len() <= MAX_ENTRIES);
    let Ok(counters) = JvmCounters::from_perf_data(&data) else { return };
    assert!(counters.frequency > 0);
    let _ = counters.ns(counters.safepoint_ticks);
    for collector in &counters.collectors {
        let _ = counters.ns(collector.time_ticks);
        let _ = counters.ns(collector.last_exit_ticks.saturating_sub(collector.last_entry_ticks));
    }
});
