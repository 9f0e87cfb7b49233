//! On a node with many network namespaces (pods), the same port is listened on in several of
//! them. Only the target's own listener counts: connections accepted on that port in another
//! namespace are not followed, and requests left unread there are not the target's queue.

mod netns_support;
mod observer_support;
mod python_support;
mod reference_gateway_support;

use std::io::Write as _;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use netns_support::NetNs;
use observer_support::{Observer, privileged};
use python_support::PythonServer;

/// A process in `ns` listening on `port` that never accepts: requests sent to it stay unread.
struct DeafListener(Child);

impl DeafListener {
    fn start(ns: &NetNs, port: u16) -> DeafListener {
        let script = "import socket, sys, time\ns = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(128)\ntime.sleep(60)\n";
        let child = Command::new(ns.exec_prefix()[0])
            .args(&ns.exec_prefix()[1..])
            .args(["python3", "-c", script, &port.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 in the namespace");
        DeafListener(child)
    }
}

impl Drop for DeafListener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `waiting` of every listener in the snapshot's processes.
fn waiting_in_snapshot(observer: &Observer) -> u64 {
    let (_, body) = observer.get("/api/v1/snapshot").expect("snapshot");
    let snapshot: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let processes = snapshot["processes"].as_array().cloned().unwrap_or_default();
    processes.iter().flat_map(|p| p["listeners"].as_array().cloned().unwrap_or_default()).filter_map(|l| l["waiting"].as_u64()).sum()
}

#[test]
fn the_same_port_in_another_namespace_is_not_the_targets() {
    if !privileged() {
        return;
    }
    let ns = NetNs::create(9);
    let target = PythonServer::start();
    let _deaf = DeafListener::start(&ns, target.port);
    let observer = Observer::start(target.child.id());

    // Requests to the namespace's listener on the target's port, left unread for 6 s.
    let end = Instant::now() + Duration::from_secs(10);
    let mut clients = Vec::new();
    while clients.len() < 5 {
        assert!(Instant::now() < end, "the namespace's listener does not accept connections");
        match TcpStream::connect((ns.ns_ip.as_str(), target.port)) {
            Ok(mut client) => {
                client.write_all(b"GET / HTTP/1.1\r\nHost: pod\r\n\r\n").expect("send");
                clients.push(client);
            }
            Err(_) => thread::sleep(Duration::from_millis(100)),
        }
    }
    let quiet_until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < quiet_until {
        let raised = observer.alerts();
        assert!(raised.is_empty(), "another namespace's unread requests raised {raised:#?}");
        assert_eq!(waiting_in_snapshot(&observer), 0, "another namespace's connections counted as waiting");
        thread::sleep(Duration::from_millis(500));
    }
    drop(clients);
}
