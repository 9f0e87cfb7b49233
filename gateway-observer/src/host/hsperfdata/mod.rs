//! HotSpot's performance-data file: each JVM publishes its counters in `/tmp/hsperfdata_<user>/<pid>`
//! (what `jstat` and `jcmd PerfCounter.print` read). The observer reads the stop-the-world ones.
//! `format` parses bytes, `counters` picks the pause counters, `file` finds and reads the file
//! safely; [`JvmFiles`] decides which targets to read at each tick.

pub mod counters;
pub mod file;
pub mod format;

use std::collections::{HashMap, HashSet};

pub use counters::JvmCounters;
use file::Location;

/// Ticks between two looks for the file of a target that has none: a JVM makes it as it starts,
/// so a target without one is most likely no JVM, and one that starts later is found this late.
const LOOK_AGAIN_TICKS: u64 = 10;

/// Where each target's file is, and when targets without one were last looked at.
#[derive(Debug, Default)]
pub struct JvmFiles {
    found: HashMap<u32, Location>,
    looked: HashMap<u32, u64>,
    /// The last error each target's file gave, logged once.
    errors: HashMap<u32, String>,
    /// Reads that failed (a file that went away, or one that is malformed).
    pub read_errors: u64,
}

impl JvmFiles {
    /// The counters of every target that has a file, read at tick `tick`.
    pub fn read(&mut self, targets: &HashSet<u32>, tick: u64) -> Vec<(u32, JvmCounters)> {
        self.found.retain(|pid, _| targets.contains(pid));
        self.looked.retain(|pid, _| targets.contains(pid));
        self.errors.retain(|pid, _| targets.contains(pid));
        let mut read = Vec::new();
        for &pid in targets {
            let location = match self.found.get(&pid) {
                Some(location) => location.clone(),
                None if self.looked.get(&pid).is_some_and(|t| tick.saturating_sub(*t) < LOOK_AGAIN_TICKS) => continue,
                None => match file::locate(pid) {
                    Ok(location) => location,
                    Err(_) => {
                        self.looked.insert(pid, tick);
                        continue;
                    }
                },
            };
            let counters = match file::read(pid, &location) {
                // It exited since the targets were listed, or its file went as it exits.
                Err(err) if err.is_gone() => {
                    self.found.remove(&pid);
                    self.looked.insert(pid, tick);
                    continue;
                }
                Err(err) => Err(err.to_string()),
                Ok(data) => JvmCounters::from_perf_data(&data).map_err(|e| e.to_string()),
            };
            match counters {
                Ok(counters) => {
                    self.found.insert(pid, location);
                    self.errors.remove(&pid);
                    read.push((pid, counters));
                }
                Err(err) => {
                    self.read_errors += 1;
                    self.found.remove(&pid);
                    self.looked.insert(pid, tick);
                    if self.errors.get(&pid) != Some(&err) {
                        tracing::warn!(
                            pid,
                            error = %crate::printable::escape(&err.to_string()),
                            "cannot read the JVM counters"
                        );
                        self.errors.insert(pid, err);
                    }
                }
            }
        }
        read
    }
}
