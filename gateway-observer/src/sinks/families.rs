//! Every `gateway_observer_*` metric family: name, type, help and label names, in one place.
//! Whoever computes the values ([`crate::collector`], [`crate::state::requests`], the alert book) names
//! a family from here; the names are the dashboards' and alert rules' contract
//! (`deploy/grafana`, `deploy/prometheus`, the README's table).

use super::prometheus::{Family, Kind};

pub const THREAD_OFFCPU_SECONDS: Family = Family {
    name: "gateway_observer_thread_offcpu_seconds",
    kind: Kind::Counter,
    help: "Time threads spent off-CPU, by thread group and reason.",
    labels: &["process", "thread_group", "reason"],
};

pub const EVENT_LOOP_UTILIZATION: Family = Family {
    name: "gateway_observer_event_loop_utilization",
    kind: Kind::Gauge,
    help: "Busy and blocked share of an event loop's time over the detection window (0..1).",
    labels: &["process", "thread"],
};

pub const EVENT_LOOP_BLOCKED_SECONDS: Family = Family {
    name: "gateway_observer_event_loop_blocked_seconds",
    kind: Kind::Counter,
    help: "Time event loops spent off-CPU in work (not idling in poll), by reason.",
    labels: &["process", "thread", "reason"],
};

pub const POOL_THREADS: Family = Family {
    name: "gateway_observer_pool_threads",
    kind: Kind::Gauge,
    help: "Threads per thread group by what they do now: running, runnable, blocked (in work), idle (waiting for work).",
    labels: &["process", "thread_group", "state"],
};

pub const LONG_BLOCKS: Family = Family {
    name: "gateway_observer_long_blocks",
    kind: Kind::Counter,
    help: "Off-CPU waits longer than the block threshold, by thread group and reason.",
    labels: &["process", "thread_group", "reason"],
};

pub const BPF_EVENTS_LOST: Family = Family {
    name: "gateway_observer_bpf_events_lost",
    kind: Kind::Counter,
    help: "Ring-buffer events the kernel could not reserve room for, by ring (threads: blocks and lifecycle; sockets: connections and data).",
    labels: &["ring"],
};

pub const BPF_MAP_FULL: Family = Family {
    name: "gateway_observer_bpf_map_full",
    kind: Kind::Counter,
    help: "Threads, processes or connections not followed, or block stacks not kept, because a kernel map was full.",
    labels: &["map"],
};

pub const QUOTA_REFUSED: Family = Family {
    name: "gateway_observer_quota_refused",
    kind: Kind::Counter,
    help: "Threads and connections of targets not followed because their process held its whole quota (max_threads_per_target, max_connections_per_target), and socket records dropped because their process had written its share of a congested socket ring.",
    labels: &["kind"],
};

pub const BPF_MISSED_SWITCHES: Family = Family {
    name: "gateway_observer_bpf_missed_switches",
    kind: Kind::Counter,
    help: "Switch-ins of target threads the sched_switch program did not see: closed late at the next syscall (closed_late) or lost (lost).",
    labels: &["outcome"],
};

pub const BPF_MAP_ENTRIES: Family = Family {
    name: "gateway_observer_bpf_map_entries",
    kind: Kind::Gauge,
    help: "Entries in use in the kernel maps (bounded; see bpf_map_full_total).",
    labels: &["map"],
};

pub const SYMBOL_FILES_REFUSED: Family = Family {
    name: "gateway_observer_symbol_files_refused",
    kind: Kind::Counter,
    help: "Files a target named for its stacks (ELF, perf map) that were not read, by reason.",
    labels: &["reason"],
};

pub const LIVE_STACKS: Family = Family {
    name: "gateway_observer_live_stacks",
    kind: Kind::Counter,
    help: "Alerted threads whose stack was taken from userspace, by outcome: unwound, running (on a CPU then), gone, denied (no ptrace access), error, dropped (the worker's queue was full).",
    labels: &["outcome"],
};

pub const TARGETS: Family = Family {
    name: "gateway_observer_targets",
    kind: Kind::Gauge,
    help: "Watched processes (attached) and target specs matching nothing yet (waiting).",
    labels: &["state"],
};

pub const HTTP_CONNECTIONS_REFUSED: Family = Family {
    name: "gateway_observer_http_connections_refused",
    kind: Kind::Counter,
    help: "Connections to this listener closed at accept because its connection limit was reached.",
    labels: &[],
};

pub const COLLECTIONS: Family = Family {
    name: "gateway_observer_collections",
    kind: Kind::Counter,
    help: "Completed collection passes (one per interval).",
    labels: &[],
};

pub const COLLECTION_DURATION: Family = Family {
    name: "gateway_observer_collection_duration_seconds",
    kind: Kind::Histogram,
    help: "How long each collection pass took: one longer than the interval delays the next, the rings' drains and the HTTP answers.",
    labels: &[],
};

