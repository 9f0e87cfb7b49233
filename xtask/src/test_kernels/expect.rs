//! What each kernel should give the daemon, from its version: the socket layer's tracepoints
//! (`sock_recv_length`, `sock_send_length`, `sk_data_ready`) came in 6.5. Older kernels take
//! socket bytes from TCP's own functions, whose HTTP/2 walks stop at 32 frames, and so do TLS
//! plaintext's there (the bounded return programs), and run without the socket queue wait. Those
//! degradations are accepted; any other is a failure.

/// The first kernel with the socket tracepoints.
const SOCKET_TRACEPOINTS_SINCE: (u32, u32) = (6, 5);

pub struct Expectation {
    /// How check and run's startup line name the source of socket bytes, up to its parenthesis.
    pub socket_source: &'static str,
    /// The hooks that may be missing, with why that is accepted.
    pub may_lack: &'static [(&'static str, &'static str)],
}

const SINCE_6_5: Expectation = Expectation { socket_source: "socket tracepoints", may_lack: &[] };
const BEFORE_6_5: Expectation = Expectation {
    socket_source: "TCP functions",
    may_lack: &[
        ("sk_data_ready", "sk_data_ready is a tracepoint from 6.5 on: no socket queue wait before"),
        (
            "TLS plaintext (uprobes)",
            "without the socket tracepoints, HTTP/2 walks stop at 32 frames, TLS plaintext's too",
        ),
        ("kernel TLS", "kernel TLS moves its plaintext above TCP's functions, the only socket hooks before 6.5"),
    ],
};

impl Expectation {
    /// From `uname -r` (`6.1.0-57-cloud-amd64`, `6.12.118+deb12-cloud-amd64`); an unreadable one
    /// is taken as recent.
    pub fn of(release: &str) -> &'static Self {
        let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().ok());
        match (numbers.next().flatten(), numbers.next().flatten()) {
            (Some(major), Some(minor)) if (major, minor) < SOCKET_TRACEPOINTS_SINCE => &BEFORE_6_5,
            _ => &SINCE_6_5,
        }
    }

    /// Why `hook` may be missing on this kernel, if it may.
    pub fn accepts_missing(&self, hook: &str) -> Option<&'static str> {
        self.may_lack.iter().find(|(name, _)| *name == hook).map(|(_, why)| *why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_before_6_5_use_tcp_functions_and_may_lack_sk_data_ready() {
        let old = Expectation::of("6.1.0-57-cloud-amd64");
        assert_eq!(old.socket_source, "TCP functions");
        assert!(old.accepts_missing("sk_data_ready").is_some());
        assert!(old.accepts_missing("TLS plaintext (uprobes)").is_some());
        assert!(old.accepts_missing("kernel TLS").is_some());
        for recent in ["6.12.118+deb12-cloud-amd64", "6.18.0-1-amd64", "6.5.0", "7.0"] {
            let recent = Expectation::of(recent);
            assert_eq!(recent.socket_source, "socket tracepoints");
            assert!(recent.accepts_missing("sk_data_ready").is_none());
            assert!(recent.accepts_missing("TLS plaintext (uprobes)").is_none());
            assert!(recent.accepts_missing("kernel TLS").is_none());
        }
    }
}
