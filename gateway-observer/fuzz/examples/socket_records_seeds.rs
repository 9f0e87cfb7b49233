//! Writes the `socket_records` seeds (`corpus/socket_records/`): the records the kernel sends for
//! a gateway's traffic, built with the common crate's types, in the target's operation format.
//! `cargo run --example socket_records_seeds` in `gateway-observer/fuzz` rewrites them.

use std::net::Ipv4Addr;

use gateway_observer_common::{
    ConnEvent, DATA_HEAD_BYTES, DATA_TAIL_BYTES, DataEvent, FlowEvent, conn_role, data_shape, event_kind,
};

const GW: u32 = 4242;
const NETNS: u32 = 4_026_531_840;
const MS: u64 = 1_000_000;
const CLIENT_SK: u64 = 0xffff_8880_0a1b_2c00;
const UPSTREAM_SK: u64 = 0xffff_8880_0a1b_3d00;

const REQUEST: &[u8] = b"GET /api/v1/users/42 HTTP/1.1\r\nHost: gw.example\r\nUser-Agent: wrk\r\n\r\n";
const UPSTREAM_REQUEST: &[u8] =
    b"GET /users/42 HTTP/1.1\r\nHost: users.internal\r\nX-Forwarded-For: 10.1.2.3\r\nConnection: keep-alive\r\n\r\n";
const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":42}\r\n";
const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";

