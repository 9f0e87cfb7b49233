//! Gateways on runtimes this project did not write — Node.js, Python asyncio, Go — from the
//! fixtures in `tests/fixtures/`, as child processes ended on drop (also when a test panics; and
//! each fixture exits by itself when its stdin closes). They share one protocol: started with a
//! port, each prints `ready PORT` once listening; `fault NAME` and `heal` lines on its stdin
//! switch a fault on and off in the same running process, each acknowledged with `ok LINE`.
//!
//! The Go fixture is built with `go build` once per test binary run, into
//! `target/go-fixtures/`, with the Go build cache and GOPATH there too: nothing is written to
//! $HOME.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{OnceLock, mpsc},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    free_port,
    http_client::try_request,
    observer::Observer,
    summary::{Detection, Start},
};

/// How long a fixture may take to print `ready` (Node and Python start in well under a second;
/// the margin is for a loaded 2-core machine).
const READY_WITHIN: Duration = Duration::from_secs(20);
/// How long a fixture may take to acknowledge a command: the loop that reads stdin is the one
/// the faults block, 200 ms at a time per queued request.
const ACK_WITHIN: Duration = Duration::from_secs(10);

/// The name of the thread each fixture serves on (Node's and Python's single loop; the Go
/// binary's name, which every one of its threads carries).
pub const NODE_LOOP_THREAD: &str = "node-main";
pub const PYTHON_LOOP_THREAD: &str = "py-asyncio";
pub const GO_THREAD: &str = "go-gateway";

pub struct RuntimeGateway {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    pub port: u16,
    what: String,
    /// The runtime, as `SUMMARY` lines name it: `node`, `python asyncio`, `go`.
    pub runtime: &'static str,
}

impl RuntimeGateway {
    /// `node tests/fixtures/node/SCRIPT PORT`.
    pub fn node(script: &str) -> RuntimeGateway {
        Self::node_with(&[], script)
    }

    /// `node FLAGS tests/fixtures/node/SCRIPT PORT`.
    pub fn node_with(flags: &[&str], script: &str) -> RuntimeGateway {
        let port = free_port();
        let mut command = Command::new("node");
        command.args(flags).arg(fixture_dir().join("node").join(script)).arg(port.to_string());
        Self::spawn(command, port, &format!("node {script}"), "node")
    }

    /// `python3 tests/fixtures/python/SCRIPT PORT` (unbuffered, so `ready` is seen at once).
    pub fn python(script: &str) -> RuntimeGateway {
        Self::python_at("python3", script)
    }

    /// As `python`, run by the interpreter `python` (a path).
    pub fn python_at(python: &str, script: &str) -> RuntimeGateway {
        let port = free_port();
        let mut command = Command::new(python);
        command.arg("-u").arg(fixture_dir().join("python").join(script)).arg(port.to_string());
        Self::spawn(command, port, &format!("{python} {script}"), "python asyncio")
    }

    /// The binary built from `tests/fixtures/go/SOURCE` (named after it without `.go`; see
    /// `go_binary`), run with a port.
    pub fn go(source: &str) -> RuntimeGateway {
        let port = free_port();
        let mut command = Command::new(go_binary(source));
        command.arg(port.to_string());
        Self::spawn(command, port, &format!("go {source}"), "go")
    }

