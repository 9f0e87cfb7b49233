//! `H2_MARKS`: the HTTP/2 connections first seen mid-way that userspace names to the kernel, so
//! that it walks their frame headers (see the kernel's `h2_marks`).

use aya::maps::{Array, HashMap, MapData};

use super::loader::{ProbeError, Probes, map_err};

impl Probes {
    /// Names `sks` as HTTP/2; returns those the map had no room for.
    pub fn mark_h2(&mut self, sks: &[u64]) -> Result<Vec<u64>, ProbeError> {
        let mut marks: HashMap<&mut MapData, u64, u8> = self.map_mut("H2_MARKS")?;
        Ok(sks.iter().copied().filter(|sk| marks.insert(sk, 1, 0).is_err()).collect())
    }

    /// Takes back the marks of `sks` that no transfer took.
    pub fn unmark_h2(&mut self, sks: &[u64]) -> Result<(), ProbeError> {
        let mut marks: HashMap<&mut MapData, u64, u8> = self.map_mut("H2_MARKS")?;
        for sk in sks {
            // Already taken is fine: the aim is its absence.
            let _ = marks.remove(sk);
        }
        Ok(())
    }

    /// Whether marks may wait in `H2_MARKS`: while not, the kernel's transfers skip the lookup.
    pub fn set_h2_marks_pending(&mut self, pending: bool) -> Result<(), ProbeError> {
        let mut flag: Array<&mut MapData, u32> = self.map_mut("H2_MARKS_PENDING")?;
        flag.set(0, u32::from(pending), 0).map_err(map_err("H2_MARKS_PENDING"))
    }
}
