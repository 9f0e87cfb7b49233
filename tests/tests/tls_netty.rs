//! HTTPS requests to real Netty 4.1 with netty-tcnative's OpenSSL engine (Debian's
//! libnetty-tcnative-jni, which links the system's `libssl.so.3`), loaded as upstream Netty loads
//! it: found on the class path, extracted to a temp dir, loaded, deleted. Netty feeds OpenSSL
//! through memory BIOs and moves the ciphertext itself, so the plaintext comes keyed by its
//! session, as Node's does. A server whose handler answers after 2 ms, under wrk over https: the
//! observer's inbound count matches wrk's within 0.1 % and its p50 is within 10 % of wrk's. Two
//! cases, one JVM each: `libssl.so.3` from the system (hooked by its path), and copies of
//! `libssl.so.3` and `libcrypto.so.3` loaded through `LD_LIBRARY_PATH` and deleted once the JVM
//! mapped them (reached only through `/proc/PID/map_files`).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use tests::{
    free_port, jvm, privileged,
    tls::{HTTPS_HANDLER_DELAY, Killed, assert_https_matches_wrk, certified_dir, hooked_observer, https_server},
    wait_until,
    wrk::metric_sum,
};

/// Debian's netty-tcnative: its classes and its JNI library.
const TCNATIVE_JAR: &str = "/usr/share/java/netty-tcnative.jar";
const TCNATIVE_JNI: &str = "/usr/lib/x86_64-linux-gnu/jni/libnetty-tcnative.so";
/// The system's OpenSSL, which the JNI library links.
const SYSTEM_LIBS: &str = "/usr/lib/x86_64-linux-gnu";
/// The name Netty looks for on its class path (`META-INF/native/`) before `java.library.path`.
const TCNATIVE_RESOURCE: &str = "libnetty_tcnative_linux_x86_64.so";

/// Whether the JDK, Netty and netty-tcnative are here, and the test may load probes.
fn runnable(test: &str) -> bool {
    privileged(test)
        && jvm::available_with(test, &[TCNATIVE_JAR, TCNATIVE_JNI], "libnetty-tcnative-java libnetty-tcnative-jni")
}

/// `java NettyTlsGateway` on `port` with the JNI library as upstream Netty ships it (a class-path
/// resource, extracted to `dir/extracted` and deleted after loading), and `libs` first on the
/// dynamic linker's path when given.
fn netty_tls(dir: &Path, cert: &str, key: &str, port: u16, libs: Option<&Path>) -> Command {
    let resources = dir.join("resources");
    let native = resources.join("META-INF/native");
    std::fs::create_dir_all(&native).expect("mkdir META-INF/native");
    std::fs::copy(TCNATIVE_JNI, native.join(TCNATIVE_RESOURCE)).expect("copy the JNI library");
    let extracted = dir.join("extracted");
    std::fs::create_dir_all(&extracted).expect("mkdir extracted");
    let classpath = std::iter::once(jvm::classes_dir().to_string_lossy().into_owned())
        .chain(jvm::JARS.iter().map(|j| (*j).to_owned()))
        .chain([TCNATIVE_JAR.to_owned(), resources.display().to_string()])
        .collect::<Vec<_>>()
        .join(":");
    let mut command = Command::new("java");
    command
        .arg(format!("-Dio.netty.native.workdir={}", extracted.display()))
        .args(["-cp", &classpath, "NettyTlsGateway", &port.to_string(), cert, key])
        .arg(HTTPS_HANDLER_DELAY.as_millis().to_string());
    if let Some(libs) = libs {
        command.env("LD_LIBRARY_PATH", libs);
    }
    command
}

/// The executable mappings of `pid` whose path contains `part`, as maps prints them.
fn mapped(pid: u32, part: &str) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter(|l| l.contains(part) && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .map(str::to_owned)
        .collect()
}

/// wrk against the hooked server; the plaintext must come tied to its connections.
fn assert_matches_wrk(server: &Killed, port: u16) {
    let observer = hooked_observer(server);
    let metrics = observer.metrics();
    let hooked = metric_sum(&metrics, "gateway_observer_tls_hooked_processes", &[("library", "libssl.so.3")]);
    assert_eq!(hooked, 1.0, "the JVM's libssl.so.3 hooked");
    let (requests, unattributed) = assert_https_matches_wrk(&observer, port, "java");
    assert!(unattributed <= requests * 0.001, "{unattributed} plaintext records tied to no connection");
}

/// Netty over netty-tcnative, listening on the port returned, and its temp dir's `libs`: the
/// system's OpenSSL copied there and first on the linker's path when `copied_libssl`. None when
/// `test` cannot run here.
fn netty(test: &str, tag: &str, copied_libssl: bool) -> Option<(Killed, u16, PathBuf)> {
    if !runnable(test) {
        return None;
    }
    let (dir, cert, key) = certified_dir(tag);
    let libs = dir.join("libs");
    std::fs::create_dir_all(&libs).expect("mkdir libs");
    for name in ["libssl.so.3", "libcrypto.so.3"].into_iter().filter(|_| copied_libssl) {
        std::fs::copy(Path::new(SYSTEM_LIBS).join(name), libs.join(name)).expect("copy the system OpenSSL");
    }
    let port = free_port();
    let command = netty_tls(&dir, &cert, &key, port, copied_libssl.then_some(libs.as_path()));
    Some((https_server(command, "Netty over netty-tcnative", port), port, libs))
}

#[test]
fn netty_tcnative_https_requests_match_wrk() {
    let _serial = tests::serial();
    let Some((server, port, _)) = netty(module_path!(), "netty-tls", false) else { return };
    let pid = server.0.id();
    // Upstream's way: the extracted library is gone from its path once loaded.
    let jni = mapped(pid, TCNATIVE_RESOURCE.trim_end_matches(".so"));
    assert!(!jni.is_empty() && jni.iter().all(|l| l.ends_with(" (deleted)")), "netty-tcnative's library: {jni:?}");
    assert_matches_wrk(&server, port);
}

#[test]
fn netty_tcnative_on_a_deleted_libssl_matches_wrk() {
    let _serial = tests::serial();
    let Some((server, port, libs)) = netty(module_path!(), "netty-tls-deleted", true) else { return };
    let pid = server.0.id();
    let copied = libs.join("libssl.so.3").display().to_string();
    wait_until("the JVM to map the copied libssl", Duration::from_secs(10), || !mapped(pid, &copied).is_empty());
    for name in ["libssl.so.3", "libcrypto.so.3"] {
        std::fs::remove_file(libs.join(name)).expect("delete the copy");
    }
    let libssl = mapped(pid, "libssl.so.3");
    assert!(
        !libssl.is_empty() && libssl.iter().all(|l| l.ends_with(&format!("{copied} (deleted)"))),
        "only the deleted copy of libssl is mapped: {libssl:?}"
    );
    assert_matches_wrk(&server, port);
}
