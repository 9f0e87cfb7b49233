//! TLS through the system's OpenSSL (`libssl.so.3`, dynamically linked, as most gateways
//! terminate TLS): the listeners' acceptor (certificate chain and key from PEM files, ALPN `h2`
//! and `http/1.1`), the upstreams' connector (the system's CAs plus a given file, the server's
//! name or IP checked, or no check at all for self-signed test upstreams), and `Stream`, a socket
//! that is plain or TLS, so that the proxy handles both alike.
//!
//! Owns no sockets of its own and knows nothing of HTTP.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use openssl::error::ErrorStack;
use openssl::ssl::{
    self, AlpnError, Ssl, SslAcceptor, SslConnector, SslFiletype, SslMethod, SslVerifyMode, select_next_proto,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

/// ALPN protocols the listeners offer, in wire format: HTTP/2 first (hyper's auto builder serves
/// either on one port), then HTTP/1.1.
const SERVER_ALPN: &[u8] = b"\x02h2\x08http/1.1";
/// The upstreams are spoken to in HTTP/1.1 only.
const UPSTREAM_ALPN: &[u8] = b"\x08http/1.1";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{what} {}: {source}", path.display())]
    File { what: &'static str, path: PathBuf, source: ErrorStack },
    #[error("{what}: {source}")]
    Setup { what: &'static str, source: ErrorStack },
}

fn setup(what: &'static str) -> impl FnOnce(ErrorStack) -> TlsError {
    move |source| TlsError::Setup { what, source }
}

fn file(what: &'static str, path: &Path) -> impl FnOnce(ErrorStack) -> TlsError {
    let path = path.to_owned();
    move |source| TlsError::File { what, path, source }
}

/// Server-side TLS for the listeners in `server.tls_listen`.
pub struct Acceptor(SslAcceptor);

impl Acceptor {
    /// Mozilla's "intermediate" settings (TLS 1.2 and 1.3), the chain and key from PEM files,
    /// checked to belong together now rather than at the first handshake.
    pub fn from_files(certificate: &Path, key: &Path) -> Result<Self, TlsError> {
        let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).map_err(setup("TLS listener"))?;
        b.set_certificate_chain_file(certificate).map_err(file("server.tls_certificate", certificate))?;
        b.set_private_key_file(key, SslFiletype::PEM).map_err(file("server.tls_key", key))?;
        b.check_private_key().map_err(file("server.tls_key does not match the certificate", key))?;
        b.set_alpn_select_callback(|_, client| select_next_proto(SERVER_ALPN, client).ok_or(AlpnError::NOACK));
        Ok(Self(b.build()))
    }

    /// The server side of a handshake on an accepted connection.
    pub async fn accept(&self, tcp: TcpStream) -> Result<Stream, ssl::Error> {
        let mut stream = Box::pin(SslStream::new(Ssl::new(self.0.context())?, tcp)?);
        stream.as_mut().accept().await?;
        Ok(Stream::Tls(stream))
    }
}

/// Client-side TLS for one upstream pool.
pub struct Connector {
    inner: SslConnector,
    /// SNI and the name checked; `None`: the server's IP address is checked, no SNI is sent.
    server_name: Option<String>,
    verify: bool,
}

impl Connector {
    /// `ca`: PEM certificates trusted besides the system's; `verify = false` checks nothing
    /// (a self-signed test upstream; never across a network one does not control).
    pub fn new(ca: Option<&Path>, server_name: Option<String>, verify: bool) -> Result<Self, TlsError> {
        let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(setup("upstream TLS"))?;
        if let Some(ca) = ca {
            b.set_ca_file(ca).map_err(file("tls_ca", ca))?;
        }
        if !verify {
            b.set_verify(SslVerifyMode::NONE);
        }
        b.set_alpn_protos(UPSTREAM_ALPN).map_err(setup("upstream ALPN"))?;
        Ok(Self { inner: b.build(), server_name, verify })
    }

    /// The client side of a handshake with `addr` on a connected socket.
    pub async fn connect(&self, addr: SocketAddr, tcp: TcpStream) -> Result<Stream, ssl::Error> {
        let ip;
        let name = match &self.server_name {
            Some(name) => name.as_str(),
            None => {
                ip = addr.ip().to_string();
                ip.as_str()
            }
        };
        let ssl = self.inner.configure()?.verify_hostname(self.verify).into_ssl(name)?;
        let mut stream = Box::pin(SslStream::new(ssl, tcp)?);
        stream.as_mut().connect().await?;
        Ok(Stream::Tls(stream))
    }
}

/// A connection's socket, plain or inside a TLS session.
pub enum Stream {
    Plain(TcpStream),
    Tls(Pin<Box<SslStream<TcpStream>>>),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => s.as_mut().poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => s.as_mut().poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => s.as_mut().poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => s.as_mut().poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => s.as_mut().poll_shutdown(cx),
        }
    }
}
