//! HTTPS requests to a Go server (`tests/fixtures/go/tls_server.go`: net/http's
//! ListenAndServeTLS on crypto/tls, built at test time with Debian's golang-go): Go gets no
//! uretprobes, so `(*tls.Conn).Read`, `Write` and the handshake are hooked at their entries and at
//! every RET instruction inside them, and the call in progress is kept per goroutine (a goroutine
//! that parks in `Read` resumes on any thread). A handler answering after 10 ms, under wrk over
//! https: the observer's inbound count matches wrk's within 0.1 % (the requests wrk abandons at
//! its end) and its p50 is within 10 % of wrk's; plaintext tied to no connection only for the
//! responses to those abandoned requests. The same server stripped (`-s -w`: no `.symtab`, the
//! functions found in `.gopclntab`) passes the same checks. HTTP/2 from the same server (ALPN
//! h2; Go's h2 server writes from short-lived goroutines): every h2load stream counted once, with
//! its status, one and eight streams at a time per connection.

use std::{path::PathBuf, process::Command};

use tests::{
    free_port,
    h2load::{self, h2load},
    privileged,
    runtimes::{go_binary, go_stripped_binary},
    tls::{HTTPS_HANDLER_DELAY, assert_https_matches_wrk, certified_dir, hooked_https_server},
    wrk::{UPSTREAM_DELAY, WRK_CONNECTIONS, metric_sum},
};

#[test]
fn go_https_requests_match_wrk() {
    if !privileged(module_path!()) {
        return;
    }
    go_server_matches_wrk(go_binary("tls_server.go"), "go-tls_server");
}

#[test]
fn stripped_go_https_requests_match_wrk() {
    if !privileged(module_path!()) {
        return;
    }
    // 15 characters: the process name is the whole file name.
    go_server_matches_wrk(go_stripped_binary("tls_server.go", "go-tls_stripped"), "go-tls_stripped");
}

/// The server `binary` (its process name `name`) hooked and checked against wrk.
fn go_server_matches_wrk(binary: PathBuf, name: &str) {
    let (_dir, cert, key) = certified_dir(name);
    let port = free_port();
    let delay = HTTPS_HANDLER_DELAY.as_millis().to_string();
    let mut command = Command::new(binary);
    command.args([&port.to_string(), &cert, &key, &delay]);
    let (_server, observer) = hooked_https_server(command, name, port);
    let metrics = observer.metrics();
    assert_eq!(
        metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[("library", name)]),
        1.0,
        "the Go executable hooked"
    );
    let (_, unattributed) = assert_https_matches_wrk(&observer, port, name);
    // A response to a request wrk abandoned at its end (one per connection at most) may be written
    // after the connection closed: its socket is no longer followed.
    assert!(
        unattributed <= WRK_CONNECTIONS as f64,
        "{unattributed} plaintext records tied to no connection (more than wrk's {WRK_CONNECTIONS} connections)"
    );
}

#[test]
fn go_h2_streams_over_tls_counted_with_their_status() {
    if !privileged(module_path!()) {
        return;
    }
    let name = "go-tls_server";
    let (_dir, cert, key) = certified_dir("go-h2");
    let port = free_port();
    let mut command = Command::new(go_binary("tls_server.go"));
    command.args([&port.to_string(), &cert, &key, &UPSTREAM_DELAY.as_millis().to_string()]);
    let (_server, observer) = hooked_https_server(command, name, port);
    let url = format!("https://127.0.0.1:{port}/items");
    let inbound = |status_class: Option<&str>| {
        let mut labels = vec![("direction", "inbound")];
        labels.extend(status_class.map(|c| ("status_class", c)));
        metric_sum(&observer.metrics(), "gateway_observer_http_requests_total", &labels)
    };
    for streams in [1, 8] {
        let (all, statusless) = (inbound(None), inbound(Some("none")));
        let unattributed = || metric_sum(&observer.metrics(), "gateway_observer_tls_unattributed_records_total", &[]);
        let unattributed_before = unattributed();
        let load = h2load(&url, streams);
        // The last responses reach the observer a tick later.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let counted = inbound(None) - all;
        let without_status = inbound(Some("none")) - statusless;
        let unattributed = unattributed() - unattributed_before;
        eprintln!(
            "{streams} streams a connection: {counted} counted, {without_status} without a status, {unattributed} unattributed"
        );
        assert_eq!(counted, load.succeeded as f64, "h2 streams vs h2load's requests, {streams} at a time");
        // The race this guards: a Write's plaintext sent at its RET, after the peer had the
        // response and closed, found its socket gone (a connection's last response statusless).
        assert_eq!(without_status, 0.0, "streams without a status, {streams} at a time");
        // Not a response (each has its status): a frame written as a connection closes, as
        // h2load's GOAWAY ends it (1 in 4 runs, one record); at most one per connection.
        assert!(
            unattributed <= h2load::CONNECTIONS as f64,
            "{unattributed} plaintext records tied to no connection, {streams} at a time"
        );
    }
}
