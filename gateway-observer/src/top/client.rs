//! A minimal blocking HTTP/1.1 client for the daemon's local API: one `GET` per connection
//! (`Connection: close`), loopback in practice, so no TLS, no redirects, no pooling. It owns no
//! terminal state and never prints: `top` shows its errors in the header.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream, ToSocketAddrs as _},
    time::Duration,
};

use super::model::Data;

/// Bodies larger than this are refused (a snapshot is a few tens of kB).
const MAX_BODY: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `--connect` is not `http://host:port[/prefix]`.
    #[error("bad URL {url:?}: {why}")]
    BadUrl { url: String, why: &'static str },
    /// The host name did not resolve.
    #[error("cannot resolve {authority}: {source}")]
    Resolve { authority: String, source: std::io::Error },
    /// No address accepted a connection.
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: std::io::Error },
    /// The exchange broke off (reset, timeout).
    #[error("GET {path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The response is not HTTP/1.x as we know it.
    #[error("GET {path}: malformed response: {why}")]
    Malformed { path: String, why: &'static str },
    /// A status other than 200.
    #[error("GET {path}: HTTP {status}")]
    Status { path: String, status: u16 },
    /// The body is not the JSON we expect.
    #[error("GET {path}: bad JSON: {source}")]
    Json { path: String, source: serde_json::Error },
}

/// Where the daemon listens, from `--connect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, as given (sent as the Host header).
    pub authority: String,
    /// Path prefix without a trailing slash (usually empty).
    pub prefix: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, ClientError> {
        let bad = |why| ClientError::BadUrl { url: url.to_owned(), why };
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(_) => return Err(bad("only http:// is supported")),
            None => url,
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']')) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint { authority, prefix: prefix.to_owned() })
    }

    /// The body of `GET {prefix}{path}`, which must answer 200.
    pub fn get(&self, path: &str, timeout: Duration) -> Result<String, ClientError> {
        let full = format!("{}{path}", self.prefix);
        let addrs: Vec<SocketAddr> = self
            .authority
            .to_socket_addrs()
            .map_err(|source| ClientError::Resolve { authority: self.authority.clone(), source })?
            .collect();
        let mut last = None;
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(source) => last = Some(ClientError::Connect { addr, source }),
            }
        }
        let Some(mut stream) = stream else {
            return Err(last.unwrap_or(ClientError::Malformed { path: full, why: "host has no address" }));
        };
        let io = |source| ClientError::Io { path: full.clone(), source };
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let request = format!(
            "GET {full} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\nUser-Agent: gateway-observer-top\r\n\r\n",
            self.authority
        );
        stream.write_all(request.as_bytes()).map_err(io)?;
        let mut raw = Vec::new();
        stream.take(MAX_BODY as u64).read_to_end(&mut raw).map_err(io)?;
        let (status, body) = parse_response(&raw).map_err(|why| ClientError::Malformed { path: full.clone(), why })?;
        if status != 200 {
            return Err(ClientError::Status { path: full, status });
        }
        Ok(body)
    }

    /// `/api/v1/snapshot` and `/api/v1/alerts`, raw.
    pub fn fetch_raw(&self, timeout: Duration) -> Result<(serde_json::Value, serde_json::Value), ClientError> {
        let json = |path: &str| -> Result<serde_json::Value, ClientError> {
            let body = self.get(path, timeout)?;
            serde_json::from_str(&body).map_err(|source| ClientError::Json { path: path.to_owned(), source })
        };
        Ok((json("/api/v1/snapshot")?, json("/api/v1/alerts")?))
    }

    /// `/api/v1/snapshot` and `/api/v1/alerts`, typed.
    pub fn fetch(&self, timeout: Duration) -> Result<Data, ClientError> {
        let (snapshot, alerts) = self.fetch_raw(timeout)?;
        Data::from_json(snapshot, alerts).map_err(|(path, source)| ClientError::Json { path: path.to_owned(), source })
    }
}

