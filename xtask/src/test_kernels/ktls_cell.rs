//! The kernel TLS cells: HTTPS requests whose sessions the kernel encrypts and decrypts, counted
//! by a daemon that hooks no TLS library, against what the client sent and got answered: to
//! `kt-ktlsd` (OpenSSL's `s_server`), and through nginx, which proxies them to `kt-httpd` (counted
//! inbound and outbound). `/proc/net/tls_stat` must show the kernel took every session over both
//! ways, or the cells say nothing about kernel TLS. Then to `kt-ktls13` over TLS 1.3, whose
//! receiving OpenSSL 3.0 does not offload: one direction only in the clear, none of it may be
//! counted, each connection set aside as send-only. Before 6.5 the socket bytes come from TCP's
//! own functions, which kernel TLS calls beneath the plaintext: its requests are not seen there
//! (accepted).

use super::{
    expect::Expectation,
    matrix::{Cell, Verdict},
    results::KtlsRun,
};

const REQUESTS: &str = "gateway_observer_http_requests_total";
const KERNEL_TLS: &str = "gateway_observer_kernel_tls_connections_total";

pub fn judge(run: &KtlsRun, expectation: &Expectation) -> Vec<(&'static str, Cell)> {
    if !run.began {
        return vec![("kernel TLS requests", Cell::failed("never started"))];
    }
    let sessions = run.sent.unwrap_or(0) + run.nginx_sent.unwrap_or(0);
    let server = Server { process: "kt-ktlsd", sent: run.sent, answered: run.answered, proxied: false };
    let nginx = Server { process: "nginx", sent: run.nginx_sent, answered: run.nginx_answered, proxied: true };
    vec![
        ("kernel TLS requests", server.judge(run, sessions, expectation)),
        ("kernel TLS via nginx", nginx.judge(run, sessions, expectation)),
        ("kernel TLS, send only", send_only(run, expectation)),
    ]
}

/// `/proc/net/tls_stat` before the TLS 1.3 requests (after all of them when they did not run).
fn stat_before_tls13(run: &KtlsRun) -> &std::collections::BTreeMap<String, u64> {
    if run.stat_before_tls13.is_empty() { &run.stat } else { &run.stat_before_tls13 }
}

/// The TLS 1.3 server, whose sending alone the kernel takes over: none of its requests counted,
/// each connection set aside as send-only. Where the library offloads both ways it is judged as
/// any kernel TLS server.
fn send_only(run: &KtlsRun, expectation: &Expectation) -> Cell {
    let (Some(sent), Some(answered)) = (run.tls13_sent, run.tls13_answered) else {
        return Cell::failed("no client report").with_detail(run.notes.join("; "));
    };
    let before = stat_before_tls13(run);
    let delta =
        |name: &str| run.stat.get(name).copied().unwrap_or(0).saturating_sub(before.get(name).copied().unwrap_or(0));
    let (tx, rx) = (delta("TlsTxSw"), delta("TlsRxSw"));
    let counted = run.sum(REQUESTS, &[("process", "kt-ktls13"), ("direction", "inbound")]);
    let set_aside = run.sum(KERNEL_TLS, &[("offload", "send_only")]);
    let detail = format!("the kernel took over {tx} sessions' sending, {rx} receiving, of {sent}");
    if answered != sent {
        return Cell::failed(format!("answered {answered} of {sent}")).with_detail(detail);
    }
    if tx < sent {
        return Cell::failed(format!("sending not offloaded ({tx} of {sent})")).with_detail(detail);
    }
    let text = format!("{set_aside} set aside, {counted} counted of {sent}");
    let ok = if rx >= sent { counted == sent as f64 } else { counted == 0.0 && set_aside >= sent as f64 };
    if ok {
        return Cell::ok(text).with_detail(detail);
    }
    match expectation.accepts_missing("kernel TLS") {
        Some(why) if counted == 0.0 => Cell { accepted: Some(why.to_owned()), ..Cell::new(Verdict::Degraded, text) },
        _ => Cell::failed(text).with_detail(detail),
    }
}

struct Server {
    process: &'static str,
    sent: Option<u64>,
    answered: Option<u64>,
    /// Its requests go on upstream, where they are counted too.
    proxied: bool,
}

