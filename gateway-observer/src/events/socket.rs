//! Socket ring-buffer bytes to typed records (connections opened and closed, data moved). Like
//! `events`, it decodes byte slices and touches no kernel handle.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use gateway_observer_common::{
    CONN_EVENT_SIZE, ConnEvent, DATA_EVENT_SIZE, DATA_HEAD_BYTES, DATA_TAIL_BYTES, DataEvent, FLOW_EVENT_SIZE,
    FlowEvent, H2_CONTINUED_EVENT_SIZE, H2_WALK_FRAMES, H2_WALK_PAYLOAD_BYTES, H2ContinuedEvent, H2DataEvent, H2Walk,
    PAYLOAD_EVENT_SIZE, conn_role, data_shape, event_kind, walk_mode,
};
use gateway_observer_http::h2::Walked;

const AF_INET6: u16 = 10;

/// A decoded record; data records borrow their bytes from the ring buffer (no copy per record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketRecord<'a> {
    Open(ConnInfo),
    Close(ConnInfo),
    Data(DataRecord<'a>),
    Retransmit(FlowRecord),
    Reset(FlowRecord),
    /// More frame headers of the walked record before it of the same socket and thread.
    H2Continued(ContinuedWalk<'a>),
}

/// The kernel's walk of a transfer's HTTP/2 frame headers, gone on past a record's bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuedWalk<'a> {
    pub sk: u64,
    pub tid: u32,
    /// From where the walk before stopped (`walked.origin`).
    pub walked: Walked<'a>,
    /// Another continuation follows.
    pub continued: bool,
}

/// TCP state of a connection when the kernel retransmitted on it or it was reset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRecord {
    pub sk: u64,
    pub timestamp_ns: u64,
    /// When data last arrived on it, if ever since it was followed.
    pub rx_last_ns: Option<u64>,
    pub unacked_bytes: u32,
    /// Retransmits so far on this connection.
    pub retransmits: u32,
    /// Reset: by the peer (true) or by this host.
    pub by_peer: bool,
}

/// Who opened a connection, as the kernel saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// Accepted on a port a target listens on.
    Accepted,
    /// Connected by a target.
    Connected,
    /// First seen moving data (it predates the daemon).
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// The kernel's `struct sock` address: the connection's identity while it lives.
    pub sk: u64,
    /// Owner, if known yet.
    pub tgid: Option<u32>,
    pub opened: Opened,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub timestamp_ns: u64,
    /// The socket's network namespace (inode number; 0 unknown).
    pub netns: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRecord<'a> {
    pub sk: u64,
    pub tid: u32,
    pub tgid: u32,
    pub fd: u32,
    /// True for reads (the target received the bytes).
    pub read: bool,
    pub len: u64,
    pub timestamp_ns: u64,
    /// Reads: when the bytes first arrived in the socket.
    pub queued_since_ns: Option<u64>,
    pub head: &'a [u8],
    pub tail: &'a [u8],
    /// The socket's count of data records the kernel lost (low 16 bits): when it moves, records
    /// of this connection were lost before this one.
    pub sock_lost: u16,
    /// HTTP/2 frame headers the kernel walked past the head (empty unless it did).
    pub walked: Walked<'a>,
    /// The walk reached its bound and goes on in `H2Continued` records.
    pub walk_continued: bool,
    /// The whole walk is in the `H2Continued` records that follow (`walked` is empty): the first
    /// says where it began.
    pub walk_in_continuations: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("socket event of {0} bytes is too short")]
    Size(usize),
    #[error("unknown socket event kind {0}")]
    Kind(u32),
}

