//! Alertmanager v2 API: the `POST /api/v2/alerts` body and a plain-HTTP client that sends it.
//!
//! Alertmanager has no pending state and forgets a firing alert `resolve_timeout` (default 5 min)
//! after it was last posted, so the caller posts every firing alert again on a period shorter
//! than that, and posts resolved alerts (with `endsAt`) at least once. One connection per push:
//! pushes are rare, and a fresh connection never inherits a half-dead one.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value};
use tokio::net::TcpStream;

use super::{Alert, AlertState, format_time};

/// Responses are only read for error messages (and by tests); a misdirected URL must not make
/// the daemon buffer an arbitrary page.
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// How much of a rejection's body goes into the error message.
const MAX_ERROR_BODY_CHARS: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The base URL is not `http://host[:port][/prefix]`.
    #[error("invalid Alertmanager URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: &'static str },
    /// The TCP connection could not be made.
    #[error("connecting to Alertmanager at {addr} failed: {source}")]
    Connect { addr: String, source: std::io::Error },
    /// The request could not be assembled from the URL.
    #[error("building the request to {url} failed: {source}")]
    Request { url: String, source: http::Error },
    /// The HTTP exchange failed after connecting.
    #[error("HTTP exchange with {url} failed: {source}")]
    Http { url: String, source: hyper::Error },
    /// The response body could not be read (or exceeded the size limit).
    #[error("reading the response of {url} failed: {source}")]
    Body { url: String, source: Box<dyn std::error::Error + Send + Sync> },
    /// Connecting, sending and reading together took longer than the timeout.
    #[error("{url} did not answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    /// Alertmanager answered with a non-2xx status.
    #[error("Alertmanager at {url} rejected the alerts: {status}: {body}")]
    Rejected { url: String, status: StatusCode, body: String },
}

/// The body of `POST /api/v2/alerts` for `alerts`: a JSON array of postable alerts with labels
/// `alertname` (the kind), `process`, `pid`, `subject`, `severity`; annotations `summary` and
/// `evidence` (compact JSON string); `startsAt`; `endsAt` for resolved alerts only. Pending
/// alerts are left out: Alertmanager would notify on them, and they have not fired.
pub fn v2_payload(alerts: &[&Alert]) -> Value {
    Value::Array(alerts.iter().filter(|a| a.state() != AlertState::Pending).map(|a| postable(a)).collect())
}

fn postable(alert: &Alert) -> Value {
    let mut labels = Map::new();
    labels.insert("alertname".into(), alert.kind().as_str().into());
    labels.insert("process".into(), alert.comm().into());
    // Alertmanager label values are strings.
    labels.insert("pid".into(), alert.pid().to_string().into());
    labels.insert("subject".into(), alert.subject().into());
    labels.insert("severity".into(), "critical".into());

    let mut annotations = Map::new();
    annotations.insert("summary".into(), alert.summary().into());
    annotations.insert("evidence".into(), alert.evidence().to_json().to_string().into());

    let mut postable = Map::new();
    postable.insert("labels".into(), Value::Object(labels));
    postable.insert("annotations".into(), Value::Object(annotations));
    postable.insert("startsAt".into(), format_time(alert.since()).into());
    if let Some(resolved_at) = alert.resolved_at() {
        postable.insert("endsAt".into(), format_time(resolved_at).into());
    }
    Value::Object(postable)
}

/// POSTs [`v2_payload`] of `alerts` to `{base_url}/api/v2/alerts` (base like
/// `http://127.0.0.1:9093`, optionally with a path prefix). `timeout` bounds connecting, sending
/// and reading together. Only plain `http://`: Alertmanager usually sits on loopback or a private
/// network next to the daemon.
pub async fn push(base_url: &str, alerts: &[&Alert], timeout: Duration) -> Result<(), PushError> {
    let target = Target::parse(base_url)?;
    let path = format!("{}/api/v2/alerts", target.prefix);
    let body = Bytes::from(v2_payload(alerts).to_string());
    let (status, response) = exchange(&target, Method::POST, &path, body, timeout).await?;
    if status.is_success() {
        Ok(())
    } else {
        let text = String::from_utf8_lossy(&response);
        Err(PushError::Rejected {
            url: target.url(&path),
            status,
            body: text.trim().chars().take(MAX_ERROR_BODY_CHARS).collect(),
        })
    }
}

