//! Which processes to watch: `--target pid=N` and `--target comm=NAME`, plus every descendant of a
//! match (pre-fork workers such as nginx's). Specs are resolved against /proc at each tick, so a
//! matching process that starts later is picked up and one that exits is dropped.

use std::{collections::BTreeMap, fmt, str::FromStr};

use crate::procfs;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    Pid(u32),
    /// Exact match on /proc/PID/comm (at most 15 bytes, as the kernel truncates it).
    Comm(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetSpecError {
    #[error("target {0:?} is not KEY=VALUE (pid=N or comm=NAME)")]
    NoEquals(String),
    #[error("target {0:?}: pid must be a positive number")]
    BadPid(String),
    #[error("target {0:?}: comm is empty or longer than the kernel's 15 bytes")]
    BadComm(String),
    #[error("target {0:?}: unknown kind (use pid=N or comm=NAME)")]
    UnknownKind(String),
}

impl FromStr for TargetSpec {
    type Err = TargetSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, value) = s.split_once('=').ok_or_else(|| TargetSpecError::NoEquals(s.into()))?;
        match kind {
            "pid" => match value.parse::<u32>() {
                Ok(pid) if pid > 0 => Ok(Self::Pid(pid)),
                _ => Err(TargetSpecError::BadPid(s.into())),
            },
            "comm" if !value.is_empty() && value.len() <= 15 => Ok(Self::Comm(value.into())),
            "comm" => Err(TargetSpecError::BadComm(s.into())),
            _ => Err(TargetSpecError::UnknownKind(s.into())),
        }
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pid(pid) => write!(f, "pid={pid}"),
            Self::Comm(comm) => write!(f, "comm={comm}"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for TargetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A process on the host: its pid, parent and comm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessEntry {
    pub pid: u32,
    pub parent: u32,
    pub comm: String,
}

pub fn host_processes() -> Vec<ProcessEntry> {
    procfs::processes()
        .into_iter()
        .filter_map(|pid| Some(ProcessEntry { pid, parent: procfs::parent(pid)?, comm: procfs::comm(pid)? }))
        .collect()
}

/// The processes the specs select among `processes`: pid → the root it descends from (itself for
/// a direct match). Pure, so tested on made-up process tables.
pub fn resolve(specs: &[TargetSpec], processes: &[ProcessEntry]) -> BTreeMap<u32, u32> {
    let mut selected = BTreeMap::new();
    for process in processes {
        let direct = specs.iter().any(|spec| match spec {
            TargetSpec::Pid(pid) => process.pid == *pid,
            TargetSpec::Comm(comm) => process.comm == *comm,
        });
        if direct {
            selected.insert(process.pid, process.pid);
        }
    }
    // Walk descendants of each direct match.
    let mut frontier: Vec<(u32, u32)> = selected.iter().map(|(p, r)| (*p, *r)).collect();
    while let Some((parent, root)) = frontier.pop() {
        for child in processes.iter().filter(|p| p.parent == parent && p.pid != parent) {
            if let std::collections::btree_map::Entry::Vacant(e) = selected.entry(child.pid) {
                e.insert(root);
                frontier.push((child.pid, root));
            }
        }
    }
    selected
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: u32, parent: u32, comm: &str) -> ProcessEntry {
        ProcessEntry { pid, parent, comm: comm.into() }
    }

    #[test]
    fn parses_specs_and_rejects_garbage_with_the_reason() {
        assert_eq!("pid=42".parse(), Ok(TargetSpec::Pid(42)));
        assert_eq!("comm=nginx".parse(), Ok(TargetSpec::Comm("nginx".into())));
        assert!(matches!("pid=0".parse::<TargetSpec>(), Err(TargetSpecError::BadPid(_))));
        assert!(matches!("pid=x".parse::<TargetSpec>(), Err(TargetSpecError::BadPid(_))));
        assert!(matches!("nginx".parse::<TargetSpec>(), Err(TargetSpecError::NoEquals(_))));
        assert!(matches!("uid=3".parse::<TargetSpec>(), Err(TargetSpecError::UnknownKind(_))));
        assert!(matches!(
            "comm=a-name-that-is-too-long".parse::<TargetSpec>(),
            Err(TargetSpecError::BadComm(_))
        ));
        assert_eq!(TargetSpec::Comm("java".into()).to_string(), "comm=java");
    }

    #[test]
    fn selects_matches_and_their_descendants_only() {
        let table = [
            entry(1, 0, "init"),
            entry(100, 1, "nginx"),
            entry(101, 100, "nginx"),
            entry(102, 100, "nginx"),
            entry(200, 1, "java"),
            entry(201, 200, "sh"),
            entry(202, 201, "curl"),
            entry(300, 1, "busy"),
        ];
        let by_comm = resolve(&[TargetSpec::Comm("nginx".into())], &table);
        assert_eq!(by_comm.keys().copied().collect::<Vec<_>>(), vec![100, 101, 102]);
        let by_pid = resolve(&[TargetSpec::Pid(200)], &table);
        assert_eq!(by_pid, BTreeMap::from([(200, 200), (201, 200), (202, 200)]));
        assert!(resolve(&[TargetSpec::Pid(999)], &table).is_empty());
    }
}
