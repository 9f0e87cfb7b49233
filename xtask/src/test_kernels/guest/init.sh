#!/bin/sh
# /init of the initramfs `cargo xtask test-kernels` boots in QEMU. Runs `gateway-observer check`,
# then the daemon once against fixtures that measure their own ground truth and one incident (a
# blocked event loop), then a second daemon against HTTPS servers whose sessions kernel TLS
# carries (s_server and nginx), and powers off. Every line meant for the host starts with "@@KT "; the
# host reads nothing else (kernel messages may share the console).

export PATH=/bin
METRICS_PORT=9464
HTTP_PORT=8080
# Small and bounded: TCG runs a few times slower than the host, and all VMs share 5 minutes.
SLEEPS=20
FUTEX_WAITS=10
WAIT_MS=100
REQUESTS=100
CONNECTIONS=2
# HTTPS requests to kt-tlsd (OpenSSL's s_server), one connection each: its plaintext comes from
# the TLS uprobes, so every kernel runs the TLS programs it loaded (6.1: the bounded ones).
TLS_PORT=8443
TLS_REQUESTS=10
# HTTPS requests to kt-ktlsd (s_server with OpenSSL's KTLS option, TLS 1.2: OpenSSL 3.0 offloads
# receiving for 1.2 only), watched by a second daemon without --tls-plaintext: its plaintext is
# read at the socket, where kernel TLS moves it.
KTLS_PORT=8444
KTLS_REQUESTS=10
# The same through nginx terminating TLS with its `ssl_conf_command Options KTLS`, proxying to
# kt-httpd over plain HTTP: each request counted inbound and outbound.
NGINX_KTLS_PORT=8445
# And to kt-ktls13, s_server with the KTLS option over TLS 1.3, whose receiving OpenSSL 3.0 does
# not offload: one direction only is plaintext, and none of it may be parsed or left in flight.
KTLS13_PORT=8446
# EventLoopBlocked: kt-loop's loop blocks 25 iterations of 200 ms (6 s with its polls: longer
# than the 5 s the tests give detection), once the daemon has watched it healthy for a window.
LOOP_BLOCKS=25
LOOP_BLOCK_MS=200
LOOP_HEALTHY=5

say() { echo "@@KT $*"; }
trap 'poweroff -f' EXIT

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mkdir -p /tmp
ifconfig lo 127.0.0.1 up
dmesg -n 1 # keep kernel messages off the console while results are printed

# kt-get, not busybox wget: Debian's static busybox wget crashes.
metrics() { kt-get $METRICS_PORT /metrics 2>/dev/null; }
# The value of one series, named exactly as exposed (labels included), or nothing. Whole numbers
# lose the ".0" the encoder writes (5.0), so that the shell can compare and add them.
value() { metrics | grep -F "$1 " | grep -v '^#' | cut -d' ' -f2 | sed 's/\.0$//'; }
uptime_s() { cut -d. -f1 /proc/uptime; }

