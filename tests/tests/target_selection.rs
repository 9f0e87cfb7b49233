//! Targets chosen by what they serve or where they run, as on a real node: `port=N` selects
//! whoever listens on that TCP port (also a process that starts listening after the daemon),
//! `cgroup=PATH` every process of a cgroup subtree (a systemd service, a pod). Real processes, a
//! real cgroup the test creates and removes, the real daemon; other processes are left alone.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};
use tests::{free_port, observer::Observer, privileged};

/// A python3 process listening on `port` (or on nothing: port 0) until killed.
struct Process(Child);

impl Process {
    fn listening(port: u16) -> Process {
        let script = "import socket, sys, time\nport = int(sys.argv[1])\nif port:\n    s = socket.socket(); s.bind(('127.0.0.1', port)); s.listen()\ntime.sleep(120)\n";
        let child = Command::new("python3").args(["-c", script, &port.to_string()]).spawn().expect("python3");
        if port != 0 {
            let end = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < end, "python3 not listening on {port}");
                thread::sleep(Duration::from_millis(50));
            }
        }
        Process(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The pids the daemon's snapshot lists as targets.
fn watched(observer: &Observer) -> BTreeSet<u64> {
    let (_, body) = observer.get("/api/v1/snapshot").expect("snapshot");
    let snapshot: serde_json::Value = serde_json::from_str(&body).expect("snapshot JSON");
    snapshot["processes"].as_array().expect("processes").iter().filter_map(|p| p["pid"].as_u64()).collect()
}

/// Polls until the daemon watches exactly `expected` (among `candidates`), or panics.
fn wait_watched(observer: &Observer, candidates: &[u64], expected: &[u64], within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let seen: Vec<u64> = watched(observer).into_iter().filter(|p| candidates.contains(p)).collect();
        if seen == expected {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "watching {seen:?} of {candidates:?}, expected {expected:?}");
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn port_targets_follow_whoever_listens_there() {
    if !privileged(module_path!()) {
        return;
    }
    let (port_a, port_b, port_late) = (free_port(), free_port(), free_port());
    let a = Process::listening(port_a);
    let b = Process::listening(port_b);
    let observer = Observer::start_with_targets(&[&format!("port={port_a}"), &format!("port={port_late}")]);
    let late = Process::listening(port_late);
    let candidates = [a.pid(), b.pid(), late.pid()].map(u64::from);
    let mut expected = vec![u64::from(a.pid()), u64::from(late.pid())];
    expected.sort_unstable();
    // The late listener is found at the next refresh of the port owners (every 5 s).
    let after = wait_watched(&observer, &candidates, &expected, Duration::from_secs(8));
    eprintln!("port targets watched {:.1}s after the late one started listening", after.as_secs_f64());
}

/// A cgroup the test creates under the cgroup v2 mount, removed (with its processes gone) on drop.
struct TestCgroup {
    dir: PathBuf,
    name: String,
}

impl TestCgroup {
    fn create() -> TestCgroup {
        let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        let root = mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(2) == Some(&"cgroup2"))
            .map(|f| PathBuf::from(f[1]))
            .expect("a cgroup v2 mount");
        let name = format!("gwobs-test-{}", std::process::id());
        let dir = root.join(&name);
        std::fs::create_dir(&dir).expect("create cgroup");
        TestCgroup { dir, name: format!("/{name}") }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).expect("move into cgroup");
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Processes are killed before (declared after); a cgroup goes once it is empty.
        let end = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < end {
            thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn cgroup_targets_take_the_whole_subtree_and_nothing_else() {
    if !privileged(module_path!()) {
        return;
    }
    let cgroup = TestCgroup::create();
    let inside = Process::listening(0);
    let outside = Process::listening(0);
    cgroup.add(inside.pid());
    let observer = Observer::start_with_targets(&[&format!("cgroup={}", cgroup.name)]);
    let candidates = [inside.pid(), outside.pid()].map(u64::from);
    wait_watched(&observer, &candidates, &[u64::from(inside.pid())], Duration::from_secs(5));
    // A process moved in later is picked up at the next tick.
    let later = Process::listening(0);
    cgroup.add(later.pid());
    let candidates = [inside.pid(), outside.pid(), later.pid()].map(u64::from);
    let mut expected = vec![u64::from(inside.pid()), u64::from(later.pid())];
    expected.sort_unstable();
    wait_watched(&observer, &candidates, &expected, Duration::from_secs(3));
    drop(observer);
    drop((inside, later));
}
