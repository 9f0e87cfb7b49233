#!/bin/bash
# Records the fixtures here: /api/v1/snapshot and /api/v1/alerts of a debug build of the daemon
# watching reference-gateway through four phases (healthy under wrk; incident 1: blocking Redis
# client with Redis paused 60 ms every 80 ms; incident 2: the rate-limited pool; incident 3: an
# upstream that reads and never answers), and the daemon's alert transitions (its stdout).
# As root, from the workspace root, after `cargo build -p gateway-observer -p reference-gateway`:
#   flock /tmp/gateway-observer-e2e.lock gateway-observer/tests/data/api/v1/record.sh
# Needs redis-server, redis-cli, nginx, wrk, curl, python3; uses ports 26379, 28080, 28901,
# 29000, 29002 and 29464 on 127.0.0.1. About 35 s.
set -u
BIN=${BIN:-target/debug}
OUT=${OUT:-gateway-observer/tests/data/api/v1}
D=$(mktemp -d); mkdir -p "$OUT"
# An upstream that reads requests and never answers (incident 3's black hole).
HANG='
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 29002)); s.listen(128)
held = []
def hold(c):
    while c.recv(65536):
        pass
while True:
    c, _ = s.accept(); held.append(c)
    threading.Thread(target=hold, args=(c,), daemon=True).start()
'
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; nginx -c "$D/up.conf" -s stop 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
redis-server --port 26379 --save '' --appendonly no --daemonize no >"$D/redis.log" 2>&1 & PIDS+=($!)
cat > "$D/up.conf" <<NG
worker_processes 1; pid $D/up.pid; error_log $D/up-error.log warn; daemon off;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $D/b; proxy_temp_path $D/p; fastcgi_temp_path $D/f; uwsgi_temp_path $D/u; scgi_temp_path $D/s;
  server { listen 127.0.0.1:29000; keepalive_requests 10000000; location / { return 200 "ok\n"; } } }
NG
nginx -c "$D/up.conf" >"$D/nginx.log" 2>&1 & PIDS+=($!)
python3 -c "$HANG" >"$D/hang.log" 2>&1 & PIDS+=($!)
cat > "$D/gw.toml" <<GW
[server]
listen = ["127.0.0.1:28080"]
workers = 4
drain_timeout = "2s"
[admin]
listen = "127.0.0.1:28901"
[access_log]
output = "off"
[redis]
url = "redis://127.0.0.1:26379/"
timeout = "5s"
[faults]
redis_client = "async"
upstream_response_timeout = "1800s"
[faults.pool]
enabled = false
core = 10
max = 64
permits_per_second = 5.0
[upstreams.u]
servers = ["127.0.0.1:29000"]
[upstreams.hang]
servers = ["127.0.0.1:29002"]
[[routes]]
path_prefix = "/api/"
upstream = "u"
access_check = "protected"
[[routes]]
path_prefix = "/orders/"
upstream = "hang"
[[routes]]
path_prefix = "/rpc/"
handler = "pool"
GW
sleep 0.5
redis-cli -p 26379 SET tok-1 '{"userId":"u-1","userName":"Ann"}' >/dev/null
"$BIN/reference-gateway" --config "$D/gw.toml" >"$D/gw.log" 2>&1 & GW=$!; PIDS+=($GW)
for i in $(seq 50); do curl -sf localhost:28080/health >/dev/null && break; sleep 0.1; done
"$BIN/gateway-observer" run --target pid=$GW --listen 127.0.0.1:29464 >"$D/observer.log" 2>"$D/observer.err" & OBS=$!; PIDS+=($OBS)
for i in $(seq 300); do curl -sf localhost:29464/ready >/dev/null && break; sleep 0.1; done
curl -sf localhost:29464/ready || { echo "observer not ready"; cat "$D/observer.err"; exit 1; }
record() { curl -sf localhost:29464/api/v1/snapshot >"$OUT/$1_snapshot.json"; curl -sf localhost:29464/api/v1/alerts >"$OUT/$1_alerts.json"; echo "recorded $1 at $(date +%T)"; }
# Phase 1: healthy under load.
wrk -t1 -c8 -d30s -H 'Authorization: Bearer tok-1' http://127.0.0.1:28080/api/items >"$D/wrk.log" 2>&1 & WRK=$!; PIDS+=($WRK)
sleep 6; record healthy
# Phase 2: blocking Redis client, Redis paused 60 ms every 80 ms.
curl -sf -X PUT localhost:28901/admin/faults -d '{"redis_client":"blocking"}' >/dev/null
end=$((SECONDS+8)); while [ $SECONDS -lt $end ]; do redis-cli -p 26379 CLIENT PAUSE 60 >/dev/null; sleep 0.08; done
record blocked
curl -sf -X PUT localhost:28901/admin/faults -d '{"redis_client":"async"}' >/dev/null
# Phase 3: the rate-limited pool.
curl -sf -X PUT localhost:28901/admin/faults -d '{"pool_enabled":true,"pool_permits_per_second":5.0}' >/dev/null
wrk -t1 -c80 -d12s http://127.0.0.1:28080/rpc/call >"$D/wrk-rpc.log" 2>&1 & PIDS+=($!)
sleep 7; record pool
# Phase 4: an upstream that never answers.
for i in $(seq 16); do curl -s -m 40 http://127.0.0.1:28080/orders/$i/items?token=abc >/dev/null & PIDS+=($!); done
sleep 7; record upstream
cp "$D/observer.log" "$OUT/transitions.jsonl"
