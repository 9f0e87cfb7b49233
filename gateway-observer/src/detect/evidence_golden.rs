//! The evidence of every alert kind as the API, the alert log and Alertmanager show it, compared
//! byte for byte with `testdata/evidence/golden.json`: each kind bare (as its detector builds it)
//! and full (with every part the tick adds: stacks, Java frames, client impact, likely causes).
//! Recorded from the code that built evidence as untyped JSON (with `json!` and patches in the
//! tick) before it was typed; `top` and users read these keys.
//! Re-record on purpose only: `GATEWAY_OBSERVER_RECORD_GOLDEN=1 cargo test -p gateway-observer --lib golden`.

use std::{collections::BTreeMap, time::Duration};

use gateway_observer_common::reason;
use serde_json::Value;

use super::{
    busy::{self, BusyLoop},
    event_loop::{self, BlockStats, BlockedLoop},
    jvm_pause::{self, Collections, JvmPauseConfig, KernelView, PausedJvm},
    loop_threads::EventLoopConfig,
    pool::{self, SaturatedPool},
    queueing::{self, ListenerFacts, QueueFacts, QueueingConfig},
    stalled::{self, StallFacts, StalledConfig, WaitingRequest},
    upstream::{self, UpstreamConfig},
};
use crate::{
    api::v1::{ClientRequests, Evidence, JavaDump, StackSource, WaitingGroup},
    detect::finding::{AlertKind, Finding},
    state::history::ThreadInfo,
    state::requests::flows::PeerFacts,
};

const GOLDEN: &str = include_str!("../../testdata/evidence/golden.json");
const MS: u64 = 1_000_000;
const KINDS: [AlertKind; 8] = [
    AlertKind::EventLoopBlocked,
    AlertKind::EventLoopBusy,
    AlertKind::PoolSaturated,
    AlertKind::UpstreamNoResponse,
    AlertKind::OneWayStall,
    AlertKind::RequestQueueing,
    AlertKind::RequestsStalled,
    AlertKind::JvmPause,
];

/// A futex word's name is keyed per process (`opaque::futex_word`): only its form is compared.
fn normalize(value: &mut Value) {
    match value {
        Value::String(s) if s.starts_with("futex-") && s.len() == 18 => *s = "futex-<keyed>".to_owned(),
        Value::Array(items) => items.iter_mut().for_each(normalize),
        Value::Object(map) => map.values_mut().for_each(normalize),
        _ => {}
    }
}

/// A loop blocked in timed futex waits (and a sleep), shared with the detectors' own tests.
pub(crate) fn blocked(syscall: Option<&'static str>, futex: Option<u64>) -> BlockedLoop {
    BlockedLoop {
        thread: ThreadInfo::new(12, 10, "java".into(), "reactor-http-nio-2".into()),
        reason: reason::FUTEX_TIMED,
        blocked_ns: 3_550_000_000,
        window: Duration::from_secs(5),
        share: 0.71,
        blocks: BlockStats {
            count: 40,
            over_single_threshold: 1,
            longest_ns: 120_000_000,
            futex_uaddr: futex,
            syscall,
            stack_id: None,
        },
        by_reason: vec![("futex_timed", 3_000_000_000), ("sleep", 550_000_000)],
        active: true,
    }
}

/// A blocked loop's evidence, for tests that need some finding's.
pub(crate) fn blocked_evidence(syscall: Option<&'static str>) -> Evidence {
    event_loop::finding(&blocked(syscall, None), &EventLoopConfig::default()).evidence
}

fn busy() -> BusyLoop {
    BusyLoop {
        pid: 10,
        comm: "node".into(),
        thread: "node".into(),
        tid: 10,
        iterations: 3,
        longest_on_cpu_ns: 800 * MS,
        total_on_cpu_ns: 2_100 * MS,
        window: Duration::from_secs(5),
        ongoing: true,
        ongoing_on_cpu_ns: 300 * MS,
        active: true,
    }
}

