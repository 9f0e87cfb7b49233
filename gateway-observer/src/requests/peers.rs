//! Upstream peers as metric labels: the first `MAX_PEER_LABELS` peers of a process keep their
//! `ip:port`, later ones share `other`, so a gateway talking to thousands of hosts cannot blow up
//! the label set.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

pub const MAX_PEER_LABELS: usize = 32;
pub const OTHER_PEER: &str = "other";

#[derive(Debug, Default)]
pub struct PeerLabels {
    named: HashMap<u32, HashSet<SocketAddr>>,
}

impl PeerLabels {
    /// The label of `peer` for process `tgid`.
    pub fn label(&mut self, tgid: u32, peer: SocketAddr) -> String {
        let named = self.named.entry(tgid).or_default();
        if named.contains(&peer) || named.len() < MAX_PEER_LABELS {
            named.insert(peer);
            peer.to_string()
        } else {
            OTHER_PEER.to_owned()
        }
    }

    /// Forget processes that are gone.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.named.retain(|tgid, _| live(*tgid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_past_the_cap_share_one_label() {
        let mut labels = PeerLabels::default();
        for port in 0..MAX_PEER_LABELS as u16 {
            assert_eq!(
                labels.label(1, SocketAddr::from(([10, 0, 0, 1], 1000 + port))),
                format!("10.0.0.1:{}", 1000 + port)
            );
        }
        assert_eq!(labels.label(1, SocketAddr::from(([10, 0, 0, 2], 80))), OTHER_PEER);
        assert_eq!(
            labels.label(1, SocketAddr::from(([10, 0, 0, 1], 1000))),
            "10.0.0.1:1000",
            "known peers keep theirs"
        );
        assert_eq!(labels.label(2, SocketAddr::from(([10, 0, 0, 2], 80))), "10.0.0.2:80", "caps are per process");
    }
}
