//! Gateways on the JVM that this project did not write the runtime of: real Netty 4.1, Guava's
//! RateLimiter, the JDK's own HttpServer and embedded Tomcat 10.1 (Debian's jars), in small
//! fixtures under `tests/fixtures/jvm/`. The fixtures are compiled with javac once per test run
//! into `<target>/jvm-fixtures/` (again when a `.java` is newer than its class), started with
//! `java -cp ...` as child processes (killed on drop, also when a test panics; they also exit when
//! their stdin closes), and driven over stdin/stdout:
//!
//! - the fixture prints `ready PORT` once it serves on the port the harness gave it;
//! - `fault NAME` switches a fault on in the running process, `heal` switches it off, `stats`
//!   reports counters; each is answered by one line (`ok ...`, or `error ...`), so when
//!   [`JvmGateway::fault`] returns the switch has happened.

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Write as _},
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        OnceLock,
        mpsc::{self, Receiver, RecvTimeoutError},
    },
    time::{Duration, Instant, SystemTime},
};

use crate::free_port;

/// The jars the fixtures compile and run against (Debian's libnetty-java, libguava-java,
/// libtomcat10-embed-java and libjakarta-annotation-api-java; `netty-all.jar` is an empty
/// aggregator, so the parts are listed; without the annotation jar Tomcat's context fails to
/// start).
pub const JARS: [&str; 13] = [
    "/usr/share/java/netty-common.jar",
    "/usr/share/java/netty-buffer.jar",
    "/usr/share/java/netty-transport.jar",
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-codec-http.jar",
    "/usr/share/java/netty-codec-redis.jar",
    "/usr/share/java/netty-handler.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/tomcat10-embed-core.jar",
    "/usr/share/java/tomcat10-embed-el.jar",
    "/usr/share/java/tomcat10-embed-websocket.jar",
    "/usr/share/java/jakarta-annotation-api.jar",
];

/// The Debian packages of the JDK and `JARS`, for a message that says how to get them.
const PACKAGES: &str =
    "default-jdk-headless libnetty-java libguava-java libtomcat10-embed-java libjakarta-annotation-api-java";

/// Whether java, javac and the jars are here; without them a test says why it skips (and fails
/// under CI=true, where a skipped test is a failure).
pub fn available(test: &str) -> bool {
    available_with(test, &[], "")
}

/// As [`available`], and the files `extra` too (from the Debian packages `packages`).
pub fn available_with(test: &str, extra: &[&str], packages: &str) -> bool {
    let on_path =
        |bin: &str| std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()));
    let mut missing: Vec<&str> = ["java", "javac"].into_iter().filter(|b| !on_path(b)).collect();
    missing.extend(JARS.iter().chain(extra).copied().filter(|j| !Path::new(j).exists()));
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: missing {missing:?} and CI=true (apt-get install {PACKAGES} {packages})"
    );
    eprintln!("SKIPPED {test}: missing {missing:?} (apt-get install {PACKAGES} {packages})");
    false
}

/// `tests/fixtures/jvm/`.
pub fn sources_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/jvm")
}

/// `<target>/jvm-fixtures/`, the compiled classes: compiled on the first call of a test run,
/// and only when a `.java` is newer than its class (or the class is missing).
pub fn classes_dir() -> &'static Path {
    static COMPILED: OnceLock<PathBuf> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
        let out = target.join("jvm-fixtures");
        std::fs::create_dir_all(&out).expect("create target/jvm-fixtures");
        // Another test binary may compile at the same moment: one javac at a time.
        let lock = std::fs::File::create(out.join(".lock")).expect("create the compile lock");
        // SAFETY: flock on a descriptor we own; released when `lock` is dropped.
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        let sources: Vec<PathBuf> = std::fs::read_dir(sources_dir())
            .expect("read tests/fixtures/jvm")
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "java"))
            .collect();
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let stale = sources.iter().any(|src| {
            let class = out.join(src.file_stem().unwrap_or_default()).with_extension("class");
            match (modified(src), modified(&class)) {
                (Some(s), Some(c)) => s > c,
                _ => true,
            }
        });
        if stale {
            let started = Instant::now();
            let output = Command::new("javac")
                .args(["-nowarn", "-d"])
                .arg(&out)
                .args(["-cp", &JARS.join(":")])
                .args(&sources)
                .output()
                .expect("run javac");
            assert!(
                output.status.success(),
                "javac failed ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            // javac keeps a class's mtime if it did not change it: mark them all compiled now.
            let now = SystemTime::now();
            for src in &sources {
                let class = out.join(src.file_stem().unwrap_or_default()).with_extension("class");
                if let Ok(f) = std::fs::File::options().write(true).open(&class) {
                    let _ = f.set_modified(now);
                }
            }
            eprintln!("compiled {} JVM fixture(s) in {:?}", sources.len(), started.elapsed());
        }
        out
    })
}

/// A running fixture gateway.
pub struct JvmGateway {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub port: u16,
    pub class: String,
}

impl JvmGateway {
    /// `java JVM_OPTS -cp CLASSES:JARS CLASS PORT ARGS...` on a free port; waits (30 s) for
    /// `ready PORT`.
    pub fn start(class: &str, args: &[&str], jvm_opts: &[&str]) -> JvmGateway {
        Self::start_within(class, args, jvm_opts, Duration::from_secs(30))
    }

