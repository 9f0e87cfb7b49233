//! On a node with many network namespaces (pods), the same port is listened on in several of
//! them. Only the target's own listener counts: connections accepted on that port in another
//! namespace are not followed, and requests left unread there are not the target's queue.

use std::io::Write as _;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};
use tests::{
    alerts::{alerts_of, wait_firing},
    load::{stop, stop_flag},
    netns::NetNs,
    observer::Observer,
    privileged,
    python::{PythonServer, load_at},
};

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
    processes
        .iter()
        .flat_map(|p| p["listeners"].as_array().cloned().unwrap_or_default())
        .filter_map(|l| l["waiting"].as_u64())
        .sum()
}

#[test]
fn the_same_port_in_another_namespace_is_not_the_targets() {
    if !privileged(module_path!()) {
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

/// Two pods of one gateway listen on the same port, each in its namespace; one stops reading.
/// The alert names that one, and the other stays quiet.
#[test]
fn two_pods_on_one_port_are_told_apart() {
    if !privileged(module_path!()) {
        return;
    }
    let ns = NetNs::create(10);
    let healthy = PythonServer::start();
    let stalled = PythonServer::start_at(&ns.exec_prefix(), &ns.ns_ip, healthy.port);
    let (healthy_pid, stalled_pid) = (healthy.child.id(), stalled.child.id());
    let observer = Observer::start_with_targets(&[&format!("pid={healthy_pid}"), &format!("pid={stalled_pid}")]);

    let done = stop_flag();
    let mut clients = load_at("127.0.0.1", healthy.port, "/", 2, &done);
    clients.extend(load_at(&ns.ns_ip, stalled.port, "/slow", 1, &done));
    clients.extend(load_at(&ns.ns_ip, stalled.port, "/", 2, &done));
    let (alert, after) = wait_firing(&observer, "RequestQueueing", Duration::from_secs(8));
    eprintln!(
        "RequestQueueing on pid {} {:.1}s in: {}",
        alert["process"]["pid"],
        after.as_secs_f64(),
        alert["summary"]
    );
    assert_eq!(
        alert["process"]["pid"], stalled_pid,
        "the stalled pod, not the healthy one on the same port: {alert:#}"
    );
    let quiet_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet_until {
        let alerts = observer.alerts();
        let wrong: Vec<_> = alerts_of(&alerts, "RequestQueueing", "firing")
            .into_iter()
            .chain(alerts_of(&alerts, "RequestQueueing", "pending"))
            .filter(|a| a["process"]["pid"] == healthy_pid)
            .collect();
        assert!(wrong.is_empty(), "the healthy pod named: {wrong:#?}");
        thread::sleep(Duration::from_millis(250));
    }
    stop(&done);
    clients.into_iter().for_each(|c| drop(c.join()));
}
