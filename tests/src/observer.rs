//! The real `gateway-observer` daemon as a child process, stopped with SIGTERM on drop (killed
//! after 10 s), ready once /ready answers 200.

use std::{
    process::{Child, Command, ExitStatus, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::{binary, free_port, http_client::try_request, wait_for};

pub struct Observer {
    child: Option<Child>,
    pub port: u16,
}

impl Observer {
    /// The daemon watching one process, as the incident scenarios run it.
    pub fn start(pid: u32) -> Observer {
        Self::start_with_targets(&[&format!("pid={pid}")])
    }

    /// The daemon watching `targets` (each a `--target` value: `port=8080`, `cgroup=/x`).
    pub fn start_with_targets(targets: &[&str]) -> Observer {
        Self::start_with(targets, &[])
    }

    /// As `start_with_targets`, with more `run` arguments (a `--config FILE`: the flags given
    /// here override it).
    pub fn start_with(targets: &[&str], extra: &[&str]) -> Observer {
        Self::start_full(targets, extra, Stdio::null())
    }

    /// As `start_with_targets`, with stdout (alert transitions) going to `stdout`.
    pub fn start_with_stdout(targets: &[&str], stdout: Stdio) -> Observer {
        Self::start_full(targets, &[], stdout)
    }

    fn start_full(targets: &[&str], extra: &[&str], stdout: Stdio) -> Observer {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(targets.iter().flat_map(|t| ["--target", t]));
        // Nice 0, not the default 10: here the load generators share the two CPUs with the
        // daemon, and the tests time detection, not the daemon's manners.
        args.extend(["--interval", "500ms", "--nice", "0"]);
        Self::spawn_with(&args, stdout)
    }

    /// `gateway-observer run --interval 200ms ARGS...`: the probe scenarios, which read the
    /// kernel maps often to compare them with ground truth.
    pub fn run(args: &[&str]) -> Observer {
        let mut all = vec!["--interval", "200ms"];
        all.extend(args);
        Self::spawn(&all)
    }

    /// As `run`, started through `prefix` (a command that execs the rest, such as `setpriv
    /// --bounding-set=...`), so the daemon keeps its pid.
    pub fn run_under(prefix: &[&str], args: &[&str]) -> Observer {
        let mut all = vec!["--interval", "200ms"];
        all.extend(args);
        Self::spawn_full(prefix, &all, Stdio::null())
    }

    fn spawn(args: &[&str]) -> Observer {
        Self::spawn_with(args, Stdio::null())
    }

    fn spawn_with(args: &[&str], stdout: Stdio) -> Observer {
        Self::spawn_full(&[], args, stdout)
    }

    fn spawn_full(prefix: &[&str], args: &[&str], stdout: Stdio) -> Observer {
        let port = free_port();
        let daemon = binary("gateway-observer");
        let mut command = match prefix.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(&daemon);
                command
            }
            None => Command::new(&daemon),
        };
        let child = command
            .arg("run")
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(stdout)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gateway-observer");
        let mut observer = Observer { child: Some(child), port };
        let ready = wait_for(Duration::from_secs(30), || {
            if let Some(status) = observer.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("gateway-observer exited before it was ready: {status}");
            }
            (observer.get("/ready").map(|(s, _)| s) == Some(200)).then_some(())
        });
        assert!(ready.is_some(), "observer not ready within 30 s");
        observer
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// (status, body) of a GET on the daemon's listener; None when it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let r = try_request(self.port, "GET", path, &[], b"", Duration::from_secs(5)).ok()?;
        Some((r.status, r.body))
    }

    pub fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "GET /metrics: {body}");
        body
    }

    pub fn alerts(&self) -> Vec<Value> {
        let (status, body) = self.get("/api/v1/alerts").expect("GET /api/v1/alerts");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("alerts JSON");
        v["alerts"].as_array().cloned().unwrap_or_default()
    }

    /// SIGTERM, then the exit status (killed after 10 s).
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill with a pid we own and a valid signal.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_for(Duration::from_secs(10), || child.try_wait().ok().flatten());
        status.unwrap_or_else(|| {
            let _ = child.kill();
            child.wait().expect("wait after kill")
        })
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
    }
}
