//! What `gateway-observer top --once` prints, against a stand-in for the daemon's API: names a
//! target chose (escape sequences in a process or thread name) reach the terminal escaped, in
//! text and in JSON; a stdout whose reader went away (`| head`) ends it quietly, not in a panic.
//! Unprivileged; the stand-in is a thread that ends with the test.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::TcpListener,
    process::{Command, Output, Stdio},
    thread,
};

const SNAPSHOT: &str = r#"{"version":1,"targets":1,"threads":2,
  "processes":[{"pid":42,"comm":"gw\u001b]0;pwned\u0007","inbound":{"per_second":1.0}}],
  "event_loops":[{"pid":42,"comm":"gw\u001b]0;pwned\u0007","thread":"loop\u009b2J","utilization":0.5}]}"#;
const ALERTS: &str = r#"{"alerts":[{"kind":"EventLoopBlocked","state":"firing","subject":"loop\u009b2J",
  "summary":"event loop blocked","process":{"pid":42,"comm":"gw\u001b]0;pwned\u0007"},"since":"2026-12-03T19:00:00Z"}]}"#;

/// Serves the two API bodies to `connections` connections; its URL.
fn api(connections: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for stream in listener.incoming().take(connections).flatten() {
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            let body = if line.contains("/api/v1/alerts") { ALERTS } else { SNAPSHOT };
            let mut stream = stream;
            let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
        }
    });
    format!("http://127.0.0.1:{port}")
}

fn top_once(format: &str, stdout: Stdio) -> Output {
    Command::new(tests::binary("gateway-observer"))
        .args(["top", "--once", "--format", format, "--connect", &api(2)])
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run gateway-observer top --once")
}

#[test]
fn names_reach_the_terminal_escaped() {
    for format in ["text", "json"] {
        let out = top_once(format, Stdio::piped());
        assert!(out.status.success(), "{format}: {out:?}");
        let text = String::from_utf8(out.stdout).expect("UTF-8");
        let raw: Vec<char> = text.chars().filter(|c| c.is_control() && *c != '\n').collect();
        assert!(raw.is_empty(), "{format}: control characters {raw:?} printed raw:\n{text}");
        if format == "json" {
            // Still the daemon's data: the escapes are JSON's, the names intact.
            let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(v["snapshot"]["event_loops"][0]["thread"], "loop\u{9b}2J", "{text}");
        } else {
            assert!(text.contains("gw\\x1b]0;pwned\\x07"), "the name, escaped:\n{text}");
        }
    }
}

#[test]
fn a_closed_stdout_ends_it_quietly() {
    for format in ["text", "json"] {
        let out = top_once(format, tests::closed_pipe());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "{format}: {} with stderr {stderr:?}", out.status);
    }
}
