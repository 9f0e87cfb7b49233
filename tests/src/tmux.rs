//! A tmux server of our own for tests that drive `gateway-observer top` in a real terminal.

use std::{
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

/// A tmux server of our own (`-L`), so that the user's sessions are never touched; killed on
/// drop, also when the test fails.
pub struct Tmux {
    socket: String,
    session: &'static str,
}

impl Tmux {
    /// Runs `command` in a detached `width`x`height` pane, or `None` if tmux is not installed.
    pub fn start(command: &str, width: u16, height: u16) -> Option<Tmux> {
        let socket = format!("go-top-test-{}", std::process::id());
        let tmux = Tmux { socket, session: "top" };
        let status = Command::new("tmux")
            .args(["-L", &tmux.socket, "-f", "/dev/null", "new-session", "-d", "-s", tmux.session])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .arg(command)
            .env("TERM", "xterm-256color")
            .stderr(Stdio::inherit())
            .status();
        match status {
            Ok(s) => {
                assert!(s.success(), "tmux new-session failed: {s}");
                Some(tmux)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("cannot run tmux: {e}"),
        }
    }

    /// The pane's text now; empty once the session has ended.
    pub fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", self.session])
            .stderr(Stdio::null())
            .output()
            .expect("run tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn send_keys(&self, keys: &str) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", self.session, keys])
            .status()
            .expect("tmux send-keys");
        assert!(status.success(), "tmux send-keys {keys}");
    }

    /// The pid of the pane's command (run it with `exec` so that it is the command itself).
    pub fn pane_pid(&self) -> u32 {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "display-message", "-p", "-t", self.session, "#{pane_pid}"])
            .output()
            .expect("run tmux display-message");
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim().parse().unwrap_or_else(|_| panic!("tmux gave no pane pid: {text:?}"))
    }

    /// Kills the pane as a user closing it would: tmux hangs up its terminal.
    pub fn kill_pane(&self) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "kill-pane", "-t", self.session])
            .status()
            .expect("tmux kill-pane");
        assert!(status.success(), "tmux kill-pane");
    }

    pub fn alive(&self) -> bool {
        Command::new("tmux")
            .args(["-L", &self.socket, "has-session", "-t", self.session])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Polls the pane until `done` holds, or panics after `within` with the last screen.
    pub fn wait_for(&self, what: &str, within: Duration, done: impl Fn(&str) -> bool) -> (String, Duration) {
        let start = Instant::now();
        loop {
            let screen = self.capture();
            if done(&screen) {
                return (screen, start.elapsed());
            }
            assert!(start.elapsed() < within, "{what}: not on screen within {within:?}; the pane shows:\n{screen}");
            thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).stderr(Stdio::null()).status();
    }
}
