//! Per-connection state (`SOCKS`) and the keys of the socket maps.

/// Value of `SOCKS`: a TCP connection a target uses, keyed by its `struct sock` address.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct SockState {
    /// Owner, or 0 until a target thread first transfers data on it (an accepted connection of a
    /// pre-fork server belongs to whichever worker accepts it).
    pub tgid: u32,
    /// `conn_role::*`
    pub role: u32,
    /// When bytes arrived that no read has taken yet; 0 when the socket was drained.
    pub unread_since_ns: u64,
    /// When data last arrived (any, read or not).
    pub rx_last_ns: u64,
    /// Retransmitted segments so far.
    pub retransmits: u32,
    /// Data records of this socket the ring had no room for, so far (it only grows): a record
    /// carries it, and userspace forgets what it was parsing on this connection alone when it
    /// moves, instead of every connection's.
    pub lost: u32,
    /// 1 once a TLS library call of a target moved bytes on it: its ciphertext is never reported
    /// (the plaintext is, from the library's hooks).
    pub tls: u32,
    /// Transfers on it seen so far, counted up to a few: the first one's bytes say whether it
    /// speaks TLS, and the first few are looked at for HTTP/2's client preface.
    pub data_seen: u32,
    /// 1 once one of its first transfers opened with the HTTP/2 client preface: transfers that
    /// run past the copied head get their frame headers walked (`H2Walk`).
    pub h2: u32,
    /// HTTP/2 connections: bytes from the start of its next read (`[0]`) and write (`[1]`) to
    /// their first frame header, where the last transfer's walk left it (a transfer may end
    /// inside a frame: a large DATA frame is read in pieces), with `H2_NEXT_IN_HEADER` when it
    /// ended inside a header (and `H2_NEXT_PARTIAL` when before its length was whole);
    /// `H2_NEXT_UNKNOWN` when the walk could not tell (a header in a later buffer).
    pub h2_next: [u32; 2],
    /// TLS library calls' plaintext records of it reported so far, counted up to a few: the first
    /// ones are looked at for HTTP/2's client preface, as a cleartext connection's first bytes.
    pub plain_seen: u32,
    /// Its local port plus one once it counts among `FOLLOWED_PORTS` (0: not yet).
    pub counted_port: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<SockState>() == 64);

/// `SockState::h2_next` not known: the next transfer's walk starts at its first byte, and
/// userspace uses it only where its own walk agrees.
pub const H2_NEXT_UNKNOWN: u32 = u32::MAX;

/// Set in a known `SockState::h2_next` when the last transfer ended inside a frame header (a
/// gateway reading into what room its buffer has left): the next one's first bytes are the rest
/// of that header, which userspace needs, though its first whole header lies further on.
pub const H2_NEXT_IN_HEADER: u32 = 1 << 30;

/// Set with `H2_NEXT_IN_HEADER` when the last transfer ended 1 or 2 bytes into a frame header,
/// before its 3-byte length was whole: bits 16-17 say how many bytes it held, bits 0-15 hold
/// them (big-endian). The next transfer's first bytes complete the length, and so tell where
/// its first whole header is (`h2_split_length`). A known place is below this bit.
pub const H2_NEXT_PARTIAL: u32 = 1 << 29;

/// `SockState::h2_next` for a transfer that ended `seen` (1 or 2) bytes into a frame header,
/// those bytes being the first of its length, `prefix` (big-endian).
pub const fn h2_next_partial(seen: u32, prefix: u32) -> u32 {
    H2_NEXT_IN_HEADER | H2_NEXT_PARTIAL | (seen << 16) | (prefix & 0xffff)
}

/// For an `h2_next` with `H2_NEXT_PARTIAL`: how many of the header's bytes came before (1 or 2).
pub const fn h2_partial_seen(next: u32) -> u32 {
    (next >> 16) & 3
}

/// For an `h2_next` with `H2_NEXT_PARTIAL`: the payload length its bytes and `rest` (the next
/// bytes, `3 - h2_partial_seen(next)` of them, big-endian) make.
pub const fn h2_split_length(next: u32, rest: u32) -> u32 {
    let prefix = next & 0xffff;
    (prefix << (8 * (3 - h2_partial_seen(next)))) | rest
}

/// Key of `LISTEN_PORTS`: a port in one network namespace.
pub fn listen_key(netns_inum: u32, port: u16) -> u64 {
    (u64::from(netns_inum) << 16) | u64::from(port)
}

/// `SSL *` objects whose last socket is remembered (`TLS_SOCKS`), for reads the library answers
/// from its buffer without a nested transfer.
pub const MAX_TLS_SESSIONS: u32 = 16384;

/// Key of `TLS_SOCKS`: an `SSL *` in one process (forked workers share addresses).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TlsKey {
    pub ssl: u64,
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<TlsKey>() == 16);

