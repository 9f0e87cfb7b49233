//! TCP-level state of each followed connection — data each way, retransmits, resets — and the
//! per-peer facts the upstream detectors judge: requests left unanswered, flows whose return
//! path is silent.

use serde::Serialize;

use crate::events::socket::FlowRecord;

/// One connection's traffic and retransmit history.
#[derive(Debug, Default, Clone)]
pub struct FlowState {
    pub retransmits: u32,
    /// First retransmit since data last came back: the flow may be one-way since then.
    pub stall_since_ns: Option<u64>,
    pub stall_retransmits: u32,
    pub last_retransmit_ns: u64,
    /// Gap between the last two retransmits of the stall (the kernel doubles it each time).
    pub backoff_ns: u64,
    pub unacked_bytes: u32,
    pub rx_last_ns: Option<u64>,
    pub tx_last_ns: Option<u64>,
    /// Bytes each way since the last complete response on the connection.
    pub tx_since_response: u64,
    pub rx_since_response: u64,
    pub resets_by_peer: u32,
    pub resets_sent: u32,
}

impl FlowState {
    pub fn on_read(&mut self, ts_ns: u64, len: u64) {
        self.rx_last_ns = Some(ts_ns);
        self.rx_since_response = self.rx_since_response.saturating_add(len);
        self.stall_since_ns = None;
        self.stall_retransmits = 0;
    }

    pub fn on_write(&mut self, ts_ns: u64, len: u64) {
        self.tx_last_ns = Some(ts_ns);
        self.tx_since_response = self.tx_since_response.saturating_add(len);
    }

    pub fn on_response(&mut self) {
        self.tx_since_response = 0;
        self.rx_since_response = 0;
    }

    pub fn on_retransmit(&mut self, flow: &FlowRecord) {
        self.retransmits = self.retransmits.saturating_add(1);
        self.unacked_bytes = flow.unacked_bytes;
        // Data that arrived since the stall began (seen by the kernel before any read) ends it.
        if let (Some(since), Some(rx)) = (self.stall_since_ns, flow.rx_last_ns)
            && rx > since
        {
            self.stall_since_ns = None;
            self.stall_retransmits = 0;
        }
        if self.stall_since_ns.is_none() {
            self.stall_since_ns = Some(flow.timestamp_ns);
            self.backoff_ns = 0;
        } else {
            self.backoff_ns = flow.timestamp_ns.saturating_sub(self.last_retransmit_ns);
        }
        self.stall_retransmits = self.stall_retransmits.saturating_add(1);
        self.last_retransmit_ns = flow.timestamp_ns;
    }

    pub fn on_reset(&mut self, flow: &FlowRecord) {
        if flow.by_peer {
            self.resets_by_peer = self.resets_by_peer.saturating_add(1);
        } else {
            self.resets_sent = self.resets_sent.saturating_add(1);
        }
    }

    /// How long the flow has sent without hearing back, if it is retransmitting into silence. The
    /// kernel doubles the gap between retransmits of a dead path; once the next one is well
    /// overdue, acknowledgements (which no record reports) came back and the stall is over.
    pub fn one_way_for(&self, now_ns: u64) -> Option<u64> {
        const SLACK_NS: u64 = 1_000_000_000;
        let since = self.stall_since_ns?;
        let overdue =
            now_ns.saturating_sub(self.last_retransmit_ns) > self.backoff_ns.saturating_mul(3).saturating_add(SLACK_NS);
        (self.stall_retransmits >= 2 && !overdue).then(|| now_ns.saturating_sub(since))
    }
}

/// An upstream peer of one process, as the detectors see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeerFacts {
    pub pid: u32,
    pub comm: String,
    pub peer: String,
    pub connections: usize,
    /// Requests written and not answered in full.
    pub outstanding: usize,
    pub oldest_age_ns: Option<u64>,
    /// The peer's recent p99 response time, if it answered recently.
    pub recent_p99_ns: Option<u64>,
    /// Responses completed by the peer in the recent window.
    pub answered_recently: usize,
    /// Since the peer last completed a response, if it did in the last 10 minutes.
    pub last_answer_age_ns: Option<u64>,
    /// Requests written to the peer after its last answer and not answered, and the oldest one's
    /// age: what a peer that went silent leaves (requests in flight when it last answered may
    /// be older, and are not counted here).
    pub written_since_answer: usize,
    pub oldest_since_answer_ns: Option<u64>,
    /// Bytes written to / read from the peer since the last complete response, over connections
    /// with outstanding requests.
    pub bytes_sent_since: u64,
    pub bytes_received_since: u64,
    pub retransmits: u32,
    /// Connections with outstanding requests, and the threads that wrote those requests.
    pub connections_waiting: usize,
    pub threads_waiting: Vec<u32>,
    /// Connections in a one-way stall now, the longest stall, and its details.
    pub one_way_flows: usize,
    pub longest_one_way_ns: u64,
    pub stall_retransmits: u32,
    pub backoff_ns: u64,
    pub unacked_bytes: u32,
    pub last_rx_age_ns: Option<u64>,
    pub last_tx_age_ns: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retransmit(ts: u64, rx_last: Option<u64>) -> FlowRecord {
        FlowRecord { sk: 1, timestamp_ns: ts, rx_last_ns: rx_last, unacked_bytes: 120, retransmits: 0, by_peer: false }
    }

    #[test]
    fn a_flow_retransmitting_into_silence_is_one_way_until_data_returns() {
        let mut flow = FlowState::default();
        flow.on_write(100, 120);
        flow.on_retransmit(&retransmit(300, Some(50)));
        assert_eq!(flow.one_way_for(1_000), None, "one retransmit is not a stall yet");
        flow.on_retransmit(&retransmit(700, Some(50)));
        flow.on_retransmit(&retransmit(1_500, Some(50)));
        assert_eq!(flow.one_way_for(3_300), Some(3_000));
        // No retransmit for far longer than the backoff (800 ns here) allows: ACKs came back.
        assert_eq!(flow.one_way_for(1_500 + 3 * 800 + 1_000_000_001), None);
        assert_eq!((flow.stall_retransmits, flow.backoff_ns, flow.unacked_bytes), (3, 800, 120));
        // Data came back (the kernel saw it before the next retransmit): a new stall starts.
        flow.on_retransmit(&retransmit(4_000, Some(3_500)));
        assert_eq!(flow.one_way_for(4_100), None);
        flow.on_read(4_200, 10);
        assert_eq!(flow.stall_since_ns, None);
        assert_eq!(flow.retransmits, 4);
    }

    #[test]
    fn retransmits_a_clock_apart_are_no_panic() {
        // Found by fuzzing (socket_records): a backoff near u64::MAX (retransmit timestamps far
        // apart) overflowed the overdue bound, a panic in debug builds.
        let mut flow = FlowState::default();
        flow.on_retransmit(&retransmit(0, None));
        flow.on_retransmit(&retransmit(u64::MAX - 1, None));
        assert_eq!(flow.backoff_ns, u64::MAX - 1);
        assert_eq!(flow.one_way_for(u64::MAX), Some(u64::MAX), "never overdue: still one-way");
    }

    #[test]
    fn bytes_since_the_last_response() {
        let mut flow = FlowState::default();
        flow.on_write(1, 100);
        flow.on_read(2, 50);
        flow.on_response();
        flow.on_write(3, 70);
        assert_eq!((flow.tx_since_response, flow.rx_since_response), (70, 0));
        flow.on_reset(&FlowRecord { by_peer: true, ..retransmit(4, None) });
        assert_eq!((flow.resets_by_peer, flow.resets_sent), (1, 0));
    }
}
