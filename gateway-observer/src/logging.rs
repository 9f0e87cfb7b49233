//! The daemon's log: `tracing` events to stderr, filtered by `RUST_LOG` (default `info`), either
//! as text lines, `gateway-observer: message key=value` (a terminal, journald, the tests that read
//! the daemon's startup lines), or as one JSON object a line with its time, level and fields (log
//! shippers, Kubernetes). Writing never panics: a closed stderr loses the line, not the daemon.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::{
    EnvFilter,
    fmt::{FmtContext, FormatEvent, FormatFields, format::Writer},
    registry::LookupSpan,
};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `gateway-observer: message key=value`, one event a line.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `message` and the event's fields.
    Json,
}

/// The filter when `RUST_LOG` is unset or unreadable: the daemon's own events at `info`.
const DEFAULT_FILTER: &str = "info";

/// Installs the global subscriber. An invalid `RUST_LOG` is reported once and the default used:
/// a typo in an environment variable must not keep the daemon from starting.
pub fn init(format: LogFormat) {
    let (filter, bad) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(err) if std::env::var_os(EnvFilter::DEFAULT_ENV).is_some() => {
            (EnvFilter::new(DEFAULT_FILTER), Some(err.to_string()))
        }
        Err(_) => (EnvFilter::new(DEFAULT_FILTER), None),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.event_format(Plain).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).with_span_list(false).try_init(),
    };
    if installed.is_err() {
        return; // a subscriber is already set (tests): keep it
    }
    if let Some(err) = bad {
        tracing::warn!(error = %err, "RUST_LOG ignored, logging at {DEFAULT_FILTER}");
    }
}

/// `gateway-observer: ` and the event's message and fields, as the daemon always wrote them.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        write!(writer, "gateway-observer: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// An error with each of its sources, for a log line or `check` (the sources hold the errno).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        // Errors that print their source in their own message would say it twice.
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf-8")
        }
    }

    #[test]
    fn text_lines_keep_the_daemons_prefix_and_put_fields_after_the_message() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt().event_format(Plain).with_writer(out.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("socket bytes from socket tracepoints");
            tracing::warn!(pid = 42, "cannot follow pid yet");
        });
        assert_eq!(
            out.text(),
            "gateway-observer: socket bytes from socket tracepoints\ngateway-observer: cannot follow pid yet pid=42\n"
        );
    }

    #[test]
    fn json_lines_carry_level_message_and_fields() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_writer(out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::warn!(pid = 42, "cannot follow pid yet"));
        let line: serde_json::Value = serde_json::from_str(out.text().trim()).expect("one JSON object");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["message"], "cannot follow pid yet");
        assert_eq!(line["pid"], 42);
        assert!(line["timestamp"].is_string(), "{line}");
    }
}
