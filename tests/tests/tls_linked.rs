//! HTTPS through TLS libraries other than a dynamically linked OpenSSL, on the same C server
//! (`tests/fixtures/c/tls_server.c`, built at test time): BoringSSL (Debian's
//! android-libboringssl, `libssl.so.0`, which keeps OpenSSL's names and has no `_ex` calls), and
//! OpenSSL linked into the executable from `libssl.a`, its calls exported nowhere and found in
//! `.symtab`, as in a static Envoy or netty-tcnative flavour built with symbols. A handler
//! answering after 2 ms under wrk over https: the observer's inbound count matches wrk's within
//! 0.1 %, p50 within 10 %, nothing parsed as garbage. The same executable stripped of `.symtab`
//! cannot be hooked: its connections are counted as TLS nobody decrypts.

use std::process::Command;

use tests::{
    c_fixtures::{BORINGSSL, STATIC_OPENSSL, c_binary},
    free_port,
    observer::Observer,
    privileged,
    tls::{HTTPS_HANDLER_DELAY, Killed, assert_https_matches_wrk, certified_dir, hooked_https_server, https_server},
    wait_until,
    wrk::{WRK_CONNECTIONS, metric_sum, wrk},
};

#[test]
fn boringssl_https_requests_match_wrk() {
    if !privileged(module_path!()) {
        return;
    }
    server_matches_wrk("tls-boringssl", BORINGSSL, "libssl.so.0");
}

#[test]
fn statically_linked_openssl_https_requests_match_wrk() {
    if !privileged(module_path!()) {
        return;
    }
    server_matches_wrk("tls-static-ssl", STATIC_OPENSSL, "tls-static-ssl");
}

/// The C server built as `name` with `libraries`, hooked in `library`, checked against wrk.
fn server_matches_wrk(name: &str, libraries: &[&str], library: &str) {
    let (_dir, cert, key) = certified_dir(name);
    let port = free_port();
    let (_server, observer) = hooked_https_server(server_command(name, libraries, port, &cert, &key), name, port);
    let hooked = metric_sum(&observer.metrics(), "gateway_observer_tls_hooked_processes", &[("library", library)]);
    assert_eq!(hooked, 1.0, "{name} hooked in {library}");
    let (_, unattributed) = assert_https_matches_wrk(&observer, port, name);
    assert!(
        unattributed <= WRK_CONNECTIONS as f64,
        "{unattributed} plaintext records tied to no connection (more than wrk's {WRK_CONNECTIONS} connections)"
    );
}

fn server_command(name: &str, libraries: &[&str], port: u16, cert: &str, key: &str) -> Command {
    let mut command = Command::new(c_binary("tls_server.c", name, libraries));
    command.args([&port.to_string(), cert, key, &HTTPS_HANDLER_DELAY.as_millis().to_string()]);
    command
}

/// Stripped, the statically linked server names its calls nowhere: nothing is hooked, no
/// failure is reported (it is no `libssl`), and its connections are counted as TLS nobody
/// decrypts rather than parsed as garbage.
#[test]
fn stripped_static_openssl_is_counted_as_unparsed_tls() {
    if !privileged(module_path!()) {
        return;
    }
    let name = "tls-stripped";
    let built = c_binary("tls_server.c", name, STATIC_OPENSSL);
    let stripped = built.with_file_name("tls-stripped-s");
    let status = Command::new("strip").arg("-o").arg(&stripped).arg(&built).status().expect("run strip (binutils)");
    assert!(status.success(), "strip {}: {status}", built.display());
    let (_dir, cert, key) = certified_dir(name);
    let port = free_port();
    let mut command = Command::new(&stripped);
    command.args([&port.to_string(), &cert, &key, "0"]);
    let server: Killed = https_server(command, name, port);
    let observer = Observer::start_with(&[&format!("pid={}", server.0.id())], &["--tls-plaintext"]);
    let client = wrk(&format!("https://127.0.0.1:{port}/items"));
    assert!(client.requests > 0, "wrk made no request");
    wait_until("wrk's connections counted as unparsed TLS", std::time::Duration::from_secs(5), || {
        metric_sum(
            &observer.metrics(),
            "gateway_observer_tls_connections_unparsed_total",
            &[("process", "tls-stripped-s")],
        ) >= WRK_CONNECTIONS as f64
    });
    let metrics = observer.metrics();
    let process = [("process", "tls-stripped-s")];
    assert_eq!(metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[]), 0.0, "nothing to hook");
    assert_eq!(metric_sum(&metrics, "gateway_observer_tls_hook_failures_total", &[]), 0.0, "not a failure");
    assert_eq!(metric_sum(&metrics, "gateway_observer_http_non_http_bytes_total", &process), 0.0, "ciphertext parsed");
    assert_eq!(metric_sum(&metrics, "gateway_observer_http_requests_total", &process), 0.0, "requests from ciphertext");
}
