//! A fixture process (src/bin/*) driven over its stdin/stdout. They share one protocol: print
//! `ready`, wait for a line (`go`), run, print one result line, exit when stdin closes.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

/// Ground truth the fixture measured, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Truth {
    pub sleep_ns: u64,
    pub futex_ns: u64,
    pub futex_timed_ns: u64,
    pub futex_woken_ns: u64,
    pub spin_ns: u64,
    pub child_sleep_ns: u64,
}

pub struct Fixture {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Fixture {
    /// Starts a fixture (path from the test crate's CARGO_BIN_EXE) and waits for `ready`.
    pub fn start(bin: &str, args: &[&str]) -> Self {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("fixture stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("fixture ready line");
        assert_eq!(line.trim(), "ready", "fixture said {line:?}");
        Self { child, stdin, stdout }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts the workload.
    pub fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "go").expect("write go");
        stdin.flush().expect("flush");
    }

    /// Waits for the workload's result line.
    pub fn result_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("fixture result line");
        line
    }

    /// offcpu-fixture: waits for the workload to finish and returns what it measured.
    pub fn truth(&mut self) -> Truth {
        let line = self.result_line();
        let field = |name: &str| -> u64 {
            let key = format!("\"{name}\":");
            line.split(&key)
                .nth(1)
                .and_then(|s| s.split([',', '}']).next())
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        Truth {
            sleep_ns: field("sleep_ns"),
            futex_ns: field("futex_ns"),
            futex_timed_ns: field("futex_timed_ns"),
            futex_woken_ns: field("futex_woken_ns"),
            spin_ns: field("spin_ns"),
            child_sleep_ns: field("child_sleep_ns"),
        }
    }

    /// Lets the fixture exit and reaps it.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
