//! TLS the observer cannot decrypt is counted as TLS, not as garbage: the JDK's own TLS (JSSE,
//! Java code, no native library to hook) behind `com.sun.net.httpserver.HttpsServer`, with
//! `--tls-plaintext` on. Each connection opens with a TLS handshake record, so its ciphertext is
//! never parsed: every one of the client's connections is counted in
//! `gateway_observer_tls_connections_unparsed_total` once it closes, no byte in
//! `http_non_http_bytes_total`, no request, and none of the JVM's libraries is taken for a TLS
//! library (nothing hooked, no failure).

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use tests::{
    free_port,
    observer::Observer,
    privileged, temp_dir,
    tls::{Killed, wait_listening},
    wait_until,
    wrk::metric_sum,
};

/// Connections made, one request each: bounded, and few enough to count exactly.
const CONNECTIONS: usize = 20;

/// An HTTPS server on the JDK's own TLS, its key from a PKCS#12 keystore (`keytool`).
const JDK_TLS_SERVER: &str = r#"
import com.sun.net.httpserver.*;
import java.io.*;
import java.net.InetSocketAddress;
import java.security.KeyStore;
import javax.net.ssl.*;

public class Server {
    public static void main(String[] args) throws Exception {
        char[] password = args[2].toCharArray();
        KeyStore keys = KeyStore.getInstance("PKCS12");
        try (FileInputStream in = new FileInputStream(args[1])) { keys.load(in, password); }
        KeyManagerFactory managers = KeyManagerFactory.getInstance("SunX509");
        managers.init(keys, password);
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(managers.getKeyManagers(), null, null);
        HttpsServer server = HttpsServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(args[0])), 64);
        server.setHttpsConfigurator(new HttpsConfigurator(context));
        server.createContext("/", exchange -> {
            byte[] body = "ok\n".getBytes();
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) { out.write(body); }
        });
        server.start();
    }
}
"#;

#[test]
fn jdk_tls_is_counted_as_tls_connections_not_as_garbage() {
    if !privileged(module_path!()) {
        return;
    }
    let dir = temp_dir("jdk-tls");
    let keystore = dir.join("keys.p12");
    let out = Command::new("keytool")
        .args(["-genkeypair", "-alias", "server", "-keyalg", "RSA", "-keysize", "2048", "-validity", "1"])
        .args(["-dname", "CN=127.0.0.1", "-storetype", "PKCS12", "-storepass", "changeit", "-keypass", "changeit"])
        .arg("-keystore")
        .arg(&keystore)
        .output()
        .expect("run keytool (the JDK's)");
    assert!(out.status.success(), "keytool: {}", String::from_utf8_lossy(&out.stderr));
    let source = dir.join("Server.java");
    std::fs::write(&source, JDK_TLS_SERVER).expect("write Server.java");
    let port = free_port();
    // A single source file runs without javac (JDK 11+).
    let server = Killed(
        Command::new("java")
            .arg(&source)
            .arg(port.to_string())
            .arg(&keystore)
            .arg("changeit")
            .stdout(Stdio::null())
            .spawn()
            .expect("start java (the JDK)"),
    );
    wait_listening("the JDK's HttpsServer", port);
    let observer = Observer::start_with(&[&format!("pid={}", server.0.id())], &["--tls-plaintext"]);
    let url = format!("https://127.0.0.1:{port}/items");
    for _ in 0..CONNECTIONS {
        let out = Command::new("curl")
            .args(["-sk", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", &url])
            .output()
            .expect("run curl");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "curl over the JDK's TLS");
    }
    let unparsed =
        |metrics: &str| metric_sum(metrics, "gateway_observer_tls_connections_unparsed_total", &[("process", "java")]);
    wait_until("every connection counted as TLS", Duration::from_secs(10), || {
        unparsed(&observer.metrics()) >= CONNECTIONS as f64
    });
    // Counted once each, at its close: nothing more comes.
    std::thread::sleep(Duration::from_millis(1500));
    let metrics = observer.metrics();
    assert_eq!(unparsed(&metrics), CONNECTIONS as f64, "TLS connections counted");
    let garbage = metric_sum(&metrics, "gateway_observer_http_non_http_bytes_total", &[("process", "java")]);
    assert_eq!(garbage, 0.0, "ciphertext counted as non-HTTP bytes");
    let requests = metric_sum(&metrics, "gateway_observer_http_requests_total", &[("process", "java")]);
    assert_eq!(requests, 0.0, "requests read from ciphertext");
    assert_eq!(metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[]), 0.0, "a JVM library hooked");
    assert_eq!(metric_sum(&metrics, "gateway_observer_tls_hook_failures_total", &[]), 0.0, "hook failures");
}