/// Where `http://host[:port][/prefix]` points.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// Host as given, for the `Host` header and messages (`[::1]:9093`).
    authority: String,
    /// Host without IPv6 brackets, for connecting.
    host: String,
    port: u16,
    /// Path prefix without a trailing `/` (empty for none).
    prefix: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, PushError> {
        let invalid = |reason| PushError::InvalidUrl { url: url.to_owned(), reason };
        let uri: Uri = url.parse().map_err(|_| invalid("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return Err(invalid("only http:// is supported")),
            None => return Err(invalid("missing http://")),
        }
        let authority = uri.authority().ok_or_else(|| invalid("missing host"))?;
        if uri.query().is_some() {
            return Err(invalid("a query string has no meaning here"));
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        Ok(Self {
            authority: authority.as_str().to_owned(),
            host,
            port: authority.port_u16().unwrap_or(80),
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.authority, path)
    }
}

/// One request on a fresh HTTP/1 connection, all of it within `timeout`; returns the status and
/// at most [`MAX_RESPONSE_BYTES`] of body.
async fn exchange(
    target: &Target,
    method: Method,
    path: &str,
    body: Bytes,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), PushError> {
    let url = target.url(path);
    let work = async {
        let stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|source| PushError::Connect { addr: target.authority.clone(), source })?;
        let http_err = |source| PushError::Http { url: url.clone(), source };
        let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(http_err)?;
        // The connection task ends when `sender` is dropped; the guard also ends it when the
        // timeout cancels us mid-exchange. Its own error is not needed: a broken connection
        // fails `send_request` or the body read, which report it.
        let _conn = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &target.authority)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|source| PushError::Request { url: url.clone(), source })?;
        let response = sender.send_request(request).await.map_err(http_err)?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|source| PushError::Body { url: url.clone(), source })?
            .to_bytes();
        Ok((status, body))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(PushError::Timeout { url: url.clone(), timeout }),
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::{
        path::{Path, PathBuf},
        process::Stdio,
        time::{Instant, SystemTime},
    };

    use serde_json::json;

    use super::*;
    use crate::alerts::{
        Finding,
        lifecycle::{AlertBook, LifecycleConfig},
    };

    const T0_MS: u64 = 1_796_216_701_120; // 2026-12-02T13:05:01.120Z

    fn finding(subject: &str) -> Finding {
        Finding {
            pid: 1234,
            comm: "java".into(),
            subject: subject.into(),
            summary: "event loop blocked 71% of the last 5s in futex wait".into(),
            evidence: crate::detect::evidence_golden::blocked_evidence(Some("futex")),
            active: true,
            held_for: std::time::Duration::ZERO,
            stack_id: None,
        }
    }

    /// A book that fires at the first finding and resolves at the first absence.
    fn eager_book() -> AlertBook {
        AlertBook::new(LifecycleConfig {
            fire_after: Duration::ZERO,
            resolve_after: Duration::ZERO,
            keep_resolved: Duration::from_secs(600),
        })
    }

    #[test]
    fn payload_shape() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_millis(T0_MS);
        let mut book = AlertBook::new(LifecycleConfig::default());
        book.evaluate(t0, vec![finding("nio-1"), finding("nio-2")]);
        book.evaluate(t0 + Duration::from_secs(1), vec![finding("nio-1"), finding("nio-2")]);
        book.evaluate(t0 + Duration::from_secs(2), vec![finding("nio-1"), finding("nio-3")]);
        book.evaluate(t0 + Duration::from_secs(6), vec![finding("nio-1"), finding("nio-3")]);
        // nio-1 and nio-3 firing, nio-2 resolved at 6 s, nio-4 pending (left out of the payload).
        book.evaluate(t0 + Duration::from_secs(7), vec![finding("nio-1"), finding("nio-4")]);
        let alerts = book.alerts();
        assert_eq!(alerts.len(), 4, "{alerts:#?}");

        let payload = v2_payload(&alerts);
        let evidence = finding("nio-1").evidence.to_json().to_string();
        let expected = json!([
            {
                "labels": {"alertname": "EventLoopBlocked", "process": "java", "pid": "1234",
                           "subject": "nio-1", "severity": "critical"},
                "annotations": {"summary": "event loop blocked 71% of the last 5s in futex wait",
                                "evidence": evidence},
                "startsAt": "2026-12-02T13:05:01.120Z"
            },
            {
                "labels": {"alertname": "EventLoopBlocked", "process": "java", "pid": "1234",
                           "subject": "nio-3", "severity": "critical"},
                "annotations": {"summary": "event loop blocked 71% of the last 5s in futex wait",
                                "evidence": evidence},
                "startsAt": "2026-12-02T13:05:03.120Z"
            },
            {
                "labels": {"alertname": "EventLoopBlocked", "process": "java", "pid": "1234",
                           "subject": "nio-2", "severity": "critical"},
                "annotations": {"summary": "event loop blocked 71% of the last 5s in futex wait",
                                "evidence": evidence},
                "startsAt": "2026-12-02T13:05:01.120Z",
                "endsAt": "2026-12-02T13:05:07.120Z"
            }
        ]);
        assert_eq!(payload, expected, "got {payload:#}");
    }

    #[test]
    fn base_urls() {
        let t = Target::parse("http://127.0.0.1:9093").expect("parses");
        assert_eq!((t.host.as_str(), t.port, t.prefix.as_str()), ("127.0.0.1", 9093, ""));
        let t = Target::parse("http://[::1]:9093/am/").expect("parses");
        assert_eq!((t.host.as_str(), t.port, t.prefix.as_str()), ("::1", 9093, "/am"));
        assert_eq!(t.url("/am/api/v2/alerts"), "http://[::1]:9093/am/api/v2/alerts");
        let t = Target::parse("http://alertmanager").expect("parses");
        assert_eq!(t.port, 80);
        for bad in ["https://am:9093", "127.0.0.1:9093", "http://am:9093/?x=1", "not a url"] {
            assert!(matches!(Target::parse(bad), Err(PushError::InvalidUrl { .. })), "{bad} accepted");
        }
    }

    #[tokio::test]
    async fn push_to_a_closed_port_is_an_error() {
        let (_held, port) = closed_port();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_millis(T0_MS);
        let mut book = eager_book();
        book.evaluate(t0, vec![finding("nio-1")]);
        let result = push(&format!("http://127.0.0.1:{port}"), &book.alerts(), Duration::from_secs(2)).await;
        assert!(matches!(result, Err(PushError::Connect { .. })), "{result:?}");
    }

    /// A port bound but never listened on: connects are refused, and no other process can
    /// take the port (and accept) while the socket is held.
    fn closed_port() -> (socket2::Socket, u16) {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any_port: std::net::SocketAddr = "127.0.0.1:0".parse().expect("address");
        socket.bind(&any_port.into()).expect("bind 127.0.0.1:0");
        let port = socket.local_addr().expect("local addr").as_socket().expect("inet").port();
        (socket, port)
    }

    /// A port free at the time of asking. Another process could take it before Alertmanager
    /// binds; Alertmanager then exits and the readiness wait says so with its log.
    fn free_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.local_addr().expect("local addr").port()
    }

    /// A directory under the system temp dir, removed on drop (also when the test panics).
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(what: &str) -> Self {
            let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("clock after 1970").as_nanos();
            let dir = std::env::temp_dir().join(format!("gateway-observer-{what}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create temp dir");
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    async fn get(base: &str, path: &str) -> Result<(StatusCode, Bytes), PushError> {
        let target = Target::parse(base)?;
        exchange(&target, Method::GET, path, Bytes::new(), Duration::from_secs(2)).await
    }

    fn log_of(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("alertmanager.log")).unwrap_or_default()
    }

    /// Alertmanager's alerts whose `subject` label is `subject`.
    async fn alerts_with_subject(base: &str, subject: &str) -> Vec<Value> {
        let (status, body) = get(base, "/api/v2/alerts").await.expect("GET /api/v2/alerts");
        assert_eq!(status, StatusCode::OK, "GET /api/v2/alerts: {}", String::from_utf8_lossy(&body));
        let all: Vec<Value> = serde_json::from_slice(&body).expect("alerts JSON array");
        all.into_iter().filter(|a| a["labels"]["subject"] == subject).collect()
    }

    #[tokio::test]
    async fn push_reaches_a_real_alertmanager() {
        let bin = Path::new("/usr/bin/prometheus-alertmanager");
        if !bin.exists() {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{} is missing (apt-get install prometheus-alertmanager)", bin.display());
            }
            println!(
                "SKIPPED push_reaches_a_real_alertmanager: {} is missing \
                 (apt-get install prometheus-alertmanager)",
                bin.display()
            );
            return;
        }

        let dir = TempDir::new("alertmanager");
        let config = dir.0.join("alertmanager.yml");
        std::fs::write(&config, "route:\n  receiver: none\nreceivers:\n  - name: none\n").expect("write config");
        let log = std::fs::File::create(dir.0.join("alertmanager.log")).expect("create log");
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let mut child = tokio::process::Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.0.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // Empty disables clustering: no gossip port, no peers, ready at once.
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn prometheus-alertmanager");

        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok((StatusCode::OK, _)) = get(&base, "/-/ready").await {
                break;
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!("alertmanager exited with {status} before ready:\n{}", log_of(&dir.0));
            }
            assert!(Instant::now() < deadline, "alertmanager not ready on {base} after 20 s:\n{}", log_of(&dir.0));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let subject = format!("reactor-http-nio-{}", std::process::id());
        let mut book = eager_book();
        let started = SystemTime::now();
        book.evaluate(started, vec![finding(&subject)]);
        assert_eq!(book.alerts()[0].state(), AlertState::Firing);
        push(&base, &book.alerts(), Duration::from_secs(5)).await.expect("push firing alert");

        let found = alerts_with_subject(&base, &subject).await;
        assert_eq!(found.len(), 1, "pushed one firing alert, Alertmanager lists {found:#?}");
        let alert = &found[0];
        assert_eq!(
            alert["labels"],
            json!({"alertname": "EventLoopBlocked", "process": "java", "pid": "1234",
                   "subject": subject, "severity": "critical"}),
            "{alert:#}"
        );
        let evidence = finding(&subject).evidence.to_json().to_string();
        assert_eq!(alert["annotations"]["evidence"], evidence, "{alert:#}");
        assert_eq!(alert["status"]["state"], "active", "{alert:#}");

        // Resolved: endsAt in the past, so Alertmanager stops listing it.
        let resolved_at = SystemTime::now().max(started + Duration::from_millis(1));
        book.evaluate(resolved_at, vec![]);
        assert_eq!(book.alerts()[0].state(), AlertState::Resolved);
        push(&base, &book.alerts(), Duration::from_secs(5)).await.expect("push resolved alert");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let found = alerts_with_subject(&base, &subject).await;
            if found.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "resolved alert still listed: {found:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        child.kill().await.expect("kill alertmanager");
    }
}
