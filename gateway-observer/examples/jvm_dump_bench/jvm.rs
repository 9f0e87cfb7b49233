//! The bench's JVM: `ParkedThreads.java`, compiled once into a directory removed afterwards, run
//! as a child that is killed and reaped on drop (also when the bench fails), and driven over its
//! stdin and stdout.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc::{self, Receiver},
    time::Duration,
};

use anyhow::{Context as _, bail};

const SOURCE: &str = include_str!("ParkedThreads.java");
/// Starting a thousand threads and compiling the spin loop takes a few seconds on a loaded host.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A directory holding the compiled class, removed on drop.
pub struct Classes(PathBuf);

impl Classes {
    pub fn compile() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("jvm-dump-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let classes = Self(dir);
        let source = classes.0.join("ParkedThreads.java");
        std::fs::write(&source, SOURCE).context("write the Java source")?;
        let output = Command::new("javac").arg("-d").arg(&classes.0).arg(&source).output().context("run javac")?;
        if !output.status.success() {
            bail!("javac failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr));
        }
        Ok(classes)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Classes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running ParkedThreads JVM.
pub struct Jvm {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Jvm {
    /// Starts it with `threads` threads parked `depth` frames deep and waits until they are.
    pub fn start(classes: &Classes, threads: usize, depth: usize) -> anyhow::Result<Self> {
        let mut child = Command::new("java")
            .args(["-Xmx256m", "-cp"])
            .arg(classes.path())
            .args(["ParkedThreads", &threads.to_string(), &depth.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("start java")?;
        let stdout = child.stdout.take().context("java's stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let jvm = Self { stdin: child.stdin.take(), child, lines };
        let ready = jvm.line(READY_WITHIN)?;
        if ready != "ready" {
            bail!("the JVM said {ready:?} instead of ready");
        }
        Ok(jvm)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).context("write to the JVM")
    }

    /// Its next line of output, within `timeout`.
    pub fn line(&self, timeout: Duration) -> anyhow::Result<String> {
        self.lines.recv_timeout(timeout).context("no answer from the JVM")
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        // Its stdin closing ends it; the kill is for one that does not listen.
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