fn pool(hot_futexes: Vec<(u64, usize)>) -> SaturatedPool {
    SaturatedPool {
        pid: 20,
        comm: "java".into(),
        group: "http-nio-8080-exec".into(),
        threads: 8,
        created_in_window: 2,
        window: Duration::from_secs(10),
        busy_share: 0.05,
        blocked_share: 0.9,
        runqueue_share: 0.01,
        idle_share: 0.04,
        blocked_by_reason: vec![("futex_timed", 70.5), ("socket", 1.25)],
        waiting_requests: 30,
        held_requests: 8,
        queued_requests: 12,
        hot_futexes,
        cpu_cores: 0.125,
        active: true,
        parked_in_requests: false,
        saturated_for: Duration::from_secs(3),
    }
}

fn paused(collections: Vec<Collections>, last_cause: Option<String>) -> PausedJvm {
    PausedJvm {
        pid: 30,
        comm: "java".into(),
        window: Duration::from_secs(10),
        long_pauses: 2,
        longest_ns: 450 * MS,
        stopped_ns: 700 * MS,
        safepoints: 14,
        collections,
        last_cause,
        kernel: KernelView { releases: 3, most_threads_released: 41 },
        active: true,
    }
}

fn peer(name: &str, full: bool) -> PeerFacts {
    let some = |v: u64| full.then_some(v);
    PeerFacts {
        pid: 40,
        comm: "gw".into(),
        peer: name.into(),
        connections: 4,
        outstanding: 3,
        oldest_age_ns: Some(6_000 * MS),
        recent_p99_ns: some(12 * MS),
        answered_recently: usize::from(full) * 500,
        last_answer_age_ns: some(6_500 * MS),
        written_since_answer: 3,
        oldest_since_answer_ns: some(6_000 * MS),
        bytes_sent_since: 900,
        bytes_received_since: 0,
        retransmits: 2,
        connections_waiting: 3,
        threads_waiting: vec![41, 42],
        one_way_flows: 1,
        longest_one_way_ns: 2_500 * MS,
        stall_retransmits: 5,
        backoff_ns: 800 * MS,
        unacked_bytes: 120,
        last_rx_age_ns: some(2_600 * MS),
        last_tx_age_ns: some(10 * MS),
    }
}

fn queue_facts() -> QueueFacts {
    QueueFacts {
        pid: 50,
        comm: "nginx".into(),
        sharers: vec![50, 51],
        listeners: vec![
            ListenerFacts { port: 8080, accept_queue: 2, waiting: 1, oldest_unread_ns: 900 * MS },
            ListenerFacts { port: 9090, ..ListenerFacts::default() },
        ],
        window_ns: 5_000 * MS,
        completed: 100,
        delayed: 5,
        delayed_last_tick: 1,
        max_queue_ns: 1_200 * MS,
        refused: 2,
        listen_overflows: 1,
    }
}

fn stall_facts() -> StallFacts {
    StallFacts {
        pid: 60,
        comm: "go-gateway".into(),
        in_flight: 6,
        waiting: (0..6)
            .map(|i| WaitingRequest {
                tid: 100 + i % 2,
                age_ns: (600 + u64::from(i) * 100) * MS,
                reader_blocked_in_work: false,
            })
            .collect(),
        upstream_waiting: 0,
        answered_since: 20,
        prompt_answers: 0,
        cpu_cores: Some(0.01),
    }
}

/// Another finding of `pid`, as likely causes and other alerts name them.
pub(crate) fn other(pid: u32) -> Finding {
    busy::finding(&BusyLoop { pid, thread: format!("loop-{pid}"), ..busy() }, &EventLoopConfig::default())
}