    fn spawn(mut command: Command, port: u16, what: &str, runtime: &'static str) -> RuntimeGateway {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("fixture stdout"));
        // A reader thread, so that every wait for a line has a deadline; it ends when the
        // fixture's stdout closes.
        let (tx, lines) = mpsc::channel();
        thread::Builder::new()
            .name(format!("stdout-{port}"))
            .spawn(move || {
                for line in stdout.lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn a stdout reader");
        let mut gateway = RuntimeGateway { child, stdin, lines, port, what: what.to_owned(), runtime };
        let line = gateway.expect_line(READY_WITHIN, "ready");
        assert_eq!(line, format!("ready {port}"), "{what} said {line:?}");
        eprintln!("{what}: pid {} ready on port {port}", gateway.pid());
        gateway
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Switches `name` on in the running process; returns once the fixture acknowledged it.
    pub fn fault(&mut self, name: &str) {
        self.command(&format!("fault {name}"));
    }

    /// Switches every fault off; returns once the fixture acknowledged it.
    pub fn heal(&mut self) {
        self.command("heal");
    }

    fn command(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("fixture stdin open");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{line:?} to {}: {e}", self.what));
        let ack = self.expect_line(ACK_WITHIN, line);
        assert_eq!(ack, format!("ok {line}"), "{} answered {line:?} with {ack:?}", self.what);
    }

    fn expect_line(&mut self, within: Duration, waiting_for: &str) -> String {
        match self.lines.recv_timeout(within) {
            Ok(line) => line,
            Err(e) => {
                let status = self.child.try_wait().ok().flatten();
                panic!(
                    "{}: no line within {within:?} waiting for {waiting_for:?} ({e}; exit status {status:?})",
                    self.what
                )
            }
        }
    }

    /// One `GET path` on a fresh connection: its latency as the client saw it.
    pub fn timed_get(&self, path: &str) -> Duration {
        let start = Instant::now();
        let response = try_request(self.port, "GET", path, &[], b"", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("GET {path} from {}: {e}", self.what));
        assert_eq!(response.status, 200, "GET {path} from {}: {response:?}", self.what);
        start.elapsed()
    }

    /// The fixture's threads as `(tid, name, syscall)`: the number it is blocked in from
    /// `/proc/PID/task/TID/syscall`, `running` when on a CPU or runnable.
    pub fn thread_states(&self) -> Vec<(u32, String, String)> {
        let pid = self.pid();
        let mut threads = crate::threads(pid);
        threads.sort();
        threads
            .into_iter()
            .map(|(tid, name)| {
                let raw = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
                let state = match raw.split_whitespace().next() {
                    Some("running") | None => "running".to_owned(),
                    Some(nr) => syscall_name(nr.parse().unwrap_or(-1)),
                };
                (tid, name, state)
            })
            .collect()
    }

    /// `thread_states`, sampled `samples` times 20 ms apart, as one line per thread naming how
    /// often it was seen in each state: what the fault does to the threads, for the test's log.
    pub fn sample_thread_states(&self, samples: usize) -> String {
        let mut seen: std::collections::BTreeMap<(u32, String), std::collections::BTreeMap<String, usize>> =
            Default::default();
        for _ in 0..samples {
            for (tid, name, state) in self.thread_states() {
                *seen.entry((tid, name)).or_default().entry(state).or_default() += 1;
            }
            thread::sleep(Duration::from_millis(20));
        }
        seen.into_iter()
            .map(|((tid, name), states)| {
                let states: Vec<String> = states.into_iter().map(|(s, n)| format!("{s}×{n}")).collect();
                format!("  {tid} {name}: {}\n", states.join(" "))
            })
            .collect()
    }
}

impl Drop for RuntimeGateway {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The syscalls the fixtures' threads block in, by x86-64 number.
fn syscall_name(nr: i64) -> String {
    match nr {
        0 => "read",
        1 => "write",
        7 => "poll",
        23 => "select",
        35 => "nanosleep",
        45 => "recvfrom",
        61 => "wait4",
        202 => "futex",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        247 => "waitid",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        441 => "epoll_pwait2",
        _ => return format!("syscall-{nr}"),
    }
    .to_owned()
}

/// `tests/fixtures/`.
pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The workspace's target directory ($CARGO_TARGET_DIR if set).
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// `tests/fixtures/go/SOURCE` built into `target/go-fixtures/NAME` (NAME: SOURCE without `.go`,
/// prefixed `go-`: `gateway.go` → `go-gateway`, which is also the name of every thread of the
/// process), once per test binary run. The build cache and GOPATH live in
/// `target/go-fixtures/` too, and GOENV=off keeps `go` from reading a user config.
pub fn go_binary(source: &str) -> PathBuf {
    go_binary_built(source, &format!("go-{}", source.trim_end_matches(".go")), &[])
}

/// As `go_binary`, stripped (`-ldflags=-s -w`: no `.symtab`, no DWARF), named `NAME`.
pub fn go_stripped_binary(source: &str, name: &str) -> PathBuf {
    go_binary_built(source, name, &["-ldflags=-s -w"])
}

fn go_binary_built(source: &str, name: &str, flags: &[&str]) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<Vec<(String, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let dir = target_dir().join("go-fixtures");
    std::fs::create_dir_all(&dir).expect("create target/go-fixtures");
    let dir = dir.canonicalize().expect("target/go-fixtures");
    let out = dir.join(name);
    let started = Instant::now();
    let status = go_command(&dir)
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(source)
        .current_dir(fixture_dir().join("go"))
        .status()
        .unwrap_or_else(|e| panic!("run `go build` (apt-get install golang-go): {e}"));
    assert!(status.success(), "go build {source}: {status}");
    eprintln!("built {} in {:.1}s", out.display(), started.elapsed().as_secs_f64());
    built.push((name.to_owned(), out.clone()));
    out
}

/// Where Debian's `golang-*-dev` packages put their sources (golang.org/x/net for h2c).
const DEBIAN_GOPATH: &str = "/usr/share/gocode";

/// `go` with everything it writes kept under `dir`; imports found there or in Debian's packages.
fn go_command(dir: &Path) -> Command {
    let mut go = Command::new("go");
    let gopath = format!("{}:{DEBIAN_GOPATH}", dir.join("gopath").display());
    go.env("GOCACHE", dir.join("cache"))
        .env("GOPATH", gopath)
        .env("GOMODCACHE", dir.join("gopath/pkg/mod"))
        .env("GOENV", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local")
        .env("GO111MODULE", "off");
    go
}

/// The open alerts (pending or firing) the observer lists, as `kind subject (state)` for logs.
pub fn open_alerts(observer: &Observer) -> Vec<String> {
    observer
        .alerts()
        .iter()
        .filter(|a| a["state"] != "resolved")
        .map(|a| {
            format!("{} {} ({})", a["kind"].as_str().unwrap_or("?"), a["subject"].as_str().unwrap_or("?"), a["state"])
        })
        .collect()
}

/// What `/api/v1/snapshot` says about process `pid`: its entry in `processes` and the event
/// loops it found in it (Null when the observer does not list the process).
pub fn snapshot_of(observer: &Observer, pid: u32) -> (Value, Vec<Value>) {
    let Some((200, body)) = observer.get("/api/v1/snapshot") else { return (Value::Null, Vec::new()) };
    let snapshot: Value = serde_json::from_str(&body).unwrap_or_default();
    let process = snapshot["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"] == pid).cloned())
        .unwrap_or(Value::Null);
    let loops = snapshot["event_loops"]
        .as_array()
        .map(|ls| ls.iter().filter(|l| l["pid"] == pid).cloned().collect())
        .unwrap_or_default();
    (process, loops)
}

/// One scenario on one running fixture: the observer watching it, bounded client load, the
/// fault switched on and off while both keep running.
pub struct Scenario {
    pub gateway: RuntimeGateway,
    pub observer: Observer,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    clients: Vec<thread::JoinHandle<usize>>,
    fault_started: Option<(Instant, Vec<crate::metrics::Sample>)>,
    /// Watches for alerts firing from the instant the fault is switched on.
    firing: Option<crate::firing_watch::FiringWatch>,
}

/// Every load in these scenarios ends by this time after it started, whatever the test does.
pub const LOAD_AT_MOST: Duration = Duration::from_secs(75);

impl Scenario {
    /// Starts the observer on `gateway`, then `clients` clients each sending `GET /` one at a
    /// time with `pause` between requests, and asserts that no alert is raised (not even
    /// pending) for `healthy`.
    pub fn healthy(gateway: RuntimeGateway, clients: usize, pause: Duration, healthy: Duration) -> Scenario {
        let observer = Observer::start(gateway.pid());
        let done = crate::load::stop_flag();
        let clients =
            crate::load::load_paced(gateway.port, "/", clients, pause, done.clone(), Instant::now() + LOAD_AT_MOST);
        let scenario = Scenario { gateway, observer, done, clients, fault_started: None, firing: None };
        let start = Instant::now();
        let quiet = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::alerts::assert_quiet(&scenario.observer, healthy)
        }));
        if let Err(panic) = quiet {
            eprintln!(
                "healthy phase broken after {:.1}s; {}",
                start.elapsed().as_secs_f64(),
                scenario.describe(&scenario.observer.metrics())
            );
            std::panic::resume_unwind(panic);
        }
        let samples = crate::metrics::parse(&scenario.observer.metrics());
        let seen = crate::metrics::sum(&samples, "gateway_observer_http_requests_total", &[("direction", "inbound")]);
        eprintln!("healthy for {healthy:?}, no alert; the observer saw {seen} inbound requests");
        scenario
    }