pub const EVENT_DECODE_ERRORS: Family = Family {
    name: "gateway_observer_event_decode_errors",
    kind: Kind::Counter,
    help: "Ring-buffer records that could not be decoded.",
    labels: &["ring"],
};

pub const HTTP2_WALKS_CUT_SHORT: Family = Family {
    name: "gateway_observer_http2_walks_cut_short",
    kind: Kind::Counter,
    help: "HTTP/2 frame walks of more than 32 frames in one transfer used before their last continuation record came (lost to a full socket ring): their connections resync there.",
    labels: &[],
};

pub const BPF_PROGRAM_RUN_SECONDS: Family = Family {
    name: "gateway_observer_bpf_program_run_seconds",
    kind: Kind::Counter,
    help: "Kernel time spent in each program (needs kernel.bpf_stats_enabled=1).",
    labels: &["program"],
};

pub const BPF_PROGRAM_RUNS: Family = Family {
    name: "gateway_observer_bpf_program_runs",
    kind: Kind::Counter,
    help: "Runs of each program (needs kernel.bpf_stats_enabled=1).",
    labels: &["program"],
};

pub const HTTP_REQUESTS: Family = Family {
    name: "gateway_observer_http_requests",
    kind: Kind::Counter,
    help: "HTTP/1.x requests seen on targets' sockets, by direction (inbound: served; outbound: sent upstream), method and status class.",
    labels: &["process", "direction", "method", "status_class"],
};

pub const GRPC_RESPONSES: Family = Family {
    name: "gateway_observer_grpc_responses",
    kind: Kind::Counter,
    help: "gRPC calls over HTTP/2 that ended with a grpc-status (trailers, or a trailers-only response), by direction and code (OK, UNAVAILABLE, ...; `other` past the 17 codes): their HTTP status is 200 whatever the outcome.",
    labels: &["process", "direction", "code"],
};

pub const HTTP_REQUEST_DURATION_SECONDS: Family = Family {
    name: "gateway_observer_http_request_duration_seconds",
    kind: Kind::Histogram,
    help: "From a request's first byte read (inbound) or written (outbound) to its response's last byte.",
    labels: &["process", "direction"],
};

pub const HTTP_SOCKET_QUEUE_SECONDS: Family = Family {
    name: "gateway_observer_http_socket_queue_seconds",
    kind: Kind::Histogram,
    help: "How long inbound requests' first bytes waited in the socket before the gateway read them.",
    labels: &["process"],
};

pub const UPSTREAM_OUTSTANDING_REQUESTS: Family = Family {
    name: "gateway_observer_upstream_outstanding_requests",
    kind: Kind::Gauge,
    help: "Requests written to an upstream peer whose response is not complete.",
    labels: &["process", "peer"],
};

pub const UPSTREAM_OLDEST_REQUEST_AGE_SECONDS: Family = Family {
    name: "gateway_observer_upstream_oldest_request_age_seconds",
    kind: Kind::Gauge,
    help: "Age of the oldest request still waiting for an upstream peer's response (0: none waiting).",
    labels: &["process", "peer"],
};

pub const TCP_RETRANSMITS: Family = Family {
    name: "gateway_observer_tcp_retransmits",
    kind: Kind::Counter,
    help: "Segments the kernel retransmitted on targets' connections, by upstream peer (clients: inbound connections).",
    labels: &["process", "peer"],
};

pub const TCP_ONE_WAY_FLOWS: Family = Family {
    name: "gateway_observer_tcp_one_way_flows",
    kind: Kind::Gauge,
    help: "Upstream connections retransmitting into silence now (nothing comes back).",
    labels: &["process", "peer"],
};

pub const HTTP_NON_HTTP_BYTES: Family = Family {
    name: "gateway_observer_http_non_http_bytes",
    kind: Kind::Counter,
    help: "Bytes on targets' TCP connections that were not HTTP/1.x (TLS, other protocols), from closed connections.",
    labels: &["process"],
};

pub const HTTP_PARSE_RESYNCS: Family = Family {
    name: "gateway_observer_http_parse_resyncs",
    kind: Kind::Counter,
    help: "Times a connection's HTTP framing could not be followed (headers past the 512 bytes seen, a message starting in unseen bytes) and was picked up again at a direction change or a new start line.",
    labels: &[],
};

pub const HTTP_ABANDONED_REQUESTS: Family = Family {
    name: "gateway_observer_http_abandoned_requests",
    kind: Kind::Counter,
    help: "In-flight requests forgotten because socket records were lost meanwhile (see bpf_events_lost_total{ring=\"sockets\"}).",
    labels: &[],
};

