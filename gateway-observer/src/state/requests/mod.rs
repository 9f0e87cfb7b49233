//! Requests seen from the outside: socket records from the kernel become per-connection HTTP/1.x
//! exchanges (`gateway_observer_http`), which are folded into counters, latency histograms, the slowest
//! recent requests and the requests still waiting, in flight or upstream.
//!
//! A connection is inbound (the gateway accepted it, so it reads requests) or outbound (the
//! gateway opened it to an upstream). The kernel says which when it saw the handshake; for
//! connections older than the daemon, a local port the process listens on means inbound.

pub mod flows;
pub mod h2_totals;
mod kernel_tls;
mod loss;
pub mod peers;
pub mod queueing;
pub mod slowest;
pub mod stalled;
pub mod stats;
mod tls_sessions;
mod totals;
mod views;

pub use views::{InFlightRequest, ProcessRequests, UpstreamPeer};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::events::socket::{ConnInfo, DataRecord, FlowRecord, Opened, SocketRecord};
use flows::FlowState;
use gateway_observer_http::{Connection, Direction, Exchange, Role, Segment};
use h2_totals::H2Totals;
use kernel_tls::{KernelTls, Step};
use loss::parse_afresh;
use peers::PeerLabels;
use slowest::{Finished, Slowest, UpstreamCall};
use stats::{RequestStats, Side};

pub(crate) type FastHash = foldhash::fast::RandomState;

/// Connections followed at once (the kernel's SOCKS map holds as many); past it the least
/// recently active is forgotten (counted).
const MAX_CONNECTIONS: usize = gateway_observer_common::MAX_SOCKETS as usize;
/// In-flight requests listed per process in the snapshot.
const IN_FLIGHT_LISTED: usize = 20;
/// /proc lookups of connections whose handshake was lost, per tick.
const PROC_LOOKUPS_PER_TICK: u32 = 32;

struct Tracked {
    tgid: Option<u32>,
    side: Option<Side>,
    remote: Option<SocketAddr>,
    /// The local port: for inbound connections, the listener they came through.
    local_port: Option<u16>,
    /// Its network namespace, when known: the listener is (namespace, port).
    netns: Option<u32>,
    /// Outbound: the peer's metric label (`ip:port`, or `other` past the cap), once the owner is known.
    peer: Option<Arc<str>>,
    /// The owner's name, kept with the connection: its last records may come after the process
    /// is gone (and its pid must never become a label).
    process: Option<Arc<str>>,
    http: Option<Connection>,
    flow: FlowState,
    last_active_ns: u64,
    /// The last read (or the handshake): bytes still unread cannot have arrived before it.
    last_read_ns: u64,
    /// The kernel's count of this socket's lost data records, as last seen (low 16 bits).
    lost_seen: u16,
    /// Its bytes began with a TLS record: ciphertext, never parsed. A TLS library we do not hook
    /// (or hooked too late for this connection) encrypted them, unless its plaintext comes
    /// keyed by its session (`tls_sessions`).
    tls: bool,
    /// Plaintext tied to it through its TLS session arrived: it is parsed, its ciphertext not.
    plaintext: bool,
    /// Whether its socket went on in plaintext after the handshake (kernel TLS).
    kernel_tls: KernelTls,
    /// Bytes were seen on it: only its first ones can open a TLS record.
    started: bool,
    /// What the HTTP/2 totals hold of its session's signals (`h2_totals`).
    h2_added: Option<Box<gateway_observer_http::h2::Signals>>,
    /// The totals hold all its session shows, until its next record (no stall open): a tick
    /// passes it by without reaching into the session.
    h2_settled: bool,
}

