//! `gateway-observer top` whose terminal goes away must end, promptly and without spinning: an
//! SSH session that drops (its terminal hangs up, no signal for a process outside the session),
//! a tmux pane killed (SIGHUP and a hangup), a SIGTERM. No daemon is needed: `top` runs against a
//! port nobody listens on and shows that it is retrying. Unprivileged; every process is ended on
//! drop.

use std::{
    net::TcpListener,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use tests::{pty::Pty, tmux::Tmux};

/// A loopback URL nobody answers on.
fn nobody_listening() -> String {
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    format!("http://127.0.0.1:{port}")
}

fn top_command(url: &str) -> Command {
    let mut command = Command::new(tests::binary("gateway-observer"));
    command.args(["top", "--connect", url, "--interval", "200ms"]);
    command
}

fn on_screen(out: &str) -> bool {
    out.contains("disconnected") || out.contains("connecting")
}

#[test]
fn top_ends_when_its_terminal_hangs_up() {
    let mut pty = Pty::spawn(top_command(&nobody_listening()), 100, 30);
    pty.wait_for("top's first screen", Duration::from_secs(10), on_screen);
    pty.hang_up();
    let cpu_before = pty.cpu_ticks();
    let status = pty.wait_exit(Duration::from_secs(3));
    let cpu = pty.cpu_ticks().saturating_sub(cpu_before);
    assert!(status.is_some(), "top still running 3 s after its terminal hung up ({cpu} clock ticks of CPU meanwhile)");
}

#[test]
fn top_restores_the_terminal_on_sigterm() {
    let mut pty = Pty::spawn(top_command(&nobody_listening()), 100, 30);
    pty.wait_for("top's first screen", Duration::from_secs(10), on_screen);
    assert_eq!(pty.local_flags() & libc::ICANON, 0, "top put the terminal in raw mode");
    // SAFETY: kill with our own child's pid.
    unsafe { libc::kill(pty.child.id() as libc::pid_t, libc::SIGTERM) };
    let status = pty.wait_exit(Duration::from_secs(3)).expect("top ends within 3 s of SIGTERM");
    assert!(status.success(), "top after SIGTERM: {status}");
    let flags = pty.local_flags();
    assert!(flags & libc::ICANON != 0 && flags & libc::ECHO != 0, "the terminal is left raw: c_lflag {flags:#o}");
    pty.wait_for("the main screen back and the cursor shown", Duration::from_secs(1), |out| {
        out.contains("\x1b[?1049l") && out.contains("\x1b[?25h")
    });
}

#[test]
fn top_ends_when_tmux_kills_its_pane() {
    let url = nobody_listening();
    let command = format!("exec {} top --connect {url} --interval 200ms", tests::binary("gateway-observer").display());
    let Some(tmux) = Tmux::start(&command, 100, 30) else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "tmux not found on PATH and CI=true");
        eprintln!("SKIPPED: tmux not found on PATH (apt-get install tmux)");
        return;
    };
    tmux.wait_for("top's first screen", Duration::from_secs(10), on_screen);
    let pid = tmux.pane_pid();
    let still_top = || {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&url))
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    };
    assert!(still_top(), "pane pid {pid} is not top");
    tmux.kill_pane();
    let end = Instant::now() + Duration::from_secs(3);
    while still_top() && Instant::now() < end {
        thread::sleep(Duration::from_millis(50));
    }
    let survived = still_top();
    if survived {
        // Not our child (tmux's): end it here so that a failure leaves nothing running.
        // SAFETY: kill with a pid whose command line names this test's unique URL.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    assert!(!survived, "top (pid {pid}) still running 3 s after tmux killed its pane");
}
