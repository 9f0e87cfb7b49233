//! 5. JDK HttpServer without an executor: the dispatcher is the event loop.

use std::time::Duration;

use tests::{
    jvm::{self, JvmGateway},
    jvm_scenario::{Scenario, Shape},
    metrics, privileged, serial,
    summary::{Detection, Start},
};

/// Handlers on HTTP-Dispatcher wait on `CompletableFuture.get()` that another thread completes
/// 50 ms later: the selector thread parks without a timeout between two selects.
#[test]
fn jvm_httpserver_untimed_get_on_the_dispatcher_is_a_blocked_loop() {
    let test = module_path!();
    if !privileged(test) || !jvm::available(test) {
        return;
    }
    let _serial = serial();
    let gateway = JvmGateway::start("JdkHttpGateway", &["inline"], &["-Xmx256m"]);
    let mut scenario =
        Scenario::new("httpserver inline untimed-get", gateway, "/api/x", &["HTTP-Dispatcher"], &["HTTP-Dispatcher"]);
    scenario.healthy(Shape { clients: 4, pause: Duration::from_millis(5) });
    let before = scenario.fault("untimed-get");
    let (alert, detected) = scenario.detected("EventLoopBlocked", &before);
    assert_eq!(alert["subject"], "HTTP-Dispatcher", "{alert:#}");
    // The untimed waits judged blocking are in the loop's blocked-time counter too, as much as
    // the alert's window holds (each is a 50 ms wait, well past the 10 ms block threshold).
    let in_alert = alert["evidence"]["blocked_seconds_by_reason"]["futex"].as_f64().unwrap_or(0.0);
    let samples = metrics::parse(&scenario.observer().metrics());
    let counted = metrics::sum(
        &samples,
        "gateway_observer_event_loop_blocked_seconds_total",
        &[("thread", "HTTP-Dispatcher"), ("reason", "futex")],
    );
    eprintln!(
        "httpserver inline untimed-get: futex blocked {counted:.2} s counted, {in_alert:.2} s in the alert's window"
    );
    assert!(
        in_alert > 0.5 && counted >= in_alert * 0.8,
        "event_loop_blocked_seconds_total{{reason=\"futex\"}} {counted:.2} s, the alert's window {in_alert:.2} s"
    );
    let resolved = scenario.healed("EventLoopBlocked");
    Detection {
        runtime: "jvm httpserver",
        fault: "untimed-get on the dispatcher",
        kind: "EventLoopBlocked",
        start: Start::Watching,
    }
    .report(detected, Some(resolved));
    assert!(scenario.finish() > 50, "the load barely ran");
}
