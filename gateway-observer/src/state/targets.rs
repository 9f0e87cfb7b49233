//! Which processes to watch: `--target pid=N`, `comm=NAME`, `port=N` (whoever listens on that TCP
//! port: gateways found by what they serve) and `cgroup=PATH` (every process of a cgroup subtree:
//! a systemd service, a Kubernetes pod), plus every descendant of a match (pre-fork workers such
//! as nginx's). Specs are resolved against /proc at each tick, so a matching process that starts
//! later is picked up and one that exits is dropped.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt,
    str::FromStr,
    time::{Duration, Instant},
};

use crate::host::procfs;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    Pid(u32),
    /// Exact match on /proc/PID/comm (at most 15 bytes, as the kernel truncates it).
    Comm(String),
    /// Processes with a TCP socket listening on this port (in their own network namespace).
    Port(u16),
    /// Processes in this cgroup or below, as /proc/PID/cgroup names it (`/system.slice/nginx.service`);
    /// a path under /sys/fs/cgroup is accepted too.
    Cgroup(String),
}

const KINDS: &str = "pid=N, comm=NAME, port=N or cgroup=PATH";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetSpecError {
    #[error("target {0:?} is not KEY=VALUE ({KINDS})")]
    NoEquals(String),
    #[error("target {0:?}: pid must be a positive number")]
    BadPid(String),
    #[error("target {0:?}: comm is empty or longer than the kernel's 15 bytes")]
    BadComm(String),
    #[error("target {0:?}: port must be 1..=65535")]
    BadPort(String),
    #[error("target {0:?}: cgroup must be an absolute path such as /system.slice/nginx.service")]
    BadCgroup(String),
    #[error("target {0:?}: unknown kind (use {KINDS})")]
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
            "port" => match value.parse::<u16>() {
                Ok(port) if port > 0 => Ok(Self::Port(port)),
                _ => Err(TargetSpecError::BadPort(s.into())),
            },
            "cgroup" => cgroup_path(value).map(Self::Cgroup).ok_or_else(|| TargetSpecError::BadCgroup(s.into())),
            _ => Err(TargetSpecError::UnknownKind(s.into())),
        }
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pid(pid) => write!(f, "pid={pid}"),
            Self::Comm(comm) => write!(f, "comm={comm}"),
            Self::Port(port) => write!(f, "port={port}"),
            // A cgroup whose own path begins like the mount point (one named `sys`, holding
            // `fs/cgroup`): written under the mount point, which parsing takes off once.
            Self::Cgroup(path) if below(path, CGROUP_MOUNT).is_some() => write!(f, "cgroup={CGROUP_MOUNT}{path}"),
            Self::Cgroup(path) => write!(f, "cgroup={path}"),
        }
    }
}

/// Where cgroup paths are mounted; a path given under it is taken as the cgroup below it.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// What is left of `path` below directory `dir`: `Some("")` for `dir` itself, `None` when
/// `path` is not within it (`/sys/fs/cgroupx` is not within `/sys/fs/cgroup`).
fn below<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    path.strip_prefix(dir).filter(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// A cgroup path as /proc/PID/cgroup writes it: absolute, without a trailing slash, the
/// /sys/fs/cgroup mount point (and a cgroup v1 or hybrid hierarchy directory) taken off.
fn cgroup_path(value: &str) -> Option<String> {
    if !value.starts_with('/') || value.contains("/../") || value.ends_with("/..") {
        return None;
    }
    let mut path = value.trim_end_matches('/');
    if let Some(rest) = below(path, CGROUP_MOUNT) {
        path = rest;
        if let Some(rest) =
            ["/unified", "/systemd", "/memory", "/cpu", "/pids"].iter().find_map(|hierarchy| below(path, hierarchy))
        {
            path = rest;
        }
    }
    Some(if path.is_empty() { "/".to_owned() } else { path.to_owned() })
}

/// Whether `cgroup` is `path` or below it.
fn cgroup_within(cgroup: &str, path: &str) -> bool {
    path == "/" || below(cgroup, path).is_some()
}

impl TargetSpec {
    /// Whether `process` itself matches (not through an ancestor).
    pub fn matches(&self, process: &ProcessEntry) -> bool {
        match self {
            Self::Pid(pid) => process.pid == *pid,
            Self::Comm(comm) => process.comm == *comm,
            Self::Port(port) => process.ports.contains(port),
            Self::Cgroup(path) => process.cgroups.iter().any(|c| cgroup_within(c, path)),
        }
    }
}

impl<'de> serde::Deserialize<'de> for TargetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A process on the host: its pid, parent and comm; its cgroups and listening ports when a spec
/// asks for them (empty otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessEntry {
    pub pid: u32,
    pub parent: u32,
    pub comm: String,
    pub cgroups: Vec<String>,
    pub ports: BTreeSet<u16>,
}

