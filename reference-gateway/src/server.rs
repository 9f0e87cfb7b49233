//! Client listeners: accept, enforce `max_connections`, run the TLS handshake on a TLS listener,
//! serve each connection with hyper (HTTP/1.1 and h2c prior knowledge on the same port; h2 over
//! TLS), and enforce the two timers hyper does not
//! keep the way a proxy needs them: the request-head read timeout (from the first byte of a head,
//! so slowloris is cut) and the idle keep-alive timeout. On shutdown every connection is asked to
//! finish its in-flight requests and close.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use crate::app::App;
use crate::conn_io::{ConnIo, ConnState};
use crate::tls::{Acceptor, Stream};

const TOO_MANY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 46\r\nconnection: close\r\n\r\n503 Service Unavailable: too many connections\n";

/// Binds a listener with a production-sized backlog and SO_REUSEADDR (fast restarts).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Serves `listener`, over TLS when `tls` is given.
pub async fn accept_loop(
    app: Arc<App>,
    listener: TcpListener,
    tls: Option<Arc<Acceptor>>,
    conns: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            break;
        }
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on the error.
                eprintln!("reference-gateway: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&conns).try_acquire_owned() else {
            app.metrics.connection_rejected();
            // On a TLS listener the client reads no plaintext 503; closing says as much.
            if tls.is_none() {
                tokio::spawn(reject(stream));
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (conn_app, conn_tls, conn_shutdown) = (Arc::clone(&app), tls.clone(), shutdown.clone());
        tokio::spawn(async move {
            let stream = match conn_tls {
                None => Stream::Plain(stream),
                Some(acceptor) => match handshake(&conn_app, &acceptor, stream).await {
                    Some(s) => s,
                    None => return,
                },
            };
            serve(conn_app, stream, peer, permit, conn_shutdown).await;
        });
    }
    // Dropping the listener here closes the port: new connections are refused while draining.
}

/// The server side of the TLS handshake, within the request-head timeout (a client that never
/// finishes it holds a connection slot as a slowloris would).
async fn handshake(app: &App, tls: &Acceptor, stream: TcpStream) -> Option<Stream> {
    match tokio::time::timeout(app.config.timeouts.client_header, tls.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        // Scanners and clients that distrust the certificate are routine: counted, not logged.
        Ok(Err(_)) | Err(_) => {
            app.metrics.tls_handshake_failed();
            None
        }
    }
}

async fn reject(mut stream: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(TOO_MANY).await?;
        stream.shutdown().await?;
        // Read what the client sent so closing does not turn into a reset that eats the 503.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

async fn serve(
    app: Arc<App>,
    stream: Stream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
    mut shutdown: watch::Receiver<bool>,
) {
    let state = Arc::new(ConnState::new(matches!(stream, Stream::Tls(_))));
    let io = TokioIo::new(ConnIo::new(stream, Arc::clone(&state)));
    let svc_app = Arc::clone(&app);
    let svc_state = Arc::clone(&state);
    let service = service_fn(move |req| {
        let app = Arc::clone(&svc_app);
        let state = Arc::clone(&svc_state);
        async move { Ok::<_, Infallible>(crate::proxy::handle(app, state, peer, req).await) }
    });

    let limits = &app.config.limits;
    let timeouts = &app.config.timeouts;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).keep_alive(true).max_buf_size(limits.max_header_bytes);
    // hyper's own head timer would also run while a keep-alive connection sits idle; ours below
    // starts at the first byte of a head, as nginx's client_header_timeout does.
    builder.http1().header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);

    app.metrics.connection_opened();
    let idle = timeouts.idle;
    let head_timeout = timeouts.client_header;
    let mut closing = *shutdown.borrow();
    if closing {
        conn.as_mut().graceful_shutdown();
    }
    let mut next_check = Instant::now() + idle.min(head_timeout);
    loop {
        tokio::select! {
            // Client resets and parse errors are routine for a proxy and hyper has already
            // answered what it could (400, 431), so the result is not logged.
            _ = conn.as_mut() => break,
            _ = shutdown.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(next_check), if !closing || state.head_started().is_some() => {
                let now = std::time::Instant::now();
                if let Some(started) = state.head_started() {
                    if now >= started + head_timeout {
                        // Slowloris: drop the connection without an answer, as nginx does.
                        break;
                    }
                    next_check = (started + head_timeout).into();
                    continue;
                }
                let idle_until = state.last_activity() + idle;
                if state.in_flight.load(Relaxed) == 0 && now >= idle_until {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                    // A head may still be arriving (a request raced the timer): its timer applies.
                    next_check = Instant::now() + head_timeout;
                } else {
                    let later = if state.in_flight.load(Relaxed) > 0 { now + idle } else { idle_until };
                    next_check = later.min(now + head_timeout).into();
                }
            }
        }
    }
    app.metrics.connection_closed();
}