/// Go `crypto/tls` calls in progress (`GO_TLS_CALLS`, keyed by `TlsKey` with the goroutine's `g`
/// in place of the `SSL *`): one per goroutine inside `Read`, `Write` or the handshake.
pub const MAX_GO_TLS_CALLS: u32 = 16384;

/// When the bytes a TLS call returns arrived (0: not known), from the transfers nested in it.
/// A call that reads may run a handshake first (OpenSSL's `SSL_read` does when nothing called
/// `SSL_accept`, Go's `Read` when nothing called `Handshake`): the bytes it read before it sent
/// anything (a ClientHello) were not the request, and a slow client's flight is not time the
/// request waited in the socket. So a nested send starts the count again, from the next read's
/// arrival, or from the send when that read finds bytes that were there already.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TlsArrival {
    /// When the bytes of the first nested read since the last send had arrived.
    pub queued_ns: u64,
    /// When the call last sent (0: it did not).
    pub answered_ns: u64,
}

impl TlsArrival {
    /// A nested read took bytes that had been unread since `queued_ns` (0: since before the
    /// socket's last read).
    #[inline(always)]
    pub fn read(&mut self, queued_ns: u64) {
        if self.queued_ns == 0 {
            self.queued_ns = if queued_ns != 0 { queued_ns } else { self.answered_ns };
        }
    }

    /// A nested send at `now_ns`.
    #[inline(always)]
    pub fn sent(&mut self, now_ns: u64) {
        self.queued_ns = 0;
        self.answered_ns = now_ns;
    }

    /// A nested transfer ended at `now_ns`: a read (of bytes unread since `queued_ns`) or a send.
    #[inline(always)]
    pub fn transfer(&mut self, read: bool, queued_ns: u64, now_ns: u64) {
        if read { self.read(queued_ns) } else { self.sent(now_ns) }
    }
}

/// A Go `crypto/tls` call in progress, kept per goroutine (a goroutine that parks inside the call
/// may resume on another thread): its `*tls.Conn`, plaintext buffer and its length,
/// `data_shape::*` (`NONE` for the handshake), the socket its nested transfers used (0 until one
/// did), when the bytes it returns arrived, and whether a `Write`'s plaintext was sent already
/// (at its first nested transfer).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct GoTlsCall {
    pub conn: u64,
    pub buf: u64,
    pub len: u64,
    pub sk: u64,
    pub arrival: TlsArrival,
    pub shape: u8,
    pub sent: u8,
    pub _pad: [u8; 6],
}
const _: () = assert!(size_of::<GoTlsCall>() == 56);

/// Listening (namespace, port) pairs followed at once.
pub const MAX_LISTEN_PORTS: u32 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_read_after_the_handshake_arrived_after_the_servers_flight() {
        // ClientHello at 100, the server's flight at 110, the client's Finished and request at 400.
        let mut arrival = TlsArrival::default();
        arrival.read(100);
        arrival.sent(110);
        arrival.read(400);
        // The request's record, in the same segment: the socket's mark was taken by the read above.
        arrival.read(0);
        assert_eq!(arrival.queued_ns, 400);
    }

    #[test]
    fn a_request_already_there_when_the_server_sent_waited_from_the_send() {
        // Finished and request at 400; the Finished read, then session tickets sent at 420: the
        // request's record was in the socket all along (no new mark).
        let mut arrival = TlsArrival::default();
        arrival.read(400);
        arrival.sent(420);
        arrival.read(0);
        assert_eq!(arrival.queued_ns, 420);
    }

    #[test]
    fn a_read_with_no_handshake_keeps_its_first_arrival() {
        // A record read in two parts, the second part's segment marked later.
        let mut arrival = TlsArrival::default();
        arrival.read(500);
        arrival.read(520);
        assert_eq!(arrival.queued_ns, 500);
        // Bytes there before the call, whose mark an earlier read took: not known.
        let mut unknown = TlsArrival::default();
        unknown.read(0);
        assert_eq!(unknown.queued_ns, 0);
    }

    #[test]
    fn a_header_length_split_between_two_transfers_is_completed_by_the_second() {
        // One byte of the length (0x00) before, 0x01 0x02 after: 0x000102.
        let next = h2_next_partial(1, 0x00);
        assert_ne!(next & H2_NEXT_IN_HEADER, 0);
        assert_eq!((h2_partial_seen(next), h2_split_length(next, 0x0102)), (1, 0x0102));
        // Two bytes before (0x01 0x02), 0x03 after.
        let next = h2_next_partial(2, 0x0102);
        assert_eq!((h2_partial_seen(next), h2_split_length(next, 0x03)), (2, 0x010203));
        assert_ne!(next, H2_NEXT_UNKNOWN);
    }
}
