//! The kernel TLS cell: HTTPS requests to `kt-ktlsd`, whose sessions the kernel encrypts and
//! decrypts, counted by a daemon that hooks no TLS library, against what the client sent and got
//! answered. `/proc/net/tls_stat` must show the kernel took the sessions over both ways, or the
//! cell says nothing about kernel TLS. Before 6.5 the socket bytes come from TCP's own functions,
//! which kernel TLS calls beneath the plaintext: its requests are not seen there (accepted).

use super::{
    expect::Expectation,
    matrix::{Cell, Verdict},
    results::KtlsRun,
};

const REQUESTS: &str = "gateway_observer_http_requests_total";

pub fn judge(run: &KtlsRun, expectation: &Expectation) -> Cell {
    if !run.began {
        return Cell::failed("never started");
    }
    let notes = run.notes.join("; ");
    let (Some(sent), Some(answered)) = (run.sent, run.answered) else {
        return Cell::failed("no client report").with_detail(notes);
    };
    let taken_over = |name: &str| run.stat.get(name).copied().unwrap_or(0);
    let (tx, rx) = (taken_over("TlsTxSw"), taken_over("TlsRxSw"));
    let counted = run.sum(REQUESTS, &[("process", "kt-ktlsd"), ("direction", "inbound")]);
    let text = format!("{counted} of {sent}");
    let detail = format!("kernel took over {tx} sessions' sending, {rx} receiving; {notes}");
    if answered != sent {
        return Cell::failed(text).with_detail(format!("the server answered {answered} of {sent}; {detail}"));
    }
    if tx < sent || rx < sent {
        return Cell::failed(format!("kTLS not used ({tx} tx, {rx} rx)")).with_detail(detail);
    }
    if counted == sent as f64 {
        return Cell::ok(text).with_detail(detail);
    }
    match expectation.accepts_missing("kernel TLS") {
        Some(why) => Cell { accepted: Some(why.to_owned()), ..Cell::new(Verdict::Degraded, text) },
        None => Cell::failed(text).with_detail(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::super::results;
    use super::*;

    const RECENT: &str = "6.12.118+deb12-cloud-amd64";
    const OLD: &str = "6.1.0-57-cloud-amd64";

    fn ktls(console: &str) -> KtlsRun {
        results::parse(console).ktls
    }

    const SEEN: &str = "@@KT ktls-begin\n@@KT ktls-sent 10\n@@KT ktls-answered 10\n\
        @@KT ktls-metric gateway_observer_http_requests_total{process=\"kt-ktlsd\",direction=\"inbound\",method=\"GET\",status_class=\"2xx\"} 10\n\
        @@KT ktls-stat TlsTxSw 10 TlsRxSw 10\n@@KT ktls-end\n";

    #[test]
    fn every_request_counted_over_kernel_tls_is_ok() {
        let cell = judge(&ktls(SEEN), Expectation::of(RECENT));
        assert_eq!((cell.verdict, cell.text.as_str()), (Verdict::Ok, "10 of 10"));
    }

    #[test]
    fn a_request_missed_fails_on_recent_kernels_and_is_accepted_before_6_5() {
        let missed = SEEN.replace("} 10\n", "} 9\n");
        let recent = judge(&ktls(&missed), Expectation::of(RECENT));
        assert!(recent.unexpected_failure(), "{recent:?}");
        let old = judge(&ktls(&missed), Expectation::of(OLD));
        assert_eq!(old.verdict, Verdict::Degraded);
        assert!(!old.unexpected_failure(), "{old:?}");
    }

    #[test]
    fn sessions_the_kernel_did_not_take_over_say_nothing_of_kernel_tls() {
        let cell = judge(&ktls(&SEEN.replace("TlsRxSw 10", "TlsRxSw 0")), Expectation::of(RECENT));
        assert_eq!(cell.verdict, Verdict::Failed);
        assert!(cell.text.starts_with("kTLS not used"), "{}", cell.text);
        let unanswered = judge(&ktls(&SEEN.replace("ktls-answered 10", "ktls-answered 8")), Expectation::of(OLD));
        assert_eq!(unanswered.verdict, Verdict::Failed);
        assert_eq!(judge(&ktls(""), Expectation::of(RECENT)).text, "never started");
    }
}
