//! HTTP/1.x exchanges (and HTTP/2 cleartext streams, [`h2`]) reconstructed from what the kernel
//! saw of a gateway's socket syscalls: per syscall the byte count, the first bytes and the last
//! bytes ([`Segment`]), never the whole data. Bodies are skipped by count; messages whose framing was partly unseen end by fallbacks.
//!
//! Pure userspace and std only: nothing here touches a kernel handle, keeps a header value or a
//! body byte, or logs. [`parser`] frames one direction ([`head`] reads its header block), [`connection`] pairs the two ([`exchange`] the types they meet in), [`replay`]
//! encodes segment sequences as bytes (the fuzz target's input and its seed corpus).

pub mod connection;
pub mod exchange;
pub mod h2;
pub mod head;
pub mod parser;
pub mod redact;
pub mod replay;

pub use connection::Connection;
pub use exchange::{Direction, Exchange, ExchangeOutcome, InFlight, Method, Role, Segment};