/// What the tick adds about the process's clients (`collector::findings`).
fn add_client_impact(finding: &mut Finding) {
    let requests = ClientRequests {
        window_seconds: 5.0,
        completed: 120,
        delayed_in_socket: 7,
        delayed_threshold_seconds: crate::state::requests::stats::DELAYED_QUEUE_NS as f64 / 1e9,
        max_socket_queue_seconds: 1.5,
        in_flight: 4,
        oldest_in_flight_seconds: Some(2.25),
    };
    finding.evidence.add_client_impact(requests, 3);
}

fn frames(names: &[&str]) -> Vec<String> {
    names.iter().map(|f| (*f).to_owned()).collect()
}

/// A finding of `kind` as its detector builds it, before the tick adds anything; for tests that
/// need a finding of some kind (its kind comes from its evidence).
pub(crate) fn bare(kind: AlertKind) -> Finding {
    let first = |found: Vec<Finding>| found.into_iter().next().unwrap_or_else(|| panic!("{kind}: no finding"));
    let peers = [peer("10.0.0.2:8081", false)];
    match kind {
        AlertKind::EventLoopBlocked => event_loop::finding(&blocked(None, None), &EventLoopConfig::default()),
        AlertKind::EventLoopBusy => busy::finding(&busy(), &EventLoopConfig::default()),
        AlertKind::PoolSaturated => pool::finding(&pool(Vec::new())),
        AlertKind::JvmPause => jvm_pause::finding(&paused(Vec::new(), None), &JvmPauseConfig::default()),
        AlertKind::UpstreamNoResponse => first(upstream::upstream_no_response(&peers, &UpstreamConfig::default())),
        AlertKind::OneWayStall => first(upstream::one_way_stall(&peers, &UpstreamConfig::default())),
        AlertKind::RequestQueueing => {
            first(queueing::request_queueing(&[queue_facts()], &[], &QueueingConfig::default()))
        }
        AlertKind::RequestsStalled => {
            first(stalled::requests_stalled(&[stall_facts()], &[], &StalledConfig::default()))
        }
    }
}

/// Every kind's evidence, bare and full, as the alert shows it.
fn recorded() -> BTreeMap<String, Value> {
    let loops = EventLoopConfig::default();
    let mut out: BTreeMap<String, Finding> = BTreeMap::new();
    for kind in KINDS {
        out.insert(format!("{kind} bare"), bare(kind));
    }

    let mut f = event_loop::finding(&blocked(Some("futex"), Some(0x7f00_1234)), &loops);
    f.evidence.add_stack(frames(&["futex_wait+0x1 (libc.so.6)", "lock+0x10 (gw)"]), StackSource::Live);
    f.evidence.add_java_dump(JavaDump {
        stack: Some(frames(&["Handler.channelRead0(Handler.java:181)", "- waiting to lock Object"])),
        unavailable: Some("attach refused".into()),
        waiting_at: None,
    });
    add_client_impact(&mut f);
    out.insert("EventLoopBlocked full".into(), f);

    let mut f = busy::finding(&BusyLoop { ongoing: false, ..busy() }, &loops);
    add_client_impact(&mut f);
    out.insert("EventLoopBusy full".into(), f);

    let mut f = pool::finding(&pool(vec![(0x7f00_1000, 6), (0x7f00_2000, 2)]));
    let limiter = frames(&["futex_wait+0x1 (libc.so.6)", "acquire+0x10 (libgw.so)"]);
    let socket = frames(&["recv+0x2 (libc.so.6)"]);
    // As `stacks::waiting_at` groups three threads' stacks, two of them in the limiter.
    let groups = vec![WaitingGroup { threads: 2, frames: limiter }, WaitingGroup { threads: 1, frames: socket }];
    f.evidence.add_waiting_at(groups);
    f.evidence.add_java_dump(JavaDump { unavailable: Some("attach refused".into()), ..JavaDump::default() });
    add_client_impact(&mut f);
    out.insert("PoolSaturated full".into(), f);

    let jvm = JvmPauseConfig::default();
    let collections = vec![
        Collections { collector: "G1 Young Generation".into(), count: 3, ns: 500 * MS },
        Collections { collector: "G1 Old Generation".into(), count: 1, ns: 200 * MS },
    ];
    let mut f = jvm_pause::finding(&paused(collections, Some("G1 Evacuation Pause".into())), &jvm);
    add_client_impact(&mut f);
    out.insert("JvmPause full".into(), f);

    let upstream_config = UpstreamConfig::default();
    let full = [
        peer("10.0.0.2:8081", true),
        PeerFacts { oldest_age_ns: None, oldest_since_answer_ns: None, ..peer("127.0.0.1:9000", true) },
    ];
    let mut take = |name: &str, found: Vec<Finding>| {
        let f = found.into_iter().next().unwrap_or_else(|| panic!("{name}: no finding"));
        out.insert(name.into(), f);
    };
    take("UpstreamNoResponse full", upstream::upstream_no_response(&full, &upstream_config));
    take("OneWayStall full", upstream::one_way_stall(&full, &upstream_config));

    let facts = [queue_facts()];
    let others = [other(50), other(51), other(52)];
    take("RequestQueueing full", queueing::request_queueing(&facts, &others, &QueueingConfig::default()));

    let stalled_config = StalledConfig::default();
    let mut full = stalled::requests_stalled(&[stall_facts()], &[other(60), other(61)], &stalled_config);
    full.iter_mut().for_each(add_client_impact);
    take("RequestsStalled full", full);

    out.into_iter()
        .map(|(name, finding)| {
            assert!(name.starts_with(finding.kind().as_str()), "{name}: built a {} finding", finding.kind());
            let mut evidence = finding.evidence.to_json();
            let read_back = Evidence::from_json(finding.kind().as_str(), &evidence);
            assert_eq!(read_back.as_ref(), Some(&finding.evidence), "{name}: reads back as built");
            normalize(&mut evidence);
            (name, evidence)
        })
        .collect()
}