pub const HTTP_CONNECTIONS: Family = Family {
    name: "gateway_observer_http_connections",
    kind: Kind::Gauge,
    help: "TCP connections of targets followed now.",
    labels: &[],
};

pub const HTTP_UNATTRIBUTED_RECORDS: Family = Family {
    name: "gateway_observer_http_unattributed_records",
    kind: Kind::Counter,
    help: "Socket data records of connections whose handshake was lost and whose bytes did not tell their direction.",
    labels: &[],
};

pub const ACCEPT_QUEUE_CONNECTIONS: Family = Family {
    name: "gateway_observer_accept_queue_connections",
    kind: Kind::Gauge,
    help: "Connections handshaken on a target's listening port and not yet accepted.",
    labels: &["process", "port"],
};

pub const SOCKET_WAITING_CONNECTIONS: Family = Family {
    name: "gateway_observer_socket_waiting_connections",
    kind: Kind::Gauge,
    help: "Connections on a target's listening port holding request bytes unread past the RequestQueueing threshold.",
    labels: &["process", "port"],
};

pub const JVM_PAUSE_SECONDS: Family = Family {
    name: "gateway_observer_jvm_pause_seconds",
    kind: Kind::Counter,
    help: "Time JVMs held every Java thread stopped (safepoints: GC and other VM operations), from HotSpot's hsperfdata counters.",
    labels: &["process"],
};

pub const JVM_PAUSES: Family = Family {
    name: "gateway_observer_jvm_pauses",
    kind: Kind::Counter,
    help: "Stop-the-world pauses (safepoints) of JVMs, from HotSpot's hsperfdata counters.",
    labels: &["process"],
};

pub const JVM_COUNTER_READ_ERRORS: Family = Family {
    name: "gateway_observer_jvm_counter_read_errors",
    kind: Kind::Counter,
    help: "Reads of a JVM's hsperfdata file that failed (gone, or malformed).",
    labels: &[],
};

pub const ALERTS: Family = Family {
    name: "gateway_observer_alerts",
    kind: Kind::Gauge,
    help: "Alerts known to the daemon: 1 while firing, 0 while pending or recently resolved.",
    labels: &["kind", "process", "subject"],
};

pub const FUTEX_WAIT_SECONDS: Family = Family {
    name: "gateway_observer_futex_wait_seconds",
    kind: Kind::Histogram,
    help: "Futex waits that blocked: from leaving the CPU to running again.",
    labels: &["process"],
};

pub const RUNQUEUE_LATENCY_SECONDS: Family = Family {
    name: "gateway_observer_runqueue_latency_seconds",
    kind: Kind::Histogram,
    help: "Time runnable threads waited for a CPU.",
    labels: &["process"],
};

pub const EVENT_LOOP_ITERATION_SECONDS: Family = Family {
    name: "gateway_observer_event_loop_iteration_seconds",
    kind: Kind::Histogram,
    help: "On-CPU time of event-loop iterations: from a poll's return to the next poll, less the time off the CPU meanwhile.",
    labels: &["process"],
};

pub const JVM_LONG_PAUSES: Family = Family {
    name: "gateway_observer_jvm_long_pauses",
    kind: Kind::Counter,
    help: "JVM pauses at least the JvmPause threshold long (`[detectors.jvm] threshold`), at most one counted per collection interval.",
    labels: &["process"],
};

// The daemon's own cost, under the names every Prometheus exporter uses.

pub const PROCESS_CPU_SECONDS: Family = Family {
    name: "process_cpu_seconds",
    kind: Kind::Counter,
    help: "User and system CPU time the daemon has used.",
    labels: &[],
};

pub const PROCESS_RESIDENT_MEMORY_BYTES: Family = Family {
    name: "process_resident_memory_bytes",
    kind: Kind::Gauge,
    help: "The daemon's resident memory (its binary, heap, and the kernel's ring buffers mapped into it).",
    labels: &[],
};

pub const PROCESS_VIRTUAL_MEMORY_BYTES: Family = Family {
    name: "process_virtual_memory_bytes",
    kind: Kind::Gauge,
    help: "The daemon's virtual memory size.",
    labels: &[],
};

pub const PROCESS_OPEN_FDS: Family =
    Family { name: "process_open_fds", kind: Kind::Gauge, help: "Descriptors the daemon has open.", labels: &[] };

pub const PROCESS_MAX_FDS: Family =
    Family { name: "process_max_fds", kind: Kind::Gauge, help: "The daemon's limit of open descriptors.", labels: &[] };

pub const PROCESS_START_TIME_SECONDS: Family = Family {
    name: "process_start_time_seconds",
    kind: Kind::Gauge,
    help: "When the daemon started, in seconds since the Unix epoch.",
    labels: &[],
};