impl Server {
    fn judge(&self, run: &KtlsRun, sessions: u64, expectation: &Expectation) -> Cell {
        let notes = run.notes.join("; ");
        let (Some(sent), Some(answered)) = (self.sent, self.answered) else {
            return Cell::failed("no client report").with_detail(notes);
        };
        let stat = stat_before_tls13(run);
        let taken_over = |name: &str| stat.get(name).copied().unwrap_or(0);
        let (tx, rx) = (taken_over("TlsTxSw"), taken_over("TlsRxSw"));
        let counted = |direction: &str| run.sum(REQUESTS, &[("process", self.process), ("direction", direction)]);
        let (inbound, outbound) = (counted("inbound"), counted("outbound"));
        let text = if self.proxied {
            format!("{inbound} in, {outbound} out of {sent}")
        } else {
            format!("{inbound} of {sent}")
        };
        let detail = format!("the kernel took over {tx} sessions' sending, {rx} receiving, of {sessions}; {notes}");
        if answered != sent {
            return Cell::failed(text).with_detail(format!("answered {answered} of {sent}; {detail}"));
        }
        if tx < sessions || rx < sessions {
            return Cell::failed(format!("kTLS not used ({tx} tx, {rx} rx of {sessions})")).with_detail(detail);
        }
        let all_counted = inbound == sent as f64 && (!self.proxied || outbound == sent as f64);
        if all_counted {
            return Cell::ok(text);
        }
        match expectation.accepts_missing("kernel TLS") {
            Some(why) => Cell { accepted: Some(why.to_owned()), ..Cell::new(Verdict::Degraded, text) },
            None => Cell::failed(text).with_detail(detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::results;
    use super::*;

    const RECENT: &str = "6.12.118+deb12-cloud-amd64";
    const OLD: &str = "6.1.0-57-cloud-amd64";

    fn cells(console: &str, release: &str) -> Vec<(&'static str, Cell)> {
        judge(&results::parse(console).ktls, Expectation::of(release))
    }

    const SEEN: &str = "@@KT ktls-begin\n@@KT ktls-sent 10\n@@KT ktls-answered 10\n\
        @@KT ktls-nginx-sent 10\n@@KT ktls-nginx-answered 10\n\
        @@KT ktls-metric gateway_observer_http_requests_total{process=\"kt-ktlsd\",direction=\"inbound\",method=\"GET\",status_class=\"2xx\"} 10\n\
        @@KT ktls-metric gateway_observer_http_requests_total{process=\"nginx\",direction=\"inbound\",method=\"GET\",status_class=\"2xx\"} 10\n\
        @@KT ktls-metric gateway_observer_http_requests_total{process=\"nginx\",direction=\"outbound\",method=\"GET\",status_class=\"2xx\"} 10\n\
        @@KT ktls-stat-before-13 TlsTxSw 20 TlsRxSw 20\n@@KT ktls-13-sent 10\n@@KT ktls-13-answered 10\n\
        @@KT ktls-metric gateway_observer_kernel_tls_connections_total{offload=\"send_only\"} 10\n\
        @@KT ktls-stat TlsTxSw 30 TlsRxSw 20\n@@KT ktls-end\n";

    fn verdicts(cells: &[(&str, Cell)]) -> Vec<(Verdict, String)> {
        cells.iter().map(|(_, c)| (c.verdict, c.text.clone())).collect()
    }

    #[test]
    fn every_request_counted_over_kernel_tls_is_ok() {
        assert_eq!(
            verdicts(&cells(SEEN, RECENT)),
            [
                (Verdict::Ok, "10 of 10".into()),
                (Verdict::Ok, "10 in, 10 out of 10".into()),
                (Verdict::Ok, "10 set aside, 0 counted of 10".into())
            ]
        );
    }

    #[test]
    fn a_request_missed_fails_on_recent_kernels_and_is_accepted_before_6_5() {
        let missed = SEEN.replace("\"inbound\",method=\"GET\",status_class=\"2xx\"} 10", "\"inbound\"} 9");
        for (_, cell) in cells(&missed, RECENT).into_iter().take(2) {
            assert!(cell.unexpected_failure(), "{cell:?}");
        }
        for (_, cell) in cells(&missed, OLD).into_iter().take(2) {
            assert_eq!(cell.verdict, Verdict::Degraded);
            assert!(!cell.unexpected_failure(), "{cell:?}");
        }
        let upstream_missed = SEEN.replace("\"outbound\",method=\"GET\",status_class=\"2xx\"} 10", "\"outbound\"} 0");
        assert_eq!(verdicts(&cells(&upstream_missed, RECENT))[1].0, Verdict::Failed);
    }

    #[test]
    fn sessions_the_kernel_did_not_take_over_say_nothing_of_kernel_tls() {
        let half = cells(&SEEN.replace("TlsTxSw 20 TlsRxSw 20", "TlsTxSw 20 TlsRxSw 10"), RECENT);
        assert!(half[..2].iter().all(|(_, c)| c.verdict == Verdict::Failed && c.text.starts_with("kTLS not used")));
        let not_offloaded = cells(&SEEN.replace("TlsTxSw 30", "TlsTxSw 20"), RECENT);
        assert!(not_offloaded[2].1.text.starts_with("sending not offloaded"), "{:?}", not_offloaded[2].1);
        let unanswered = cells(&SEEN.replace("ktls-nginx-answered 10", "ktls-nginx-answered 8"), OLD);
        assert_eq!(verdicts(&unanswered)[1].0, Verdict::Failed);
        assert_eq!(verdicts(&cells("", RECENT)), [(Verdict::Failed, "never started".into())]);
    }

    #[test]
    fn one_direction_parsed_or_left_counted_fails() {
        let parsed = SEEN.replace(
            "@@KT ktls-stat TlsTxSw 30",
            "@@KT ktls-metric gateway_observer_http_requests_total{process=\"kt-ktls13\",direction=\"inbound\"} 3\n@@KT ktls-stat TlsTxSw 30",
        );
        assert_eq!(verdicts(&cells(&parsed, RECENT))[2].0, Verdict::Failed);
        assert_eq!(
            verdicts(&cells(&parsed, OLD))[2].0,
            Verdict::Failed,
            "never accepted: a miscount, not a blind spot"
        );
        let unseen = SEEN.replace("{offload=\"send_only\"} 10", "{offload=\"send_only\"} 0");
        assert_eq!(verdicts(&cells(&unseen, RECENT))[2].0, Verdict::Failed);
        assert_eq!(verdicts(&cells(&unseen, OLD))[2].0, Verdict::Degraded);
    }
}