    /// As `start`, waiting `ready_within` for `ready PORT` (a fixture that builds a large heap
    /// first takes longer).
    pub fn start_within(class: &str, args: &[&str], jvm_opts: &[&str], ready_within: Duration) -> JvmGateway {
        let classpath = std::iter::once(classes_dir().to_string_lossy().into_owned())
            .chain(JARS.iter().map(|j| (*j).to_owned()))
            .collect::<Vec<_>>()
            .join(":");
        let port = free_port();
        let mut child = Command::new("java")
            // Frame pointers in JIT code: the observer's stacks then reach past the innermost frame.
            .arg("-XX:+PreserveFramePointer")
            .args(jvm_opts)
            .args(["-cp", &classpath, class, &port.to_string()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start java {class}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut gateway = JvmGateway { child, stdin, lines, port, class: class.to_owned() };
        let ready = gateway.next_line(ready_within);
        assert_eq!(ready, format!("ready {port}"), "{class} did not start");
        gateway
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line the fixture prints, within `timeout`; panics (with the exit status if the
    /// fixture died) otherwise.
    fn next_line(&mut self, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => return line,
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    panic!("{} closed its stdout (exited: {status})", self.class);
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        panic!("{} exited: {status}", self.class);
                    }
                    assert!(Instant::now() < end, "{} said nothing within {timeout:?}", self.class);
                }
            }
        }
    }

    /// Sends one command line and returns the fixture's answer (10 s at most).
    pub fn command(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).unwrap_or_else(|e| panic!("write {line:?}: {e}"));
        self.next_line(Duration::from_secs(10))
    }

    /// Switches fault `name` on; returns once the fixture has acknowledged it.
    pub fn fault(&mut self, name: &str) {
        let answer = self.command(&format!("fault {name}"));
        assert_eq!(answer, format!("ok fault {name}"), "{} refused fault {name}", self.class);
    }

    /// Switches every fault off; returns once the fixture has acknowledged it.
    pub fn heal(&mut self) {
        let answer = self.command("heal");
        assert_eq!(answer, "ok heal", "{} did not heal", self.class);
    }

    /// The fixture's counters (`stats`) as name → value.
    pub fn stats(&mut self) -> HashMap<String, String> {
        let answer = self.command("stats");
        let fields = answer.strip_prefix("ok stats ").unwrap_or_else(|| panic!("stats said {answer:?}"));
        fields
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// One numeric counter of `stats`.
    pub fn stat(&mut self, name: &str) -> u64 {
        let stats = self.stats();
        stats.get(name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {name} in {stats:?}"))
    }
}

impl Drop for JvmGateway {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the threads whose name starts with `prefix` (the kernel's 15 bytes) are doing, sampled
/// `samples` times 20 ms apart from /proc/PID/task/*/{stat,syscall}: a census of states (R, S,
/// D) and, for sleeping threads, the syscalls they sleep in. The ground truth a test prints
/// next to what the observer said.
pub fn thread_census(pid: u32, prefix: &str, samples: u32) -> String {
    let mut threads = 0;
    let mut states: HashMap<char, u32> = HashMap::new();
    let mut syscalls: HashMap<String, u32> = HashMap::new();
    for i in 0..samples {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let matching: Vec<(u32, String)> =
            crate::threads(pid).into_iter().filter(|(_, name)| name.starts_with(prefix)).collect();
        threads = threads.max(matching.len());
        for (tid, _) in matching {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap_or_default();
            // The state follows the parenthesized name, which may hold spaces.
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).unwrap_or('?');
            *states.entry(state).or_default() += 1;
            if state != 'R' {
                let line = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
                let fields: Vec<&str> = line.split_whitespace().collect();
                let name = match fields.first().and_then(|f| f.parse::<i64>().ok()) {
                    // futex(uaddr, op, val, timeout, ...): a non-null timeout is a timed wait.
                    Some(202) if fields.get(4).is_some_and(|t| *t != "0x0") => "futex(timed)".to_owned(),
                    Some(202) => "futex(untimed)".to_owned(),
                    Some(nr) => syscall_name(nr),
                    None => "running".to_owned(),
                };
                *syscalls.entry(name).or_default() += 1;
            }
        }
    }
    let mut states: Vec<_> = states.into_iter().collect();
    states.sort();
    let mut syscalls: Vec<_> = syscalls.into_iter().collect();
    syscalls.sort_by_key(|s| std::cmp::Reverse(s.1));
    let total = states.iter().map(|(_, n)| n).sum::<u32>().max(1) as f64;
    let share = |n: u32| format!("{:.0}%", 100.0 * f64::from(n) / total);
    format!(
        "{prefix}*: {threads} thread(s); states {}; sleeping in {}",
        states.iter().map(|(s, n)| format!("{s} {}", share(*n))).collect::<Vec<_>>().join(", "),
        syscalls.iter().map(|(s, n)| format!("{s} {}", share(*n))).collect::<Vec<_>>().join(", ")
    )
}

/// x86-64 names of the syscalls a JVM thread sleeps in.
fn syscall_name(nr: i64) -> String {
    match nr {
        0 => "read".into(),
        7 => "poll".into(),
        23 => "select".into(),
        35 => "nanosleep".into(),
        45 => "recvfrom".into(),
        202 => "futex".into(),
        232 => "epoll_wait".into(),
        230 => "clock_nanosleep".into(),
        281 => "epoll_pwait".into(),
        -1 => "none(running or fault)".into(),
        n => format!("syscall {n}"),
    }
}