/// Decodes one record; the buffer need not be aligned.
pub fn decode(bytes: &[u8]) -> Result<SocketRecord<'_>, DecodeError> {
    let kind_bytes: [u8; 4] = bytes.get(..4).and_then(|b| b.try_into().ok()).ok_or(DecodeError::Size(bytes.len()))?;
    match u32::from_ne_bytes(kind_bytes) {
        event_kind::SOCKET_DATA => {
            if bytes.len() < DATA_EVENT_SIZE {
                return Err(DecodeError::Size(bytes.len()));
            }
            Ok(SocketRecord::Data(data_record(bytes, true)))
        }
        // A DataEvent's fields before its head, with no bytes.
        event_kind::SOCKET_PAYLOAD => {
            let bytes = bytes.get(..PAYLOAD_EVENT_SIZE).ok_or(DecodeError::Size(bytes.len()))?;
            Ok(SocketRecord::Data(data_record(bytes, false)))
        }
        kind @ (event_kind::SOCKET_OPEN | event_kind::SOCKET_CLOSE) => {
            let event: ConnEvent = read_struct(bytes, CONN_EVENT_SIZE)?;
            let info = conn_info(&event);
            Ok(if kind == event_kind::SOCKET_OPEN { SocketRecord::Open(info) } else { SocketRecord::Close(info) })
        }
        event_kind::SOCKET_H2_CONTINUED => {
            if bytes.len() < H2_CONTINUED_EVENT_SIZE {
                return Err(DecodeError::Size(bytes.len()));
            }
            let walk_at = std::mem::offset_of!(H2ContinuedEvent, walk);
            Ok(SocketRecord::H2Continued(ContinuedWalk {
                sk: field(bytes, std::mem::offset_of!(H2ContinuedEvent, sk)),
                tid: field(bytes, std::mem::offset_of!(H2ContinuedEvent, tid)),
                walked: walked(bytes, walk_at),
                continued: walk_continued(bytes, walk_at),
            }))
        }
        kind @ (event_kind::SOCKET_RETRANSMIT | event_kind::SOCKET_RESET) => {
            let event: FlowEvent = read_struct(bytes, FLOW_EVENT_SIZE)?;
            let flow = FlowRecord {
                sk: event.sk,
                timestamp_ns: event.timestamp_ns,
                rx_last_ns: (event.rx_last_ns != 0).then_some(event.rx_last_ns),
                unacked_bytes: event.unacked_bytes,
                retransmits: event.retransmits,
                by_peer: event.by_peer != 0,
            };
            Ok(if kind == event_kind::SOCKET_RETRANSMIT {
                SocketRecord::Retransmit(flow)
            } else {
                SocketRecord::Reset(flow)
            })
        }
        other => Err(DecodeError::Kind(other)),
    }
}

fn read_struct<T: Copy>(bytes: &[u8], size: usize) -> Result<T, DecodeError> {
    if bytes.len() < size || size != std::mem::size_of::<T>() {
        return Err(DecodeError::Size(bytes.len()));
    }
    // SAFETY: T is one of the common crate's repr(C) integer-only records (every bit pattern is
    // valid) and the slice holds at least size_of::<T>() bytes; read_unaligned needs no alignment.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// A field of a record at `offset` in `bytes` (which callers check holds it; 0 if not).
fn field<T: Copy + Default>(bytes: &[u8], offset: usize) -> T {
    let Some(raw) = bytes.get(offset..offset + size_of::<T>()) else { return T::default() };
    // SAFETY: `raw` holds size_of::<T>() bytes; T is an integer (every bit pattern is valid)
    // and read_unaligned needs no alignment.
    unsafe { std::ptr::read_unaligned(raw.as_ptr().cast::<T>()) }
}

/// The record's fields, read where they lie in `bytes` rather than copied whole (a DataEvent is
/// 584 bytes, most of them a head few transfers fill), with head and tail borrowed from them.
/// `with_bytes`: `bytes` holds a whole DataEvent (else only the fields before its head).
fn data_record(bytes: &[u8], with_bytes: bool) -> DataRecord<'_> {
    macro_rules! at {
        ($name:ident) => {
            field(bytes, std::mem::offset_of!(DataEvent, $name))
        };
    }
    let (head_len, tail_len, h2_walk): (u16, u16, u8) =
        if with_bytes { (at!(head_len), at!(tail_len), at!(h2_walk)) } else { (0, 0, 0) };
    let head_len = usize::from(head_len).min(DATA_HEAD_BYTES);
    let tail_len = usize::from(tail_len).min(DATA_TAIL_BYTES);
    let head_at = std::mem::offset_of!(DataEvent, head);
    let tail_at = std::mem::offset_of!(DataEvent, tail);
    let queued_since_ns: u64 = at!(queued_since_ns);
    let walk_at = std::mem::offset_of!(H2DataEvent, walk);
    DataRecord {
        sk: at!(sk),
        tid: at!(tid),
        tgid: at!(tgid),
        fd: at!(fd),
        read: data_shape::is_read(at!(shape)),
        len: at!(len),
        timestamp_ns: at!(timestamp_ns),
        queued_since_ns: (queued_since_ns != 0).then_some(queued_since_ns),
        head: bytes.get(head_at..head_at + head_len).unwrap_or_default(),
        tail: bytes.get(tail_at..tail_at + tail_len).unwrap_or_default(),
        sock_lost: at!(sock_lost),
        walked: if h2_walk == walk_mode::INLINE { walked(bytes, walk_at) } else { Walked::default() },
        walk_continued: match h2_walk {
            walk_mode::INLINE => walk_continued(bytes, walk_at),
            walk_mode::IN_CONTINUATIONS => true,
            _ => false,
        },
        walk_in_continuations: h2_walk == walk_mode::IN_CONTINUATIONS,
    }
}