    /// Switches `fault` on in the running fixture, shows it in effect (a request's latency and
    /// where the threads sit, printed) and returns that latency.
    pub fn fault(&mut self, fault: &str) -> Duration {
        let before = crate::metrics::parse(&self.observer.metrics());
        self.gateway.fault(fault);
        self.fault_started = Some((Instant::now(), before));
        self.firing = Some(crate::firing_watch::FiringWatch::start(self.observer.port, LOAD_AT_MOST));
        // The slowest of three: a fault that blocks at intervals (a lock another thread holds
        // 200 ms at a time, released for 10 ms) may let one request through its gap.
        let latency = (0..3).map(|_| self.gateway.timed_get("/")).max().unwrap_or_default();
        eprintln!(
            "fault {fault} on: a request took {:.0} ms; threads over 25 samples:\n{}",
            latency.as_secs_f64() * 1e3,
            self.gateway.sample_thread_states(25)
        );
        latency
    }

    /// Waits up to `within` from when the fault was switched on for an alert of `kind` to fire;
    /// prints it with the time to detect. On a miss, prints what the observer saw (open alerts,
    /// the process's snapshot, off-CPU time by reason since the fault) and panics.
    pub fn detected(&self, kind: &str, within: Duration) -> (Value, Duration) {
        let (started, _) = self.fault_started.as_ref().expect("fault() first");
        let watch = self.firing.as_ref().expect("fault() starts the watch");
        loop {
            // Seen by the watch from the fault's start on, while `fault` showed it in effect.
            if let Some((at, alert)) = watch.first(kind) {
                let after = at.duration_since(*started);
                eprintln!(
                    "DETECTED {kind} {} after {:.2}s: {}\n  open alerts: {:?}",
                    alert["subject"].as_str().unwrap_or("?"),
                    after.as_secs_f64(),
                    alert["summary"].as_str().unwrap_or("?"),
                    open_alerts(&self.observer)
                );
                return (alert, after);
            }
            if started.elapsed() >= within {
                let metrics = self.observer.metrics();
                panic!("MISSED: no {kind} firing {within:?} into the fault; {}", self.describe(&metrics));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Switches the fault off and waits up to `within` for every alert of `kind` to resolve;
    /// prints and returns the time to resolve.
    pub fn healed(&mut self, kind: &str, within: Duration) -> Duration {
        self.gateway.heal();
        self.fault_started = None;
        self.firing = None;
        let after = crate::alerts::wait_resolved(&self.observer, kind, within);
        eprintln!(
            "RESOLVED {kind} {:.2}s after heal; still open: {:?}",
            after.as_secs_f64(),
            open_alerts(&self.observer)
        );
        after
    }

    /// Stops the load; the number of requests it made.
    pub fn finish(mut self) -> usize {
        let alerts = self.observer.alerts();
        let seen: Vec<String> = alerts
            .iter()
            .map(|a| format!("{} {} {}: {}", a["kind"], a["subject"], a["state"], a["summary"].as_str().unwrap_or("")))
            .collect();
        eprintln!("every alert of the run: {seen:#?}");
        crate::load::stop(&self.done);
        let served = std::mem::take(&mut self.clients).into_iter().map(|c| c.join().unwrap_or(0)).sum();
        eprintln!("the load made {served} requests");
        served
    }

    /// The observer's view of the fixture for a failure message: open alerts, the snapshot's
    /// process entry and event loops, and off-CPU seconds by thread group and reason (since the
    /// fault when one is on).
    pub fn describe(&self, metrics: &str) -> String {
        let pid = self.gateway.pid();
        let (process, loops) = snapshot_of(&self.observer, pid);
        let now = crate::metrics::parse(metrics);
        let empty = Vec::new();
        let before = self.fault_started.as_ref().map_or(&empty, |(_, b)| b);
        let window = self.fault_started.as_ref().map_or("since start".to_owned(), |(t, _)| {
            format!("in the {:.1}s since the fault", t.elapsed().as_secs_f64())
        });
        let mut offcpu: Vec<String> = Vec::new();
        for name in
            ["gateway_observer_thread_offcpu_seconds_total", "gateway_observer_event_loop_blocked_seconds_total"]
        {
            for s in now.iter().filter(|s| s.name == name) {
                let was = before.iter().find(|b| b.name == s.name && b.labels == s.labels).map_or(0.0, |b| b.value);
                if s.value - was > 0.05 {
                    let labels: Vec<String> =
                        s.labels.iter().filter(|(k, _)| *k != "process").map(|(k, v)| format!("{k}={v}")).collect();
                    offcpu.push(format!(
                        "{} {}: {:.2}s",
                        name.trim_start_matches("gateway_observer_"),
                        labels.join(","),
                        s.value - was
                    ));
                }
            }
        }
        format!(
            "alerts {:#?}\nsnapshot process {process:#}\nevent loops {loops:#?}\noff-CPU {window}:\n  {}\nthreads now:\n{}",
            self.observer.alerts(),
            offcpu.join("\n  "),
            self.gateway.sample_thread_states(5)
        )
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        crate::load::stop(&self.done);
    }
}

/// The blocked-loop scenario every single-loop runtime shares: `start`ed healthy under moderate
/// load (four clients, a short pause: enough that every ~200 ms block holds requests up), then
/// `fault` in the same process; EventLoopBlocked must name `loop_thread`, then resolve after the
/// heal. A request slower than `slow` proves the fault is in effect, and faster proves the heal.
pub fn blocked_loop_is_named(
    test: &str,
    start: impl FnOnce() -> RuntimeGateway,
    loop_thread: &str,
    fault: &str,
    slow: Duration,
) {
    blocked_loop_is_named_and(test, start, loop_thread, fault, slow, |_| {});
}

/// [`blocked_loop_is_named`], with `check` run on the scenario once the alert fired, while the
/// fault is still on (to assert what the alert's evidence shows).
pub fn blocked_loop_is_named_and(
    test: &str,
    start: impl FnOnce() -> RuntimeGateway,
    loop_thread: &str,
    fault: &str,
    slow: Duration,
    check: impl FnOnce(&Scenario),
) {
    const HEALTHY: Duration = Duration::from_secs(6);
    const DETECT_WITHIN: Duration = Duration::from_secs(15);
    const RESOLVE_WITHIN: Duration = Duration::from_secs(20);
    if !crate::privileged(test) {
        return;
    }
    let _serial = crate::serial();
    let gateway = start();
    let kind = "EventLoopBlocked";
    let detection = Detection { runtime: gateway.runtime, fault, kind, start: Start::Watching };
    detection.declare();
    let mut scenario = Scenario::healthy(gateway, 4, Duration::from_millis(5), HEALTHY);
    let latency = scenario.fault(fault);
    assert!(latency >= slow, "{fault}: a request took {latency:?}, the fault is not in effect");
    let (alert, detected) = scenario.detected(kind, DETECT_WITHIN);
    assert_eq!(alert["subject"], loop_thread, "the loop thread is the one blocked: {alert:#}");
    assert_eq!(alert["process"]["pid"], scenario.gateway.pid(), "{alert:#}");
    check(&scenario);
    let resolved = scenario.healed(kind, RESOLVE_WITHIN);
    let after_heal = scenario.gateway.timed_get("/");
    assert!(after_heal < slow, "healed, yet a request took {after_heal:?}");
    detection.report(detected, Some(resolved));
    assert!(scenario.finish() > 50, "the load barely ran");
}
