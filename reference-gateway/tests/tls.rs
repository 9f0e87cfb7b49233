//! TLS on both sides of the proxy, through the system's OpenSSL: a TLS listener (HTTP/1.1 and h2
//! by ALPN) in front of an upstream spoken to over TLS (another gateway's TLS listener), its
//! certificate checked against a given CA; an untrusted upstream certificate is a 502 counted as a
//! TLS failure; a key that does not load stops the start, naming the file. curl is the client.

use std::process::Command;

use tests::{free_port, reference_gateway::*, tls::certified_dir, upstream::*};

/// A gateway with a TLS listener and `extra`; (gateway, TLS port).
fn tls_gateway(cert: &str, key: &str, extra: &str) -> (Gateway, u16) {
    let port = free_port();
    (Gateway::start_with(extra, &tls_listener(port, cert, key)), port)
}

/// Every path to `up`, in plain HTTP.
fn routes_to(up: &Upstream) -> String {
    format!("[upstreams.u]\nservers = [\"{}\"]\n[[routes]]\nupstream = \"u\"\n", up.addr())
}

/// curl over https, the certificate checked against `ca`: (status, HTTP version, body).
fn curl(url: &str, ca: &str, http2: bool) -> (u16, String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "--cacert", ca, "-w", "\n%{http_code} %{http_version}"]);
    cmd.arg(if http2 { "--http2" } else { "--http1.1" }).arg(url);
    let out = cmd.output().expect("run curl (cargo xtask setup installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "curl {url}: {text}{}", String::from_utf8_lossy(&out.stderr));
    let (body, last) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (status, version) = last.split_once(' ').unwrap_or((last, ""));
    (status.parse().unwrap_or(0), version.to_owned(), body.to_owned())
}

#[test]
fn https_in_and_tls_to_the_upstream() {
    let (_dir, cert, key) = certified_dir("gw-tls");
    let up = Upstream::start("echo", Behavior::Echo);
    let (_backend, backend_port) = tls_gateway(&cert, &key, &routes_to(&up));
    let (front, port) = tls_gateway(
        &cert,
        &key,
        &format!(
            "[upstreams.b]\nservers = [\"127.0.0.1:{backend_port}\"]\ntls = true\ntls_ca = \"{cert}\"\n\
             [[routes]]\nupstream = \"b\"\n"
        ),
    );
    let url = format!("https://127.0.0.1:{port}/x");
    let (status, version, body) = curl(&url, &cert, false);
    assert_eq!((status, version.as_str()), (200, "1.1"), "{body}");
    // The echo upstream shows the head it got: from the backend, which got it from the front.
    let head = body.to_ascii_lowercase();
    assert!(head.contains("x-forwarded-proto: https"), "{body}");
    assert!(head.contains("x-forwarded-for: 127.0.0.1, 127.0.0.1"), "{body}");
    let (status, version, _) = curl(&url, &cert, true);
    assert_eq!((status, version.as_str()), (200, "2"), "h2 by ALPN");
    // Plain HTTP still on the plain listener, h2c included.
    assert_eq!(front.get("/x").status, 200);
    assert_eq!(front.metric("reference_gateway_tls_handshake_failures_total"), 0.0);
}

#[test]
fn an_untrusted_upstream_certificate_is_a_502() {
    let (_dir, cert, key) = certified_dir("gw-tls-untrusted");
    let up = Upstream::start("echo", Behavior::Echo);
    let (_backend, backend_port) = tls_gateway(&cert, &key, &routes_to(&up));
    // No tls_ca: the self-signed certificate is not among the system's CAs.
    let front = Gateway::start(&format!(
        "[upstreams.b]\nservers = [\"127.0.0.1:{backend_port}\"]\ntls = true\n[[routes]]\nupstream = \"b\"\n"
    ));
    let r = front.get("/x");
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body.contains("TLS handshake"), "{}", r.body);
    assert!(front.metric("reference_gateway_upstream_errors_total{kind=\"tls_handshake\"}") >= 1.0);
    assert!(front.stderr().contains("certificate verify failed"), "{}", front.stderr());
    assert_eq!(up.requests.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn a_key_that_does_not_load_stops_the_start() {
    let (dir, cert, _key) = certified_dir("gw-tls-nokey");
    let missing = dir.join("missing-key.pem");
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = []\ntls_listen = [\"127.0.0.1:{}\"]\ntls_certificate = \"{cert}\"\ntls_key = \"{}\"\n\
             [admin]\nlisten = \"127.0.0.1:{}\"\n",
            free_port(),
            missing.display(),
            free_port()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reference-gateway")).arg("--config").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("server.tls_key") && stderr.contains("missing-key.pem"), "{stderr}");
}
