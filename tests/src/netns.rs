//! A network namespace the test creates and removes, joined to the host by a veth pair with
//! addresses of its own, and an nftables rule inside it that drops the namespace's outgoing TCP
//! packets from a port after the handshake (SYN-ACKs still leave): requests go in and nothing
//! comes back, as with incident 3's broken return path.

use std::process::Command;

pub struct NetNs {
    pub name: String,
    host_link: String,
    /// The host side's address and the namespace's.
    pub host_ip: String,
    pub ns_ip: String,
}

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

impl NetNs {
    /// `index` keeps concurrent namespaces apart (names and the 10.213.index.0/24 subnet).
    pub fn create(index: u8) -> NetNs {
        let tag = format!("{}{}", std::process::id() % 100_000, index);
        let name = format!("go-ns-{tag}");
        let host_link = format!("goh{tag}");
        let ns_link = format!("gon{tag}");
        let subnet = format!("10.213.{index}");
        let ns = NetNs {
            name: name.clone(),
            host_link: host_link.clone(),
            host_ip: format!("{subnet}.1"),
            ns_ip: format!("{subnet}.2"),
        };
        let _ = Command::new("ip").args(["netns", "del", &name]).output(); // left over from a killed run
        run(&["ip", "netns", "add", &name]);
        run(&["ip", "link", "add", &host_link, "type", "veth", "peer", "name", &ns_link]);
        run(&["ip", "link", "set", &ns_link, "netns", &name]);
        run(&["ip", "addr", "add", &format!("{}/24", ns.host_ip), "dev", &host_link]);
        run(&["ip", "link", "set", &host_link, "up"]);
        run(&["ip", "netns", "exec", &name, "ip", "addr", "add", &format!("{}/24", ns.ns_ip), "dev", &ns_link]);
        run(&["ip", "netns", "exec", &name, "ip", "link", "set", &ns_link, "up"]);
        run(&["ip", "netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        ns
    }

    /// The prefix that runs a command inside the namespace.
    pub fn exec_prefix(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// Drops every TCP packet the namespace sends from `port` except SYN-ACKs.
    pub fn drop_replies_from(&self, port: u16) {
        let rule = format!("add rule inet gostall out tcp sport {port} tcp flags & (syn | ack) != (syn | ack) drop");
        run(&["ip", "netns", "exec", &self.name, "nft", "add table inet gostall"]);
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name,
            "nft",
            "add chain inet gostall out { type filter hook output priority 0 ; }",
        ]);
        run(&["ip", "netns", "exec", &self.name, "nft", &rule]);
    }

    pub fn restore_replies(&self) {
        run(&["ip", "netns", "exec", &self.name, "nft", "delete table inet gostall"]);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Command::new("ip").args(["link", "del", &self.host_link]).output();
    }
}
