//! Upstream peers as metric labels: the first `MAX_PEER_LABELS` peers of a process keep their
//! `ip:port`, later ones share `other`, so a gateway talking to thousands of hosts cannot blow up
//! the label set.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use super::FastHash;

pub const MAX_PEER_LABELS: usize = 32;
pub const OTHER_PEER: &str = "other";

#[derive(Debug, Default)]
pub struct PeerLabels {
    /// Labels are shared (`Arc`): every record of an outbound connection carries one, and a
    /// finished call keeps it, so handing one out allocates nothing.
    named: HashMap<u32, HashMap<SocketAddr, Arc<str>, FastHash>, FastHash>,
    other: Option<Arc<str>>,
}

impl PeerLabels {
    /// The label of `peer` for process `tgid`.
    pub fn label(&mut self, tgid: u32, peer: SocketAddr) -> Arc<str> {
        let named = self.named.entry(tgid).or_default();
        if let Some(label) = named.get(&peer) {
            return label.clone();
        }
        if named.len() < MAX_PEER_LABELS {
            return named.entry(peer).or_insert_with(|| Arc::from(peer.to_string())).clone();
        }
        self.other.get_or_insert_with(|| Arc::from(OTHER_PEER)).clone()
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
                &*labels.label(1, SocketAddr::from(([10, 0, 0, 1], 1000 + port))),
                format!("10.0.0.1:{}", 1000 + port)
            );
        }
        assert_eq!(&*labels.label(1, SocketAddr::from(([10, 0, 0, 2], 80))), OTHER_PEER);
        assert_eq!(
            &*labels.label(1, SocketAddr::from(([10, 0, 0, 1], 1000))),
            "10.0.0.1:1000",
            "known peers keep theirs"
        );
        assert_eq!(&*labels.label(2, SocketAddr::from(([10, 0, 0, 2], 80))), "10.0.0.2:80", "caps are per process");
    }
}