/// Processes listening on the ports that `port=` specs name. Finding them reads every process's
/// open sockets, so it is redone every `PORT_REFRESH` only: a gateway that starts listening is
/// picked up within it.
#[derive(Debug, Default)]
pub struct PortListeners {
    refreshed: Option<Instant>,
    by_pid: BTreeMap<u32, BTreeSet<u16>>,
    /// The listening sockets (inodes) on the wanted ports at the last scan: while they stay the
    /// same, their owners are not searched again (a host's fds can number in the 100 000s).
    inodes: BTreeSet<u64>,
}

const PORT_REFRESH: Duration = Duration::from_secs(5);

impl PortListeners {
    pub fn refresh(&mut self, specs: &[TargetSpec], now: Instant) {
        let ports: BTreeSet<u16> =
            specs.iter().filter_map(|s| if let TargetSpec::Port(p) = s { Some(*p) } else { None }).collect();
        if ports.is_empty() || self.refreshed.is_some_and(|at| now.duration_since(at) < PORT_REFRESH) {
            return;
        }
        self.refreshed = Some(now);
        // Listening sockets on those ports, per network namespace (read once per namespace).
        let mut by_netns: HashMap<String, HashMap<u64, u16>> = HashMap::new();
        let processes: Vec<(u32, String)> =
            procfs::processes().into_iter().filter_map(|pid| Some((pid, procfs::net_namespace(pid)?))).collect();
        for (pid, netns) in &processes {
            by_netns.entry(netns.clone()).or_insert_with(|| {
                let inum = procfs::parse_net_namespace_link(netns).unwrap_or(0);
                crate::host::sock_diag::listen_rows_in(inum, *pid)
                    .into_iter()
                    .filter(|r| ports.contains(&r.port))
                    .map(|r| (r.inode, r.port))
                    .collect()
            });
        }
        let inodes: BTreeSet<u64> = by_netns.values().flat_map(|m| m.keys().copied()).collect();
        if inodes == self.inodes {
            self.by_pid.retain(|pid, _| procfs::exists(*pid));
            return;
        }
        self.inodes = inodes;
        self.by_pid.clear();
        for (pid, netns) in &processes {
            let Some(inodes) = by_netns.get(netns).filter(|m| !m.is_empty()) else { continue };
            let mine: BTreeSet<u16> =
                procfs::socket_inodes(*pid).iter().filter_map(|inode| inodes.get(inode).copied()).collect();
            if !mine.is_empty() {
                self.by_pid.insert(*pid, mine);
            }
        }
    }
}

impl PortListeners {
    /// The wanted ports `pid` listened on at the last scan.
    pub fn ports_of(&self, pid: u32) -> BTreeSet<u16> {
        self.by_pid.get(&pid).cloned().unwrap_or_default()
    }
}

/// Longest parent chain walked by [`selects`] (pid namespaces nest a few levels, not 64).
const MAX_ANCESTORS: usize = 64;

/// Whether the specs select `pid` now, itself or through an ancestor: read from /proc for that
/// one process and its parents, not the whole host (the uprobe opener asks for each attach).
pub fn selects(specs: &[TargetSpec], listeners: &PortListeners, pid: u32) -> bool {
    let want_cgroups = specs.iter().any(|s| matches!(s, TargetSpec::Cgroup(_)));
    let mut lineage = Vec::new();
    let mut next = pid;
    while next != 0 && lineage.len() < MAX_ANCESTORS {
        let Some((parent, comm)) = procfs::parent_and_comm(next) else { break };
        lineage.push(ProcessEntry {
            pid: next,
            parent,
            comm,
            cgroups: if want_cgroups { procfs::cgroups(next) } else { Vec::new() },
            ports: listeners.ports_of(next),
        });
        next = parent;
    }
    resolve(specs, &lineage).contains_key(&pid)
}

/// Specs that select no process now (a gateway not started yet, a typo).
pub fn waiting_specs(specs: &[TargetSpec], processes: &[ProcessEntry]) -> usize {
    specs.iter().filter(|spec| !processes.iter().any(|p| spec.matches(p))).count()
}