pub const HEAP_BYTES: Family = Family {
    name: "gateway_observer_heap_bytes",
    kind: Kind::Gauge,
    help: "The daemon's heap: in use by live allocations, or free in the allocator's lists (whose pages are given back to the system every 10 s).",
    labels: &["state"],
};

pub const TLS_HOOKED_PROCESSES: Family = Family {
    name: "gateway_observer_tls_hooked_processes",
    kind: Kind::Gauge,
    help: "Targets whose TLS library calls are hooked (uprobes for that process), by library file name: their HTTPS requests are parsed from the plaintext.",
    labels: &["library"],
};

pub const TLS_HOOKS: Family = Family {
    name: "gateway_observer_tls_hooks",
    kind: Kind::Counter,
    help: "Processes whose TLS library calls were hooked since the daemon started (a target that starts later, each new worker of a reload): with tls_hooked_processes, shows hooking keeps up with churn.",
    labels: &[],
};

pub const TLS_HOOK_FAILURES: Family = Family {
    name: "gateway_observer_tls_hook_failures",
    kind: Kind::Counter,
    help: "TLS libraries of targets that could not be hooked (refused by the file checks, not ELF, no SSL_read/SSL_write, attach failed); their connections' ciphertext is not parsed.",
    labels: &[],
};

pub const TLS_UNATTRIBUTED_RECORDS: Family = Family {
    name: "gateway_observer_tls_unattributed_records",
    kind: Kind::Counter,
    help: "TLS plaintext reads or writes dropped because no followed connection was known for their TLS session (in the kernel, or in the daemon for a session-keyed one).",
    labels: &[],
};

pub const HTTP2_STREAM_RESETS: Family = Family {
    name: "gateway_observer_http2_stream_resets",
    kind: Kind::Counter,
    help: "HTTP/2 streams reset (RST_STREAM) on targets' connections, closed and open (as of the last tick); reason=\"refused\" is REFUSED_STREAM (the server would not take the stream).",
    labels: &["process", "reason"],
};

pub const HTTP2_GOAWAYS: Family = Family {
    name: "gateway_observer_http2_goaways",
    kind: Kind::Counter,
    help: "HTTP/2 GOAWAY frames (a peer shutting the connection down) on targets' connections, closed and open (as of the last tick).",
    labels: &["process"],
};

pub const HTTP2_FLOW_CONTROL_STALLS: Family = Family {
    name: "gateway_observer_http2_flow_control_stalls",
    kind: Kind::Counter,
    help: "HTTP/2 flow-control windows (a connection's, or an open stream's) that closed while their sender had a stream open, on targets' h2 connections, closed and open (as of the last tick); sender=\"gateway\" is the target held back by its peer's window (direction=\"inbound\": responses to a slow-reading client), sender=\"peer\" the peer held back by the target's.",
    labels: &["process", "direction", "sender"],
};

pub const HTTP2_FLOW_CONTROL_STALLED_SECONDS: Family = Family {
    name: "gateway_observer_http2_flow_control_stalled_seconds",
    kind: Kind::Counter,
    help: "Time a sender on targets' h2 connections, closed and open, had at least one flow-control window closed, from the frames' syscall times: until the WINDOW_UPDATE that reopened it, or the last tick for a window still closed.",
    labels: &["process", "direction", "sender"],
};

pub const HTTP2_FLOW_CONTROL_UNTRACKED_STREAMS: Family = Family {
    name: "gateway_observer_http2_flow_control_untracked_streams",
    kind: Kind::Counter,
    help: "HTTP/2 stream windows forgotten past 256 per connection and sender: their stalls are not counted.",
    labels: &["process", "direction", "sender"],
};

pub const TLS_CIPHERTEXT_RECORDS: Family = Family {
    name: "gateway_observer_tls_ciphertext_records",
    kind: Kind::Counter,
    help: "Socket data records of TLS ciphertext the daemon received and set aside. Without --tls-plaintext the kernel sends only each TLS connection's first (which tells it is TLS).",
    labels: &[],
};

pub const KERNEL_TLS_CONNECTIONS: Family = Family {
    name: "gateway_observer_kernel_tls_connections",
    kind: Kind::Counter,
    help: "Closed connections of targets that began with a TLS handshake and went on in plaintext through the socket (kernel TLS, kTLS): offload=\"both\" were parsed like plain HTTP; offload=\"send_only\" moved plaintext one way only, and were not parsed.",
    labels: &["offload"],
};

pub const TLS_CONNECTIONS_UNPARSED: Family = Family {
    name: "gateway_observer_tls_connections_unparsed",
    kind: Kind::Counter,
    help: "Closed connections of targets that spoke TLS through a library that is not hooked (or was hooked after they began): their requests were not seen, and their bytes are not counted as non-HTTP.",
    labels: &["process"],
};