# wait_until SECONDS COMMAND...: runs COMMAND every 0.2 s until it succeeds; fails after SECONDS
# (counted on the clock: under TCG each try takes a while).
wait_until() {
    deadline=$(($(uptime_s) + $1))
    shift
    until "$@"; do
        [ "$(uptime_s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# Ready, or given up on: ready answers 200, or the daemon exited.
daemon_settled() { ! kill -0 "$daemon" 2>/dev/null || kt-get $METRICS_PORT /ready >/dev/null 2>&1; }
daemon_ready() { kt-get $METRICS_PORT /ready >/dev/null 2>&1; }
targets_attached() { [ "$(value 'gateway_observer_targets{state="attached"}')" = 6 ]; }
tls_hooked() { [ "$(value gateway_observer_tls_hooks_total)" -ge 1 ] 2>/dev/null; }

# tls_requests N PORT: N HTTPS requests, one `openssl s_client` each; prints how many got a 200.
tls_requests() {
    answered=0
    i=0
    while [ $i -lt "$1" ]; do
        i=$((i + 1))
        printf 'GET / HTTP/1.0\r\n\r\n' | timeout 20 openssl s_client -quiet -connect 127.0.0.1:"$2" \
            2>/dev/null | grep -q '^HTTP/1.[01] 200' && answered=$((answered + 1))
    done
    echo "$answered"
}
collections_reached() { [ "$(value gateway_observer_collections_total)" -ge "$1" ] 2>/dev/null; }

# The work the daemon is checked against: sleeps and timed futex waits that time out together
# (they idle the CPU), then timed waits that are woken, then the requests, so that none delays
# another's wakeups. kt-wake waits alone: its futex calls come every 100 ms like kt-futex's
# timeouts, and a timer that fires while the task it interrupts is in a futex call reads as a
# futex wake (ARCHITECTURE.md, "Kernel hook plan"): run together, a few of kt-futex's timeouts
# were counted as wakes.
workload() {
    : >/tmp/go.nap # opening a FIFO's write end releases the fixture blocked opening its read end
    : >/tmp/go.futex
    wait "$nap" "$futex"
    : >/tmp/go.wake
    wait "$wake"
    # truth sleep|futex|woken NS, and any note of a fixture's
    cat /tmp/nap.out /tmp/futex.out /tmp/wake.out | sed 's/^/@@KT /'
    kt-httpc $HTTP_PORT $REQUESTS $CONNECTIONS >/tmp/httpc.out
    say sent $REQUESTS
    say client $(cat /tmp/httpc.out)
    wait_until 30 tls_hooked || say note "kt-tlsd's TLS calls not hooked within 30 s"
    say tls-sent $TLS_REQUESTS
    say tls-answered "$(tls_requests $TLS_REQUESTS $TLS_PORT)"
    # Two completed collections after the work, so all of it is folded into the metrics.
    start=$(value gateway_observer_collections_total)
    wait_until 10 collections_reached $((start + 2)) || say note "no two collections within 10 s"
    metrics | grep -E '^gateway_observer_(thread_offcpu_seconds_total|http_requests_total|targets|collections_total|bpf_events_lost_total|bpf_missed_switches_total)' |
        sed 's/^/@@KT metric /'
    loop_incident
}

loop_known() { kt-get $METRICS_PORT /api/v1/snapshot 2>/dev/null | grep -q '"thread":"kt-evloop"'; }
watched_a_window() { [ "$(uptime_s)" -ge $((${ready_at%.*} + LOOP_HEALTHY + 1)) ]; }
loop_blocked() { grep -q '^loop-blocked' /tmp/loop.out; }
alert_resolved() { grep -q '"event":"resolved"' /tmp/alerts.jsonl; }

# One incident: kt-loop's thread has idled in epoll since before the daemon started, all through
# the work above (the healthy phase). Once the daemon lists it as an event loop and has watched
# it for a window, it blocks for a while, then idles until the alert resolves. The host judges
# the daemon's alert transitions (its stdout) against when the loop blocked.
loop_incident() {
    wait_until 10 loop_known && known=known || known=unknown
    wait_until $((LOOP_HEALTHY + 1)) watched_a_window
    say loop-healthy "$ready_at" "$(cut -d' ' -f1 /proc/uptime)" $known
    : >/tmp/go.loop
    wait_until $((LOOP_BLOCKS * LOOP_BLOCK_MS / 1000 + 20)) loop_blocked ||
        say note "kt-loop: the blocked phase did not end"
    wait_until 15 alert_resolved
    sed 's/^/@@KT /' /tmp/loop.out
}

# The daemon with the fixtures as its targets; its stderr (startup lines, errors) and its alert
# transitions (stdout) go to the host.
run_daemon() {
    say begin run
    for fixture in nap futex wake loop; do
        mkfifo /tmp/go.$fixture
    done
    kt-httpd $HTTP_PORT &
    httpd=$!
    kt-tlsd s_server -www -quiet -accept $TLS_PORT -cert /etc/kt/cert.pem -key /etc/kt/key.pem \
        >/dev/null 2>/tmp/tlsd.err </dev/null &
    tlsd=$!
    kt-nap /tmp/go.nap $SLEEPS $WAIT_MS >/tmp/nap.out &
    nap=$!
    kt-futex /tmp/go.futex $FUTEX_WAITS $WAIT_MS >/tmp/futex.out &
    futex=$!
    kt-wake /tmp/go.wake $FUTEX_WAITS $WAIT_MS >/tmp/wake.out &
    wake=$!
    kt-loop /tmp/go.loop $LOOP_BLOCKS $LOOP_BLOCK_MS >/tmp/loop.out &
    loop=$!
    # s_server serves one connection at a time, its loop blocked in reads while a client (slow
    # under TCG) sends: a real block, but not the incident judged here (kt-loop's).
    printf '[event_loops]\nexclude = ["kt-tlsd"]\n' >/tmp/observer.toml
    started=$(cut -d' ' -f1 /proc/uptime)
    gateway-observer run --config /tmp/observer.toml --target comm=kt-nap --target comm=kt-futex --target comm=kt-wake \
        --target comm=kt-httpd --target comm=kt-loop --target comm=kt-tlsd --tls-plaintext \
        --listen 127.0.0.1:$METRICS_PORT \
        >/tmp/alerts.jsonl 2>/tmp/daemon.err &
    daemon=$!
    wait_until 60 daemon_settled
    if ! kill -0 "$daemon" 2>/dev/null; then
        say not-ready exited
    elif ! daemon_ready; then
        say not-ready timeout
    elif ! wait_until 10 targets_attached; then
        say not-attached
    else
        ready_at=$(cut -d' ' -f1 /proc/uptime)
        say ready "$started" "$ready_at"
        workload
    fi
    kill "$daemon" 2>/dev/null
    wait "$daemon"
    say daemon-exit $?
    grep '^{' /tmp/alerts.jsonl | sed 's/^/@@KT alert /'
    kill "$httpd" "$tlsd" "$nap" "$futex" "$wake" "$loop" 2>/dev/null
    wait "$httpd" "$tlsd" "$nap" "$futex" "$wake" "$loop" 2>/dev/null
    say begin stderr
    cat /tmp/daemon.err
    say end stderr
    say end run
}

# Kernel TLS: kt-ktlsd's sessions go on in plaintext through the socket once their handshake is
# done, and a daemon that hooks no TLS library counts their requests. /proc/net/tls_stat says
# how many sessions the kernel took over (the ground truth that kTLS was used at all).
# TlsTxSw and TlsRxSw of /proc/net/tls_stat, as NAME VALUE pairs: sessions whose sending and
# receiving the kernel took over.
tls_stat() { grep -E '^Tls(Tx|Rx)Sw[[:space:]]' /proc/net/tls_stat 2>/dev/null | tr -s ' \t' ' ' | tr '\n' ' '; }
# kt-ktlsd, kt-ktls13, and nginx's master and worker.
all_attached() { [ "$(value 'gateway_observer_targets{state="attached"}')" -ge 4 ] 2>/dev/null; }
ktls_run() {
    say ktls-begin
    # tls.ko and the AES-GCM it asks for, in order (no modprobe here to load them on demand).
    for module in /lib/modules/"$(uname -r)"/*.ko; do
        insmod "$module" 2>/tmp/insmod.err || say ktls-note "insmod ${module##*/}: $(cat /tmp/insmod.err)"
    done
    OPENSSL_CONF=/etc/kt/ktls.cnf kt-ktlsd s_server -www -quiet -tls1_2 -ssl_config ktls -accept $KTLS_PORT \
        -cert /etc/kt/cert.pem -key /etc/kt/key.pem >/dev/null 2>/tmp/ktlsd.err </dev/null &
    ktlsd=$!
    OPENSSL_CONF=/etc/kt/ktls.cnf kt-ktls13 s_server -www -quiet -tls1_3 -ssl_config ktls -accept $KTLS13_PORT \
        -cert /etc/kt/cert.pem -key /etc/kt/key.pem >/dev/null 2>/tmp/ktls13.err </dev/null &
    ktls13=$!
    kt-httpd $HTTP_PORT &
    httpd=$!
    nginx -e /tmp/nginx.err -p /tmp -c /etc/kt/nginx.conf 2>>/tmp/nginx.err &
    nginx=$!
    gateway-observer run --target comm=kt-ktlsd --target comm=nginx --target comm=kt-ktls13 \
        --listen 127.0.0.1:$METRICS_PORT \
        >/dev/null 2>/tmp/daemon-ktls.err &
    daemon=$!
    wait_until 60 daemon_settled
    if daemon_ready && wait_until 10 all_attached; then
        say ktls-sent $KTLS_REQUESTS
        say ktls-answered "$(tls_requests $KTLS_REQUESTS $KTLS_PORT)"
        say ktls-nginx-sent $KTLS_REQUESTS
        say ktls-nginx-answered "$(tls_requests $KTLS_REQUESTS $NGINX_KTLS_PORT)"
        say ktls-stat-before-13 $(tls_stat)
        say ktls-13-sent $KTLS_REQUESTS
        say ktls-13-answered "$(tls_requests $KTLS_REQUESTS $KTLS13_PORT)"
        start=$(value gateway_observer_collections_total)
        wait_until 10 collections_reached $((start + 2)) || say ktls-note "no two collections within 10 s"
        metrics | grep -E '^gateway_observer_(http_requests_total|kernel_tls_connections|tls_connections_unparsed|http_in_flight)' |
            sed 's/^/@@KT ktls-metric /'
    else
        say ktls-note "the second daemon was not ready: $(tail -n 3 /tmp/daemon-ktls.err | tr '\n' ' ')"
    fi
    say ktls-stat $(tls_stat)
    kill "$daemon" "$ktlsd" "$ktls13" "$httpd" "$nginx" 2>/dev/null
    wait "$daemon" "$ktlsd" "$ktls13" "$httpd" "$nginx" 2>/dev/null
    grep -v '^$' /tmp/nginx.err 2>/dev/null | tail -n 3 | sed 's/^/@@KT ktls-note nginx: /'
    say ktls-end
}

say kernel "$(uname -r)"
say begin check
gateway-observer check 2>&1
say check-exit $?
say end check
run_daemon
ktls_run
say begin dmesg
dmesg | tail -n 40
say end dmesg
say done