/// The processes the specs select among `processes`: pid → the root it descends from (itself for
/// a direct match). Pure, so tested on made-up process tables.
pub fn resolve(specs: &[TargetSpec], processes: &[ProcessEntry]) -> BTreeMap<u32, u32> {
    let mut selected = BTreeMap::new();
    for process in processes {
        let direct = specs.iter().any(|spec| spec.matches(process));
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

    #[test]
    fn a_process_is_selected_through_its_parent_and_not_otherwise() {
        let me = std::process::id();
        let parent = procfs::parent(me).expect("own parent");
        let listeners = PortListeners::default();
        assert!(selects(&[TargetSpec::Pid(parent)], &listeners, me));
        assert!(selects(&[TargetSpec::Pid(me)], &listeners, me));
        assert!(!selects(&[TargetSpec::Pid(me)], &listeners, parent), "a parent is not its child's descendant");
        assert!(!selects(&[TargetSpec::Comm("no-such-comm".into())], &listeners, me));
        assert!(!selects(&[TargetSpec::Pid(parent)], &listeners, u32::MAX), "a pid that does not exist");
    }

    fn entry(pid: u32, parent: u32, comm: &str) -> ProcessEntry {
        ProcessEntry { pid, parent, comm: comm.into(), ..ProcessEntry::default() }
    }

    #[test]
    fn parses_specs_and_rejects_garbage_with_the_reason() {
        assert_eq!("pid=42".parse(), Ok(TargetSpec::Pid(42)));
        assert_eq!("comm=nginx".parse(), Ok(TargetSpec::Comm("nginx".into())));
        assert!(matches!("pid=0".parse::<TargetSpec>(), Err(TargetSpecError::BadPid(_))));
        assert!(matches!("pid=x".parse::<TargetSpec>(), Err(TargetSpecError::BadPid(_))));
        assert!(matches!("nginx".parse::<TargetSpec>(), Err(TargetSpecError::NoEquals(_))));
        assert!(matches!("uid=3".parse::<TargetSpec>(), Err(TargetSpecError::UnknownKind(_))));
        assert!(matches!("comm=a-name-that-is-too-long".parse::<TargetSpec>(), Err(TargetSpecError::BadComm(_))));
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

    #[test]
    fn ports_and_cgroups_select_processes_and_their_descendants() {
        let mut nginx = entry(100, 1, "nginx");
        nginx.ports = BTreeSet::from([8080]);
        let mut worker = entry(101, 100, "nginx");
        worker.ports = BTreeSet::from([8080]);
        let mut java = entry(200, 1, "java");
        java.cgroups = vec!["/kubepods.slice/pod-a/ctr-1".into(), "/".into()];
        let mut sidecar = entry(300, 1, "envoy");
        sidecar.cgroups = vec!["/kubepods.slice/pod-ab/ctr-2".into()];
        let table = [entry(1, 0, "init"), nginx, worker, java, entry(201, 200, "sh"), sidecar];
        let by_port = resolve(&[TargetSpec::Port(8080)], &table);
        assert_eq!(by_port.keys().copied().collect::<Vec<_>>(), vec![100, 101]);
        let by_cgroup = resolve(&["cgroup=/kubepods.slice/pod-a".parse().unwrap()], &table);
        assert_eq!(by_cgroup.keys().copied().collect::<Vec<_>>(), vec![200, 201], "pod-ab is not below pod-a");
        assert_eq!(waiting_specs(&[TargetSpec::Port(9090), TargetSpec::Port(8080)], &table), 1);
    }

    #[test]
    fn parses_ports_and_cgroup_paths() {
        assert_eq!("port=8080".parse(), Ok(TargetSpec::Port(8080)));
        assert!(matches!("port=0".parse::<TargetSpec>(), Err(TargetSpecError::BadPort(_))));
        assert!(matches!("port=70000".parse::<TargetSpec>(), Err(TargetSpecError::BadPort(_))));
        assert_eq!(
            "cgroup=/system.slice/nginx.service/".parse(),
            Ok(TargetSpec::Cgroup("/system.slice/nginx.service".into()))
        );
        assert_eq!("cgroup=/sys/fs/cgroup/system.slice/x".parse(), Ok(TargetSpec::Cgroup("/system.slice/x".into())));
        assert_eq!("cgroup=/sys/fs/cgroup/unified/gw".parse(), Ok(TargetSpec::Cgroup("/gw".into())));
        assert_eq!("cgroup=/sys/fs/cgroup/unifiedx".parse(), Ok(TargetSpec::Cgroup("/unifiedx".into())));
        // Found by fuzzing (config): the mount point was cut from a longer name, leaving a
        // relative path that matches no process, and that `cgroup=` no longer took back.
        let spec: TargetSpec = "cgroup=/sys/fs/cgroupx/gw".parse().expect("an absolute path");
        assert_eq!(spec, TargetSpec::Cgroup("/sys/fs/cgroupx/gw".into()));
        assert_eq!(spec.to_string().parse(), Ok(spec));
        // Found by fuzzing (config) too: the mount point is taken off once, so a cgroup whose
        // own path begins with it is written under it, and read back the same.
        for path in
            ["/sys/fs/cgroup/sys/fs/cgroup/x", "/sys/fs/cgroup/sys/fs/cgroup", "/sys/fs/cgroup/sys/fs/cgroup/unified/y"]
        {
            let spec: TargetSpec = format!("cgroup={path}").parse().expect("an absolute path");
            assert_eq!(spec, TargetSpec::Cgroup(path["/sys/fs/cgroup".len()..].into()));
            assert_eq!(spec.to_string(), format!("cgroup={path}"));
            assert_eq!(spec.to_string().parse(), Ok(spec));
        }
        assert!(matches!("cgroup=relative/path".parse::<TargetSpec>(), Err(TargetSpecError::BadCgroup(_))));
        assert!(matches!("cgroup=/a/../etc".parse::<TargetSpec>(), Err(TargetSpecError::BadCgroup(_))));
        assert_eq!(TargetSpec::Port(80).to_string(), "port=80");
        let err = "uid=3".parse::<TargetSpec>().unwrap_err().to_string();
        assert!(err.contains("port=N") && err.contains("cgroup=PATH"), "{err}");
    }
}