fn bytes_of<T: Copy>(value: &T) -> Vec<u8> {
    // SAFETY: the common crate's records are repr(C) integers with their padding written out.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// A seed: operations in the target's format.
#[derive(Default)]
struct Seed(Vec<u8>);

impl Seed {
    fn record(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.push(0);
        self.0.extend((bytes.len() as u16).to_le_bytes());
        self.0.extend(bytes);
        self
    }

    fn conn(
        &mut self,
        kind: u32,
        sk: u64,
        role: u32,
        local: (Ipv4Addr, u16),
        remote: (Ipv4Addr, u16),
        ts: u64,
    ) -> &mut Self {
        let mut event = ConnEvent {
            kind,
            tgid: GW,
            sk,
            timestamp_ns: ts,
            role,
            family: 2,
            local_port: local.1,
            remote_port: remote.1,
            netns: NETNS,
            ..ConnEvent::default()
        };
        event.local_addr[..4].copy_from_slice(&local.0.octets());
        event.remote_addr[..4].copy_from_slice(&remote.0.octets());
        self.record(&bytes_of(&event))
    }

    fn data(&mut self, sk: u64, read: bool, bytes: &[u8], ts: u64, lost: u16) -> &mut Self {
        let mut head = [0u8; DATA_HEAD_BYTES];
        let head_len = bytes.len().min(DATA_HEAD_BYTES);
        head[..head_len].copy_from_slice(&bytes[..head_len]);
        let mut tail = [0u8; DATA_TAIL_BYTES];
        let tail_bytes = &bytes[bytes.len().saturating_sub(DATA_TAIL_BYTES)..];
        tail[..tail_bytes.len()].copy_from_slice(tail_bytes);
        let event = DataEvent {
            kind: event_kind::SOCKET_DATA,
            tid: GW + 1,
            tgid: GW,
            fd: 12,
            sk,
            timestamp_ns: ts,
            len: bytes.len() as u64,
            queued_since_ns: if read { ts - MS / 10 } else { 0 },
            shape: if read { data_shape::READ_BUF } else { data_shape::WRITE_IOV },
            _pad: 0,
            head_len: head_len as u16,
            tail_len: tail_bytes.len() as u16,
            sock_lost: lost,
            head,
            tail,
        };
        self.record(&bytes_of(&event))
    }

    fn flow(&mut self, kind: u32, sk: u64, ts: u64, retransmits: u32, by_peer: u32) -> &mut Self {
        let event = FlowEvent {
            kind,
            tgid: GW,
            sk,
            timestamp_ns: ts,
            rx_last_ns: 0,
            unacked_bytes: 97,
            retransmits,
            by_peer,
            _pad: 0,
        };
        self.record(&bytes_of(&event))
    }

    fn tick(&mut self, micros: u32) -> &mut Self {
        self.0.push(5);
        self.0.extend(micros.to_le_bytes());
        self
    }

    fn listen(&mut self, port: u16) -> &mut Self {
        self.0.push(7);
        self.0.push(GW as u8);
        self.0.extend(port.to_le_bytes());
        self
    }

    fn loss(&mut self, limit: u8, counts: &[u8]) -> &mut Self {
        self.0.push(6);
        self.0.push(limit);
        self.0.extend(counts);
        self
    }
}

fn main() -> std::io::Result<()> {
    let local = Ipv4Addr::LOCALHOST;
    let client = (Ipv4Addr::new(10, 1, 2, 3), 51_000);
    let upstream = (Ipv4Addr::new(10, 0, 0, 9), 8081);
    let mut seeds: Vec<(&str, Seed)> = Vec::new();

    let mut s = Seed::default();
    s.conn(event_kind::SOCKET_OPEN, CLIENT_SK, conn_role::SERVER, (local, 8080), client, 10 * MS);
    for i in 0..3 {
        s.data(CLIENT_SK, true, REQUEST, (20 + 10 * i) * MS, 0).data(CLIENT_SK, false, RESPONSE, (21 + 10 * i) * MS, 0);
    }
    s.tick(60_000).conn(event_kind::SOCKET_CLOSE, CLIENT_SK, conn_role::UNKNOWN, (local, 8080), client, 70 * MS);
    seeds.push(("inbound_keep_alive", s));

    let mut s = Seed::default();
    s.conn(event_kind::SOCKET_OPEN, CLIENT_SK, conn_role::SERVER, (local, 8080), client, 10 * MS)
        .data(CLIENT_SK, true, REQUEST, 11 * MS, 0)
        .conn(event_kind::SOCKET_OPEN, UPSTREAM_SK, conn_role::CLIENT, (local, 40_000), upstream, 12 * MS)
        .data(UPSTREAM_SK, false, UPSTREAM_REQUEST, 13 * MS, 0)
        .data(UPSTREAM_SK, true, CHUNKED, 40 * MS, 0)
        .data(CLIENT_SK, false, RESPONSE, 41 * MS, 0)
        .tick(50_000);
    seeds.push(("proxied_with_chunked_upstream", s));

    let mut s = Seed::default();
    s.conn(event_kind::SOCKET_OPEN, UPSTREAM_SK, conn_role::CLIENT, (local, 40_000), upstream, 10 * MS)
        .data(UPSTREAM_SK, false, UPSTREAM_REQUEST, 11 * MS, 0)
        .flow(event_kind::SOCKET_RETRANSMIT, UPSTREAM_SK, 220 * MS, 1, 0)
        .flow(event_kind::SOCKET_RETRANSMIT, UPSTREAM_SK, 640 * MS, 2, 0)
        .tick(700_000)
        .flow(event_kind::SOCKET_RETRANSMIT, UPSTREAM_SK, 1480 * MS, 3, 0)
        .tick(1_000_000)
        .flow(event_kind::SOCKET_RESET, UPSTREAM_SK, 2000 * MS, 3, 1)
        .conn(event_kind::SOCKET_CLOSE, UPSTREAM_SK, conn_role::UNKNOWN, (local, 40_000), upstream, 2000 * MS)
        .tick(1_000_000);
    seeds.push(("upstream_silent_retransmits_then_reset", s));

    // The handshakes were lost: the side comes from the bytes, or the listening port; then the
    // kernel loses records of one connection mid-request.
    let mut s = Seed::default();
    s.listen(8080)
        .data(CLIENT_SK, true, REQUEST, 10 * MS, 0)
        .data(UPSTREAM_SK, false, UPSTREAM_REQUEST, 11 * MS, 0)
        .tick(10_000)
        .loss(8, &[1, 0])
        .data(CLIENT_SK, true, REQUEST, 30 * MS, 1)
        .data(CLIENT_SK, false, RESPONSE, 31 * MS, 1)
        .loss(0, &[])
        .tick(10_000);
    seeds.push(("handshakes_and_records_lost", s));

    // A busy gateway: eight clients at once, each request proxied upstream over connections that
    // existed before the daemon (no handshake seen), answered out of order.
    let mut s = Seed::default();
    s.listen(8080);
    for i in 0..8u16 {
        let ts = 10 * MS + u64::from(i) * MS;
        s.conn(
            event_kind::SOCKET_OPEN,
            CLIENT_SK + u64::from(i),
            conn_role::SERVER,
            (local, 8080),
            (client.0, 51_000 + i),
            ts,
        )
        .data(CLIENT_SK + u64::from(i), true, REQUEST, ts + MS / 2, 0)
        .data(UPSTREAM_SK + u64::from(i % 2), false, UPSTREAM_REQUEST, ts + MS, 0);
    }
    s.tick(20_000);
    for i in (0..8u16).rev() {
        let ts = 40 * MS + u64::from(8 - i) * MS;
        s.data(UPSTREAM_SK + u64::from(i % 2), true, RESPONSE, ts, 0).data(
            CLIENT_SK + u64::from(i),
            false,
            RESPONSE,
            ts + MS / 2,
            0,
        );
    }
    s.tick(30_000);
    seeds.push(("eight_clients_two_upstream_connections", s));

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/socket_records");
    std::fs::create_dir_all(&dir)?;
    for (name, seed) in seeds {
        std::fs::write(dir.join(name), &seed.0)?;
    }
    Ok(())
}