/// Whether the `H2Walk` at `walk_at` goes on in a continuation record.
fn walk_continued(bytes: &[u8], walk_at: usize) -> bool {
    bytes.len() >= walk_at + size_of::<H2Walk>()
        && field::<u8>(bytes, walk_at + std::mem::offset_of!(H2Walk, continued)) != 0
}

/// The frame walk at `walk_at` of a record (`bytes` holds the whole record), borrowed from
/// `bytes`; empty when the record is too short for one.
fn walked(bytes: &[u8], walk_at: usize) -> Walked<'_> {
    if bytes.len() < walk_at + size_of::<H2Walk>() {
        return Walked::default();
    }
    let in_walk = |offset: usize| walk_at + offset;
    let frames: u8 = field(bytes, in_walk(std::mem::offset_of!(H2Walk, frames)));
    let origin: u32 = field(bytes, in_walk(std::mem::offset_of!(H2Walk, origin)));
    let start: u32 = field(bytes, in_walk(std::mem::offset_of!(H2Walk, start)));
    let frames = usize::from(frames).min(H2_WALK_FRAMES);
    let headers = in_walk(std::mem::offset_of!(H2Walk, headers));
    let lens = in_walk(std::mem::offset_of!(H2Walk, payload_lens));
    let payloads = in_walk(std::mem::offset_of!(H2Walk, payloads));
    Walked {
        origin: u64::from(origin),
        start: u64::from(start),
        headers: &bytes[headers..headers + frames * 9],
        payload_lens: &bytes[lens..lens + frames],
        payloads: &bytes[payloads..payloads + H2_WALK_FRAMES * H2_WALK_PAYLOAD_BYTES],
        payload_slot: H2_WALK_PAYLOAD_BYTES,
    }
}