/// What a followed connection is doing, for metrics and snapshot.
#[derive(Debug, Default)]
pub struct TrackerCounts {
    /// Data records for connections whose open was never seen and whose side the bytes did not
    /// tell (kernel events lost): ignored.
    pub unattributed_records: u64,
    /// Connections forgotten because too many were open.
    pub evicted_connections: u64,
    /// Times closed connections' framing was lost and found again heuristically.
    pub closed_resyncs: u64,
    /// In-flight requests forgotten because the kernel lost socket records meanwhile.
    pub abandoned_after_loss: u64,
    /// TLS plaintext keyed by its session that no followed connection could be tied to.
    pub tls_unresolved: u64,
    /// Records of TLS ciphertext received and set aside: with TLS plaintext off, the kernel
    /// reports only each connection's first, unless kernel TLS took its session over.
    pub tls_ciphertext_records: u64,
    /// Closed TLS connections whose socket went on in plaintext (kernel TLS): parsed both ways,
    /// and those that moved plaintext one way only (set aside, unparsed).
    pub kernel_tls_both: u64,
    pub kernel_tls_send_only: u64,
}

#[derive(Default)]
pub struct RequestTracker {
    /// Looked up for every socket record: keyed by kernel pointers, which need no DoS-resistant
    /// hash, so the fast one.
    conns: HashMap<u64, Tracked, FastHash>,
    listen_ports: HashMap<u32, BTreeSet<u16>>,
    /// Each listening target's network namespace.
    netns_of: HashMap<u32, u32>,
    names: HashMap<u32, Arc<str>, FastHash>,
    peers: PeerLabels,
    pub stats: RequestStats,
    pub slowest: Slowest,
    pub counts: TrackerCounts,
    /// Bytes of connections that turned out not to speak HTTP/1.x, by process (closed ones).
    non_http_bytes: BTreeMap<Arc<str>, u64>,
    /// Connections that spoke TLS we could not read (closed ones), by process.
    tls_unparsed: BTreeMap<Arc<str>, u64>,
    /// HTTP/2 signals and flow-control stalls, open connections' as of the last tick.
    h2_totals: H2Totals,
    tls_sessions: tls_sessions::TlsSessions,
    /// Retransmitted segments by (process, peer label; `clients` for inbound connections).
    retransmits: BTreeMap<(Arc<str>, String), u64>,
    scratch: Vec<Exchange>,
    proc_lookups_left: u32,
    /// Where the last scan for unread requests stopped (see `queueing`).
    unread_scan_offset: usize,
    /// Connections told to speak HTTP/2 from their frames (first seen mid-way) since the last
    /// `take_h2_mid_way`: the kernel is to walk them.
    h2_mid_way: Vec<u64>,
}

