//! HTTP/2 over cleartext (h2c): frames walked from the same head/tail views of each syscall the
//! HTTP/1.x parser gets, header blocks decoded for the pseudo-headers, streams made requests.
//!
//! [`frames`] walks one direction, [`hpack`] decodes header blocks ([`huffman`] its strings),
//! [`session`] turns streams into [`crate::Exchange`]s, [`flow`] follows flow-control windows.
//! Nothing here keeps a header value other than method, path and status codes, and nothing logs.

pub mod flow;
pub mod frames;
pub mod hpack;
mod huffman;
mod huffman_table;
pub mod session;
pub mod walked;

pub use flow::Stalls;
pub use session::{PREFACE, Session, Signals};
pub use walked::Walked;

#[cfg(test)]
mod fixtures;