#[test]
fn every_kind_serializes_as_recorded() {
    let text = serde_json::to_string_pretty(&recorded()).expect("evidence serializes") + "\n";
    if std::env::var_os("GATEWAY_OBSERVER_RECORD_GOLDEN").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/evidence/golden.json");
        std::fs::write(path, &text).expect("golden file written");
    }
    let first_difference = text.lines().zip(GOLDEN.lines()).position(|(a, b)| a != b);
    assert!(
        text == GOLDEN,
        "evidence differs from testdata/evidence/golden.json at line {:?}:\n{text}",
        first_difference.map(|i| i + 1)
    );
}

#[test]
fn recorded_evidence_reads_back_as_written() {
    // What `top` does with an alert's evidence: its kind's type, serialized again unchanged.
    let golden: BTreeMap<String, Value> = serde_json::from_str(GOLDEN).expect("golden parses");
    assert_eq!(golden.len(), 2 * KINDS.len());
    for (name, recorded) in golden {
        let kind = name.split(' ').next().unwrap_or_default();
        let typed = Evidence::from_json(kind, &recorded).unwrap_or_else(|| panic!("{name}: does not read as {kind}"));
        assert_eq!(typed.kind().as_str(), kind);
        assert_eq!(typed.to_json(), recorded, "{name}: changed in the round trip");
    }
}

#[test]
fn evidence_of_an_unknown_kind_or_shape_is_left_untyped() {
    let recorded = bare(AlertKind::EventLoopBlocked).evidence.to_json();
    assert_eq!(Evidence::from_json("NewKind", &recorded), None);
    let mut older = recorded.clone();
    if let Some(fields) = older.as_object_mut() {
        fields.remove("thread");
    }
    assert_eq!(Evidence::from_json("EventLoopBlocked", &older), None, "a field the type needs is missing");
    let mut newer = recorded;
    if let Some(fields) = newer.as_object_mut() {
        fields.insert("brand_new".into(), Value::from(1));
    }
    assert!(Evidence::from_json("EventLoopBlocked", &newer).is_some(), "unknown fields are ignored");
}
