#!/bin/sh
# Regenerates syscalls.recorded next to this script: every syscall the daemon made in one run
# under `strace -f -qq -c` that does what it does in production: targets that start and exit
# (comm= and port=), a target's long sleeps through the event ring, the API and the metrics
# scraped, SIGTERM and the detach. As root, after `cargo build -p gateway-observer`:
#   deploy/kubernetes/seccomp/record-syscalls.sh [DAEMON]      (default target/debug/gateway-observer)
# gateway-observer.json allows these and the ones syscalls.extra names with a reason;
# tests/tests/deploy_confinement.rs checks that the profile and the unit allow every one.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-target/debug/gateway-observer}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
api=$(free_port)
target_port=$(free_port)
cp /bin/sleep "$work/gwrec-sleeper"

strace -f -qq -c -o "$work/counts" "$bin" run --target comm=gwrec-sleeper --target "port=$target_port" \
    --listen "127.0.0.1:$api" --interval 200ms --alertmanager http://127.0.0.1:9/ &
tracer=$!
until curl -fs "http://127.0.0.1:$api/ready" >/dev/null; do sleep 0.2; done
daemon=$(cat "/proc/$tracer/task/$tracer/children")

# Targets come and go: three short-lived comm= matches, one port= listener that exits.
for _ in 1 2 3; do "$work/gwrec-sleeper" 1; done
python3 -c 'import socket, sys, time; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(7)' "$target_port"
for path in /metrics /live /ready /api/v1/snapshot /api/v1/alerts /api/v1/nothing; do
    curl -s "http://127.0.0.1:$api$path" >/dev/null
done
sleep 6 # the port owners' refresh sees the listener gone
kill -TERM "$daemon"
wait "$tracer"

{
    echo "# Syscalls gateway-observer made in one traced run; regenerate with record-syscalls.sh."
    echo "# $(uname -r), $(date -u +%Y-%m-%d)"
    # strace -c: a row per syscall between two dashed rules, the name last; then a total row.
    awk '/^-/ { rule++; next } rule == 1 { print $NF }' "$work/counts" | sort -u
} > "$here/syscalls.recorded"
echo "wrote $here/syscalls.recorded: $(grep -vc '^#' "$here/syscalls.recorded") syscalls"
