//! The demo's broken network path (incident 3): a network namespace joined to the host by a veth
//! pair, holding an upstream, and an nftables rule inside it that drops the upstream's replies
//! after the handshake. Removed on drop.

use std::process::Command;

use anyhow::{Context as _, Result, bail};

pub(super) struct BrokenPath {
    name: String,
    host_link: String,
    pub upstream_ip: &'static str,
}

const HOST_IP: &str = "10.214.0.1/24";
const UPSTREAM_IP: &str = "10.214.0.2";
const TABLE: &str = "gwdemo";

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("failed to run ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl BrokenPath {
    pub fn create() -> Result<Self> {
        let tag = std::process::id() % 100_000;
        let name = format!("gw-demo-{tag}");
        let (host_link, ns_link) = (format!("gwd{tag}h"), format!("gwd{tag}n"));
        let path = BrokenPath { name: name.clone(), host_link: host_link.clone(), upstream_ip: UPSTREAM_IP };
        ip(&["netns", "add", &name])?;
        ip(&["link", "add", &host_link, "type", "veth", "peer", "name", &ns_link])?;
        ip(&["link", "set", &ns_link, "netns", &name])?;
        ip(&["addr", "add", HOST_IP, "dev", &host_link])?;
        ip(&["link", "set", &host_link, "up"])?;
        ip(&["netns", "exec", &name, "ip", "addr", "add", &format!("{UPSTREAM_IP}/24"), "dev", &ns_link])?;
        ip(&["netns", "exec", &name, "ip", "link", "set", &ns_link, "up"])?;
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"])?;
        Ok(path)
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    fn nft(&self, rule: &str) -> Result<()> {
        ip(&["netns", "exec", &self.name, "nft", rule])
    }

    /// The upstream's packets from `port` stop leaving, SYN-ACKs excepted.
    pub fn break_replies(&self, port: u16) -> Result<()> {
        self.nft(&format!("add table inet {TABLE}"))?;
        self.nft(&format!("add chain inet {TABLE} out {{ type filter hook output priority 0 ; }}"))?;
        self.nft(&format!("add rule inet {TABLE} out tcp sport {port} tcp flags & (syn | ack) != (syn | ack) drop"))
    }

    pub fn repair(&self) -> Result<()> {
        self.nft(&format!("delete table inet {TABLE}"))
    }
}

impl Drop for BrokenPath {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Command::new("ip").args(["link", "del", &self.host_link]).output();
    }
}