/// Whether `head` opens with a TLS record header: a handshake (content type 22: the ClientHello
/// that opens every TLS connection) or application data (23: one first seen mid-way), version 3.x.
fn starts_tls_record(head: &[u8]) -> bool {
    matches!(head, [0x16 | 0x17, 0x03, 0x00..=0x04, ..])
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The side of a connection whose handshake was not seen, from its first bytes: a request line
/// read means inbound, a request line written or a status line read means outbound.
fn side_from_bytes(read: bool, head: &[u8]) -> Option<Side> {
    const METHODS: [&[u8]; 9] =
        [b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"PATCH ", b"OPTIONS ", b"CONNECT ", b"TRACE "];
    // HTTP/2's client preface (h2c) opens a connection as a request line does.
    let request = METHODS.iter().any(|m| head.starts_with(m)) || head.starts_with(b"PRI * HTTP/2.0");
    match (read, request, head.starts_with(b"HTTP/1.")) {
        (true, true, _) => Some(Side::Inbound),
        (false, true, _) | (true, false, true) => Some(Side::Outbound),
        _ => None,
    }
}

impl RequestTracker {
    /// The ports each target listens on, for connections whose handshake was not seen.
    pub fn set_listen_ports(&mut self, ports: HashMap<u32, BTreeSet<u16>>, netns_of: HashMap<u32, u32>) {
        self.listen_ports = ports;
        self.netns_of = netns_of;
    }

    /// Forgets names and peers of processes that are gone.
    pub fn retain_processes(&mut self, live: &std::collections::HashSet<u32>) {
        self.names.retain(|tgid, _| live.contains(tgid));
        self.peers.retain(|tgid| live.contains(&tgid));
    }

    /// Whether any retransmit was counted (only then are peers' series worth expiring).
    pub fn has_retransmits(&self) -> bool {
        !self.retransmits.is_empty()
    }

    /// (process, peer label) of every followed connection whose owner is known: the peers
    /// alive now (`clients` for inbound connections, as the retransmit counters name them).
    pub fn peer_labels(&self) -> std::collections::HashSet<(&str, &str)> {
        self.conns
            .values()
            .filter_map(|c| {
                let peer = match c.side {
                    Some(Side::Inbound) => "clients",
                    _ => c.peer.as_deref()?,
                };
                Some((c.process.as_deref()?, peer))
            })
            .collect()
    }

    /// The processes that have request series.
    pub fn series_processes(&self) -> impl Iterator<Item = &str> {
        self.stats.series.keys().map(|process| &**process)
    }

    /// Drops the series of processes `process_live` no longer names, and the retransmit
    /// counters of peers `peer_live` no longer names.
    pub fn retain_series(&mut self, process_live: impl Fn(&str) -> bool, peer_live: impl Fn(&str, &str) -> bool) {
        self.stats.series.retain(|process, _| process_live(process));
        self.non_http_bytes.retain(|process, _| process_live(process));
        self.tls_unparsed.retain(|process, _| process_live(process));
        self.h2_totals.retain_processes(&process_live);
        self.retransmits.retain(|(process, peer), _| peer_live(process, peer));
    }

    pub fn handle(&mut self, record: SocketRecord) {
        match record {
            SocketRecord::Open(info) => self.open(&info),
            SocketRecord::Close(info) => self.close(info.sk, info.timestamp_ns),
            SocketRecord::Data(data) => self.data(&data),
            SocketRecord::Retransmit(flow) => self.retransmit(&flow),
            SocketRecord::Reset(flow) => {
                if let Some(conn) = self.conns.get_mut(&flow.sk) {
                    conn.flow.on_reset(&flow);
                }
            }
            // Merged into its walked record before it comes here (`collector::continued_walks`);
            // one whose walked record is gone has nothing to add to.
            SocketRecord::H2Continued(_) => {}
        }
    }

    fn retransmit(&mut self, flow: &FlowRecord) {
        let Some(conn) = self.conns.get_mut(&flow.sk) else { return };
        conn.flow.on_retransmit(flow);
        let peer = match conn.side {
            Some(Side::Inbound) => "clients".to_owned(),
            _ => conn.peer.as_deref().unwrap_or("unknown").to_owned(),
        };
        let Some(process) = conn.process.clone() else { return };
        *self.retransmits.entry((process, peer)).or_default() += 1;
    }

    fn open(&mut self, info: &ConnInfo) {
        let side = match info.opened {
            Opened::Accepted => Some(Side::Inbound),
            Opened::Connected => Some(Side::Outbound),
            Opened::Unknown => info.tgid.map(|tgid| {
                let listened = self.listen_ports.get(&tgid).is_some_and(|p| p.contains(&info.local.port()));
                if listened { Side::Inbound } else { Side::Outbound }
            }),
        };
        if self.conns.len() >= MAX_CONNECTIONS && !self.conns.contains_key(&info.sk) {
            self.evict_least_active();
        }
        let replaced = self.conns.insert(
            info.sk,
            Tracked {
                tgid: info.tgid,
                side,
                remote: Some(info.remote),
                local_port: Some(info.local.port()),
                netns: (info.netns != 0).then_some(info.netns),
                peer: None,
                process: None,
                http: side.map(|side| {
                    // Opened under our watch: its first bytes each way will be seen.
                    let from_start = matches!(info.opened, Opened::Accepted | Opened::Connected);
                    if from_start { Connection::from_its_start(role_of(side)) } else { new_connection(side) }
                }),
                flow: FlowState::default(),
                last_active_ns: info.timestamp_ns,
                last_read_ns: info.timestamp_ns,
                lost_seen: 0,
                tls: false,
                plaintext: false,
                kernel_tls: KernelTls::Undecided,
                started: false,
                h2_added: None,
                h2_settled: false,
            },
        );
        // A socket reused (its close was lost): what its last session showed stays counted.
        if let Some(mut old) = replaced {
            let end_ns = old.last_active_ns;
            self.h2_totals.retire(&mut old, end_ns);
        }
    }

    fn evict_least_active(&mut self) {
        if let Some(sk) = self.conns.iter().min_by_key(|(_, c)| c.last_active_ns).map(|(sk, _)| *sk)
            && let Some(mut conn) = self.conns.remove(&sk)
        {
            let end_ns = conn.last_active_ns;
            self.h2_totals.retire(&mut conn, end_ns);
            self.counts.evicted_connections += 1;
        }
    }

    fn data(&mut self, data: &DataRecord) {
        if data.fd != gateway_observer_common::DATA_FD_TLS_SESSION {
            self.transfer(data, false);
            return;
        }
        // Plaintext of a TLS session whose socket the kernel did not see: `sk` is its `SSL *`.
        let resolved = self.tls_sessions.resolve(data.tgid, data.tid, data.sk, data.read);
        let Some(((sk, queued_since_ns), lost_seen)) =
            resolved.and_then(|(sk, queued)| Some(((sk, queued), self.conns.get(&sk)?.lost_seen)))
        else {
            // A client's first write: tied when its ciphertext is written (`tls_sessions`).
            self.counts.tls_unresolved +=
                if data.read || resolved.is_some() { 1 } else { self.tls_sessions.hold_write(data) };
            return;
        };
        let resolved = DataRecord {
            sk,
            fd: gateway_observer_common::DATA_FD_UNKNOWN,
            queued_since_ns,
            sock_lost: lost_seen,
            ..data.clone()
        };
        self.transfer(&resolved, true);
    }

    /// Bytes moved on a connection: ciphertext of a TLS connection (never parsed), or plaintext
    /// (`plaintext`: tied to it through its TLS session), or anything else.
    fn transfer(&mut self, data: &DataRecord, plaintext: bool) {
        if !self.conns.contains_key(&data.sk) {
            // Its open was lost: follow it if the bytes tell its side.
            let Some(side) = side_from_bytes(data.read, data.head) else {
                self.counts.unattributed_records += 1;
                return;
            };
            if self.conns.len() >= MAX_CONNECTIONS {
                self.evict_least_active();
            }
            let addresses = self.lookup_addresses(data.tgid, data.fd);
            let tracked = Tracked {
                tgid: None,
                side: Some(side),
                remote: addresses.map(|(_, remote)| remote),
                local_port: addresses.map(|(local, _)| local.port()),
                netns: self.netns_of.get(&data.tgid).copied(),
                peer: None,
                process: None,
                http: Some(new_connection(side)),
                flow: FlowState::default(),
                last_active_ns: 0,
                last_read_ns: data.timestamp_ns,
                lost_seen: data.sock_lost,
                tls: false,
                plaintext: false,
                kernel_tls: KernelTls::Undecided,
                started: false,
                h2_added: None,
                h2_settled: false,
            };
            self.conns.insert(data.sk, tracked);
        }
        let Some(conn) = self.conns.get_mut(&data.sk) else { return };
        conn.tgid = Some(data.tgid);
        if conn.process.is_none() {
            let name = self.names.entry(data.tgid).or_insert_with(|| {
                Arc::from(crate::host::procfs::comm(data.tgid).unwrap_or_else(|| data.tgid.to_string()))
            });
            conn.process = Some(name.clone());
        }
        conn.last_active_ns = data.timestamp_ns;
        let first = !std::mem::replace(&mut conn.started, true);
        let step = if plaintext {
            conn.plaintext = true;
            Step::Parse
        } else if conn.tls || (first && starts_tls_record(data.head)) {
            conn.tls = true;
            // Plaintext tied through its session is all that is parsed of it; otherwise its
            // socket may go on in plaintext (kernel TLS).
            if conn.plaintext { Step::SetAside } else { conn.kernel_tls.step(data.read, data.head) }
        } else {
            Step::Parse
        };
        match step {
            Step::Parse => {}
            Step::Began => {
                if kernel_tls::is_h2_preface(data.head) {
                    self.h2_mid_way.push(data.sk);
                }
            }
            Step::FoundSendOnly => {
                // One direction is ciphertext: forget what was parsed of it.
                parse_afresh(conn, &mut self.counts, &mut self.h2_totals);
                return;
            }
            Step::SetAside => {
                self.counts.tls_ciphertext_records += 1;
                // Its plaintext, if any, comes keyed by its session, after the ciphertext it decrypts.
                if data.read {
                    self.tls_sessions.ciphertext_read(data.tid, data.sk, data.queued_since_ns);
                } else {
                    let lost_seen = conn.lost_seen;
                    for held in self.tls_sessions.ciphertext_written(data.tid, data.sk) {
                        self.transfer(&held.on_connection(data.tid, data.sk, lost_seen), true);
                    }
                }
                return;
            }
        }
        if data.read {
            conn.last_read_ns = data.timestamp_ns;
        }
        if conn.side.is_none() {
            conn.side = side_from_bytes(data.read, data.head);
            conn.http = conn.side.map(new_connection);
        }
        if data.sock_lost != conn.lost_seen {
            // Records of this connection were lost before this one: what it was parsing may
            // miss its end (a response), so start again here. Other connections are untouched.
            conn.lost_seen = data.sock_lost;
            let abandoned = parse_afresh(conn, &mut self.counts, &mut self.h2_totals);
            self.counts.abandoned_after_loss += abandoned;
        }
        let Some(http) = conn.http.as_mut() else {
            self.counts.unattributed_records += 1;
            return;
        };
        let segment = Segment {
            ts_ns: data.timestamp_ns,
            tid: data.tid,
            len: data.len,
            head: data.head,
            tail: data.tail,
            queued_since_ns: data.queued_since_ns,
            walked: data.walked,
        };
        let direction = if data.read { Direction::Read } else { Direction::Write };
        if data.read {
            conn.flow.on_read(data.timestamp_ns, data.len);
        } else {
            conn.flow.on_write(data.timestamp_ns, data.len);
        }
        let mut done = std::mem::take(&mut self.scratch);
        http.on_segment(direction, &segment, &mut done);
        if http.take_h2_mid_way() {
            self.h2_mid_way.push(data.sk);
        }
        conn.h2_settled = false;
        if done.iter().any(|e| e.status.is_some()) {
            conn.flow.on_response();
        }
        if conn.peer.is_none()
            && conn.side == Some(Side::Outbound)
            && let Some(remote) = conn.remote
        {
            conn.peer = Some(self.peers.label(data.tgid, remote));
        }
        if !done.is_empty() {
            let (side, peer, process) = (conn.side, conn.peer.clone(), conn.process.clone());
            for exchange in done.drain(..) {
                self.finished(data.tgid, process.as_ref(), side, peer.as_ref(), &exchange);
            }
        }
        self.scratch = done;
    }

    fn close(&mut self, sk: u64, ts_ns: u64) {
        self.tls_sessions.closed(sk);
        let Some(mut conn) = self.conns.remove(&sk) else { return };
        let Some(tgid) = conn.tgid else { return };
        let Some(http) = conn.http.as_mut() else { return };
        let mut done = std::mem::take(&mut self.scratch);
        http.on_close(ts_ns, &mut done);
        for exchange in done.drain(..) {
            self.finished(tgid, conn.process.as_ref(), conn.side, conn.peer.as_ref(), &exchange);
        }
        self.scratch = done;
        self.counts.closed_resyncs += http.lost_sync();
        let http_h2 = http.is_h2();
        let non_http = (!http.is_http()).then(|| http.non_http_bytes());
        if http_h2 {
            self.h2_totals.retire(&mut conn, ts_ns);
        }
        match conn.kernel_tls {
            KernelTls::Plaintext { .. } => self.counts.kernel_tls_both += 1,
            KernelTls::SendOnly => self.counts.kernel_tls_send_only += 1,
            KernelTls::Undecided => {}
        }
        if conn.tls && !conn.plaintext && !conn.kernel_tls.parsed() {
            let process = conn.process.clone().unwrap_or_else(|| self.process_name(tgid));
            *self.tls_unparsed.entry(process).or_default() += 1;
        } else if let Some(bytes) = non_http {
            let process = conn.process.clone().unwrap_or_else(|| self.process_name(tgid));
            let total = self.non_http_bytes.entry(process).or_default();
            *total = total.saturating_add(bytes);
        }
    }

    /// The process's name, read from /proc when its first data record arrived.
    pub fn process_name(&self, tgid: u32) -> Arc<str> {
        self.names.get(&tgid).cloned().unwrap_or_else(|| Arc::from(tgid.to_string()))
    }

    fn finished(
        &mut self,
        tgid: u32,
        process: Option<&Arc<str>>,
        side: Option<Side>,
        peer: Option<&Arc<str>>,
        exchange: &Exchange,
    ) {
        let Some(side) = side else { return };
        // Borrowed: a clone per exchange is an atomic increment and decrement.
        let named;
        let process = match process {
            Some(process) => process,
            None => {
                named = self.process_name(tgid);
                &named
            }
        };
        let duration = exchange.response_end_ns.saturating_sub(exchange.request_start_ns);
        let queue = exchange.queued_since_ns.map(|q| exchange.request_start_ns.saturating_sub(q));
        let method = exchange.method.as_str();
        self.stats.record(process, tgid, side, method, exchange.status, duration, exchange.response_end_ns, queue);
        if let Some(code) = exchange.grpc_status {
            self.stats.record_grpc(process, side, code);
        }
        match side {
            Side::Inbound => self.slowest.inbound_finished(&Finished {
                pid: tgid,
                process,
                thread: exchange.tid,
                method,
                path: &exchange.path,
                status: exchange.status,
                queued_since_ns: exchange.queued_since_ns,
                request_start_ns: exchange.request_start_ns,
                response_start_ns: exchange.response_start_ns,
                response_end_ns: exchange.response_end_ns,
            }),
            Side::Outbound => {
                let call = UpstreamCall {
                    tid: exchange.tid,
                    peer: peer.cloned().unwrap_or_else(|| Arc::from("unknown")),
                    status: exchange.status,
                    request_start_ns: exchange.request_start_ns,
                    response_end_ns: exchange.response_end_ns,
                };
                self.slowest.upstream_finished(tgid, call);
            }
        }
    }

    /// The (local, remote) addresses of a connection whose handshake record was lost, from
    /// /proc: a few per tick at most, since each reads the process's whole TCP table.
    fn lookup_addresses(&mut self, tgid: u32, fd: u32) -> Option<(SocketAddr, SocketAddr)> {
        // The TCP-function hooks (kernels without the socket tracepoints) do not know the fd.
        if self.proc_lookups_left == 0 || fd == gateway_observer_common::DATA_FD_UNKNOWN {
            return None;
        }
        self.proc_lookups_left -= 1;
        crate::host::procfs::tcp_addresses(tgid, fd)
    }

    /// Drops what is too old for the windows (once a tick).
    pub fn expire(&mut self, now_ns: u64) {
        crate::heap::shrink_sparse_map(&mut self.conns);
        self.proc_lookups_left = PROC_LOOKUPS_PER_TICK;
        self.stats.expire(now_ns);
        self.slowest.expire(now_ns);
    }

    /// The connections told to speak HTTP/2 from their frames (first seen mid-way) since the
    /// last call.
    pub fn take_h2_mid_way(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.h2_mid_way)
    }

    /// Adds the HTTP/2 signals and stalls of open connections to the totals (once a tick,
    /// before the metrics are rendered): a stall still open is timed up to `now_ns`.
    pub fn settle_h2(&mut self, now_ns: u64) {
        for conn in self.conns.values_mut() {
            self.h2_totals.settle(conn, now_ns);
        }
    }
}

fn new_connection(side: Side) -> Connection {
    Connection::new(role_of(side))
}

fn role_of(side: Side) -> Role {
    match side {
        Side::Inbound => Role::Server,
        Side::Outbound => Role::Client,
    }
}

#[cfg(test)]
pub(crate) mod tests;
