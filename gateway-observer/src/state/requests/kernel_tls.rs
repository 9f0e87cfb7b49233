//! Kernel TLS (kTLS): with OpenSSL's `KTLS` option (nginx: `ssl_conf_command Options KTLS`) the
//! library hands the session's keys to the kernel once the handshake is done, and from then on
//! reads and writes plaintext through the socket. The kernel reports a TLS connection's transfers
//! again once its socket has an upper-layer protocol (`sockets.rs`), so a connection that began
//! with a TLS record may go on in plaintext, with no uprobe at all.
//!
//! Its plaintext is told from ciphertext by its first message: a request line, a status line or
//! HTTP/2's preface. Ciphertext never opens so (OpenSSL reads a record's 5-byte header, then its
//! body), nor do the handshake's last messages, which kTLS also moves in the clear.
//!
//! OpenSSL offloads sending whenever it offloads receiving, but may offload sending alone
//! (receiving TLS 1.3 needs OpenSSL 3.2). Then one direction only is readable, and none of the
//! connection is parsed (counted): a client's plaintext began with a write and its next read is a
//! TLS record (its requests would never see their responses), or a server wrote a status line
//! before any plaintext came in (its requests were ciphertext).

use super::{side_from_bytes, starts_tls_record};

/// How a connection that began with a TLS record moves its bytes, as far as its records tell.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum KernelTls {
    /// Ciphertext, or the handshake, so far.
    #[default]
    Undecided,
    /// Plaintext moves through the socket; `read_seen`: received plaintext too.
    Plaintext { read_seen: bool },
    /// Only sending is offloaded: nothing of it is parsed.
    SendOnly,
}

/// What to do with one record of a TLS connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Plaintext: parse it.
    Parse,
    /// Its first plaintext: parse it, and count the connection as kernel TLS.
    Began,
    /// Ciphertext or handshake: set it aside.
    SetAside,
    /// Ciphertext received after plaintext was sent: drop what was parsed, and count it.
    FoundSendOnly,
}

impl KernelTls {
    pub fn step(&mut self, read: bool, head: &[u8]) -> Step {
        match *self {
            KernelTls::Undecided if !read && head.starts_with(b"HTTP/1.") => {
                *self = KernelTls::SendOnly;
                Step::FoundSendOnly
            }
            KernelTls::Undecided if opens_message(read, head) => {
                *self = KernelTls::Plaintext { read_seen: read };
                Step::Began
            }
            KernelTls::Undecided | KernelTls::SendOnly => Step::SetAside,
            KernelTls::Plaintext { read_seen: false } if read && starts_tls_record(head) => {
                *self = KernelTls::SendOnly;
                Step::FoundSendOnly
            }
            KernelTls::Plaintext { read_seen } => {
                *self = KernelTls::Plaintext { read_seen: read_seen || read };
                Step::Parse
            }
        }
    }

    /// Its plaintext is being parsed.
    pub fn parsed(self) -> bool {
        matches!(self, KernelTls::Plaintext { .. })
    }
}

/// A request line or the HTTP/2 preface either way, or a status line read (by a client).
fn opens_message(read: bool, head: &[u8]) -> bool {
    side_from_bytes(read, head).is_some()
}

/// HTTP/2's client preface: the kernel walks such a connection's frames once told (a kTLS
/// connection's preface comes after the handshake, past the transfers it looks at itself).
pub fn is_h2_preface(head: &[u8]) -> bool {
    head.starts_with(b"PRI * HTTP/2.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01];
    /// TLS 1.2's Finished, which kTLS receives in the clear (handshake type 20).
    const FINISHED: &[u8] = &[0x14, 0x00, 0x00, 0x0c, 0x8e, 0x21];
    const APP_DATA: &[u8] = &[0x17, 0x03, 0x03, 0x00, 0x40];

    #[test]
    fn a_server_parses_from_the_first_plaintext_request_on() {
        let mut tls = KernelTls::default();
        assert_eq!(tls.step(true, CLIENT_HELLO), Step::SetAside);
        assert_eq!(tls.step(false, &[0x16, 0x03, 0x03, 0x00, 0x3d]), Step::SetAside, "ServerHello");
        assert_eq!(tls.step(true, FINISHED), Step::SetAside);
        assert_eq!(tls.step(false, FINISHED), Step::SetAside);
        assert!(!tls.parsed());
        assert_eq!(tls.step(true, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Step::Began);
        assert_eq!(tls.step(false, b"HTTP/1.1 200 OK\r\n"), Step::Parse);
        // Body bytes of either direction, whatever they hold, are the parser's to judge.
        assert_eq!(tls.step(true, APP_DATA), Step::Parse);
        assert_eq!(tls.step(false, b"\x00\x01"), Step::Parse);
        assert!(tls.parsed());
    }

    #[test]
    fn a_client_that_sends_plaintext_and_receives_ciphertext_is_not_parsed() {
        let mut tls = KernelTls::default();
        assert_eq!(tls.step(false, CLIENT_HELLO), Step::SetAside);
        assert_eq!(tls.step(false, b"GET /a HTTP/1.1\r\n"), Step::Began);
        assert_eq!(tls.step(true, APP_DATA), Step::FoundSendOnly);
        assert!(!tls.parsed());
        assert_eq!(tls.step(false, b"GET /b HTTP/1.1\r\n"), Step::SetAside);
        assert_eq!(tls.step(true, b"HTTP/1.1 200 OK\r\n"), Step::SetAside);
    }

    #[test]
    fn a_client_offloaded_both_ways_reads_its_responses() {
        let mut tls = KernelTls::default();
        assert_eq!(tls.step(false, CLIENT_HELLO), Step::SetAside);
        assert_eq!(tls.step(false, b"POST /a HTTP/1.1\r\n"), Step::Began);
        assert_eq!(tls.step(true, b"HTTP/1.1 201 Created\r\n"), Step::Parse);
        assert_eq!(tls.step(true, APP_DATA), Step::Parse, "a body is not judged once reads were plaintext");
    }

    /// TLS 1.3 on OpenSSL 3.0: the request arrives as ciphertext, the response leaves in the
    /// clear.
    #[test]
    fn a_server_that_writes_plaintext_before_reading_any_is_not_parsed() {
        let mut tls = KernelTls::default();
        assert_eq!(tls.step(true, CLIENT_HELLO), Step::SetAside);
        assert_eq!(tls.step(true, APP_DATA), Step::SetAside);
        assert_eq!(tls.step(false, b"HTTP/1.1 200 OK\r\n"), Step::FoundSendOnly);
        assert_eq!(tls.step(true, b"GET / HTTP/1.1\r\n"), Step::SetAside);
        assert!(!tls.parsed());
    }

    #[test]
    fn ciphertext_never_opens_a_message() {
        let mut tls = KernelTls::default();
        for head in [APP_DATA, CLIENT_HELLO, FINISHED, b"GET", b"", b"HTTP/2 200", b"get / HTTP/1.1"] {
            assert_eq!(tls.step(true, head), Step::SetAside, "{head:?}");
            assert_eq!(tls.step(false, head), Step::SetAside, "{head:?}");
        }
        assert_eq!(tls.step(true, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Step::Began, "h2 over kTLS");
    }
}