/// Status and body of a complete HTTP/1.x response (Content-Length, chunked, or close-delimited).
/// Public for the fuzz target (`gateway-observer/fuzz`, `top_response`): whatever listens where
/// `--connect` points writes these bytes.
pub fn parse_response(raw: &[u8]) -> Result<(u16, String), &'static str> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("no status line")?;
    let mut parts = status_line.split(' ');
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err("not HTTP/1.x");
    }
    let status: u16 = parts.next().and_then(|s| s.parse().ok()).ok_or("bad status code")?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| "bad Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") && value.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        }
    }
    let rest = &raw[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = length {
        rest.get(..n).ok_or("body shorter than Content-Length")?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok((status, String::from_utf8(body).map_err(|_| "body is not UTF-8")?))
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut body = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or("truncated chunk size")?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(rest.get(..size).ok_or("truncated chunk")?);
        rest = rest.get(size + 2..).ok_or("truncated chunk")?;
    }
}

#[cfg(test)]
mod tests {
    use std::{io::BufRead as _, net::TcpListener, thread};

    use super::*;

    #[test]
    fn urls_parse() {
        let e = Endpoint::parse("http://127.0.0.1:9464").expect("parses");
        assert_eq!((e.authority.as_str(), e.prefix.as_str()), ("127.0.0.1:9464", ""));
        let e = Endpoint::parse("localhost:1/obs/").expect("parses");
        assert_eq!((e.authority.as_str(), e.prefix.as_str()), ("localhost:1", "/obs"));
        assert_eq!(Endpoint::parse("http://[::1]").expect("parses").authority, "[::1]:80");
        assert!(matches!(Endpoint::parse("https://x:1"), Err(ClientError::BadUrl { .. })));
        assert!(matches!(Endpoint::parse("http:///x"), Err(ClientError::BadUrl { .. })));
    }

    #[test]
    fn responses_parse() {
        assert_eq!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}junk"), Ok((200, "{}".into())));
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{\"\r\n3\r\na\":\r\n0\r\n\r\n"),
            Ok((200, "{\"a\":".into()))
        );
        assert_eq!(parse_response(b"HTTP/1.0 503 x\r\n\r\nbusy"), Ok((503, "busy".into())));
        assert!(parse_response(b"SSH-2.0\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}").is_err());
    }

    /// A one-shot server answering each connection with the body for its path.
    fn serve(answers: Vec<(&'static str, &'static str)>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        thread::spawn(move || {
            for stream in listener.incoming().take(answers.len()) {
                let mut stream = stream.expect("accept");
                let mut line = String::new();
                std::io::BufReader::new(&stream).read_line(&mut line).expect("request line");
                let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                let body = answers.iter().find(|(p, _)| *p == path).map_or("", |(_, b)| b);
                let status = if body.is_empty() { "404 Not Found" } else { "200 OK" };
                let _ = write!(stream, "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}", body.len());
            }
        });
        port
    }

    #[test]
    fn fetches_both_endpoints() {
        let port = serve(vec![
            ("/api/v1/snapshot", r#"{"version":1,"processes":[{"pid":3,"comm":"nginx"}]}"#),
            ("/api/v1/alerts", r#"{"alerts":[{"kind":"EventLoopBlocked","subject":"w-1"}]}"#),
        ]);
        let data = Endpoint::parse(&format!("http://127.0.0.1:{port}"))
            .expect("url")
            .fetch(Duration::from_secs(5))
            .expect("fetch");
        assert_eq!(data.snapshot.processes[0].comm, "nginx");
        assert_eq!(data.alerts[0].subject, "w-1");
    }

    #[test]
    fn a_daemon_that_is_down_is_a_connect_error() {
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let err = Endpoint::parse(&format!("127.0.0.1:{port}"))
            .expect("url")
            .fetch(Duration::from_secs(2))
            .expect_err("down");
        assert!(matches!(err, ClientError::Connect { .. }), "{err}");
        assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
    }

    #[test]
    fn a_non_200_is_named() {
        let port = serve(vec![("/api/v1/snapshot", "")]);
        let err =
            Endpoint::parse(&format!("127.0.0.1:{port}")).expect("url").fetch(Duration::from_secs(2)).expect_err("404");
        assert_eq!(err.to_string(), "GET /api/v1/snapshot: HTTP 404");
    }
}