fn conn_info(event: &ConnEvent) -> ConnInfo {
    let ip = |raw: &[u8; 16]| -> IpAddr {
        if event.family == AF_INET6 {
            let v6 = Ipv6Addr::from(*raw);
            // A v4 peer of a dual-stack socket reads better as v4.
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        } else {
            IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
        }
    };
    ConnInfo {
        sk: event.sk,
        tgid: (event.tgid != 0).then_some(event.tgid),
        opened: match event.role {
            conn_role::SERVER => Opened::Accepted,
            conn_role::CLIENT => Opened::Connected,
            _ => Opened::Unknown,
        },
        local: SocketAddr::new(ip(&event.local_addr), event.local_port),
        remote: SocketAddr::new(ip(&event.remote_addr), event.remote_port),
        timestamp_ns: event.timestamp_ns,
        netns: event.netns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(value: &T) -> Vec<u8> {
        // SAFETY: the records are repr(C) integers with explicit padding.
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>()) }.to_vec()
    }

    #[test]
    fn data_event_keeps_only_the_valid_bytes() {
        let mut head = [0u8; DATA_HEAD_BYTES];
        head[..5].copy_from_slice(b"GET /");
        let mut tail = [0u8; DATA_TAIL_BYTES];
        tail[..2].copy_from_slice(b"\r\n");
        let event = DataEvent {
            kind: event_kind::SOCKET_DATA,
            tid: 7,
            tgid: 5,
            fd: 9,
            sk: 0xffff_8880_1234_5678,
            timestamp_ns: 1000,
            len: 700,
            queued_since_ns: 900,
            shape: data_shape::READ_BUF,
            h2_walk: 0,
            head_len: 5,
            tail_len: 2,
            sock_lost: 0,
            head,
            tail,
        };
        let mut shifted = vec![0u8];
        shifted.extend(bytes_of(&event));
        let Ok(SocketRecord::Data(data)) = decode(&shifted[1..]) else { panic!("data record") };
        assert_eq!(data.head, b"GET /");
        assert_eq!(data.tail, b"\r\n");
        assert!(data.read);
        assert_eq!((data.len, data.queued_since_ns, data.tid), (700, Some(900), 7));
    }

    /// A write of one byte with every head and tail byte set, lengths past the arrays.
    fn write_event() -> DataEvent {
        DataEvent {
            kind: event_kind::SOCKET_DATA,
            tid: 1,
            tgid: 1,
            fd: 1,
            sk: 1,
            timestamp_ns: 1,
            len: 1,
            queued_since_ns: 0,
            shape: data_shape::WRITE_IOV,
            h2_walk: 0,
            head_len: 9999,
            tail_len: 9999,
            sock_lost: 0,
            head: [b'x'; DATA_HEAD_BYTES],
            tail: [b'y'; DATA_TAIL_BYTES],
        }
    }

    #[test]
    fn lengths_past_the_arrays_are_clamped() {
        let event = write_event();
        let bytes = bytes_of(&event);
        let Ok(SocketRecord::Data(data)) = decode(&bytes) else { panic!("data record") };
        assert_eq!((data.head.len(), data.tail.len()), (DATA_HEAD_BYTES, DATA_TAIL_BYTES));
        assert!(!data.read);
        assert_eq!(data.queued_since_ns, None);
    }

    #[test]
    fn walked_frame_headers_come_with_their_record() {
        let data = DataEvent { len: 5000, h2_walk: 1, ..write_event() };
        let mut walk = H2Walk {
            origin: 0,
            start: 600,
            frames: 2,
            continued: 0,
            _pad: [0; 6],
            headers: [[0; 9]; H2_WALK_FRAMES],
            payload_lens: [0; H2_WALK_FRAMES],
            payloads: [[0; H2_WALK_PAYLOAD_BYTES]; H2_WALK_FRAMES],
        };
        walk.headers[0] = [0, 0, 1, 1, 4, 0, 0, 0, 3];
        walk.headers[1] = [0, 0, 7, 0, 1, 0, 0, 0, 3];
        walk.payload_lens[0] = 1;
        walk.payloads[0][0] = 0x88;
        let bytes = bytes_of(&H2DataEvent { data, walk });
        let Ok(SocketRecord::Data(record)) = decode(&bytes) else { panic!("data record") };
        let walked = record.walked;
        assert_eq!((walked.origin, walked.start, walked.headers.len()), (0, 600, 18));
        assert_eq!(&walked.headers[9..], &[0, 0, 7, 0, 1, 0, 0, 0, 3]);
        assert_eq!((walked.payload_lens, walked.payload_slot), (&[1, 0][..], H2_WALK_PAYLOAD_BYTES));
        assert_eq!(walked.payloads[0], 0x88);
        // The flag without the walk's bytes (a short record): no walk, the data still decodes.
        let Ok(SocketRecord::Data(short)) = decode(&bytes[..DATA_EVENT_SIZE]) else { panic!("data record") };
        assert!(short.walked.is_empty());
        // A plain record says nothing of frames.
        let plain = bytes_of(&DataEvent { h2_walk: 0, ..data });
        let Ok(SocketRecord::Data(plain)) = decode(&plain) else { panic!("data record") };
        assert!(plain.walked.is_empty());
    }

    /// A transfer inside one HTTP/2 frame's payload: a DataEvent's fields before its head, and
    /// no bytes, whatever its head and tail lengths say; shorter, it is refused.
    #[test]
    fn a_payload_record_has_its_fields_and_no_bytes() {
        let data = DataEvent { kind: event_kind::SOCKET_PAYLOAD, len: 8192, queued_since_ns: 7, ..write_event() };
        let bytes = bytes_of(&data);
        let Ok(SocketRecord::Data(record)) = decode(&bytes[..PAYLOAD_EVENT_SIZE]) else { panic!("data record") };
        assert_eq!((record.sk, record.tid, record.len, record.queued_since_ns), (data.sk, data.tid, 8192, Some(7)));
        assert!(record.head.is_empty() && record.tail.is_empty() && record.walked.is_empty());
        assert_eq!(decode(&bytes[..PAYLOAD_EVENT_SIZE - 1]), Err(DecodeError::Size(PAYLOAD_EVENT_SIZE - 1)));
    }

    #[test]
    fn ipv4_and_mapped_ipv6_connections() {
        let mut event = ConnEvent {
            kind: event_kind::SOCKET_OPEN,
            tgid: 0,
            sk: 42,
            role: conn_role::SERVER,
            family: 2,
            local_port: 8080,
            remote_port: 51000,
            ..ConnEvent::default()
        };
        event.local_addr[..4].copy_from_slice(&[127, 0, 0, 1]);
        event.remote_addr[..4].copy_from_slice(&[127, 0, 0, 2]);
        let Ok(SocketRecord::Open(info)) = decode(&bytes_of(&event)) else { panic!("open record") };
        assert_eq!(info.local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(info.remote, "127.0.0.2:51000".parse().unwrap());
        assert_eq!((info.tgid, info.opened), (None, Opened::Accepted));

        event.kind = event_kind::SOCKET_CLOSE;
        event.family = AF_INET6;
        event.role = conn_role::CLIENT;
        event.tgid = 3;
        event.remote_addr = Ipv4Addr::new(10, 0, 0, 9).to_ipv6_mapped().octets();
        let Ok(SocketRecord::Close(info)) = decode(&bytes_of(&event)) else { panic!("close record") };
        assert_eq!(info.remote.ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)));
        assert_eq!((info.tgid, info.opened), (Some(3), Opened::Connected));
    }

    #[test]
    fn retransmits_and_resets() {
        let event = FlowEvent {
            kind: event_kind::SOCKET_RETRANSMIT,
            tgid: 4,
            sk: 9,
            timestamp_ns: 500,
            rx_last_ns: 0,
            unacked_bytes: 77,
            retransmits: 3,
            by_peer: 0,
            _pad: 0,
        };
        let Ok(SocketRecord::Retransmit(flow)) = decode(&bytes_of(&event)) else { panic!("retransmit") };
        assert_eq!((flow.sk, flow.rx_last_ns, flow.unacked_bytes, flow.retransmits), (9, None, 77, 3));
        let reset = FlowEvent { kind: event_kind::SOCKET_RESET, by_peer: 1, rx_last_ns: 400, ..event };
        let Ok(SocketRecord::Reset(flow)) = decode(&bytes_of(&reset)) else { panic!("reset") };
        assert!(flow.by_peer);
        assert_eq!(flow.rx_last_ns, Some(400));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(decode(&[1, 2]), Err(DecodeError::Size(2)));
        assert_eq!(decode(&16u32.to_ne_bytes()), Err(DecodeError::Size(4)));
        assert_eq!(decode(&99u32.to_ne_bytes()), Err(DecodeError::Kind(99)));
    }
}
