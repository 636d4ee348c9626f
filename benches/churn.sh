#!/usr/bin/env bash
# The data plane while the registry churns: one crackbox (release build,
# engine pinned to core 0, load tool and upstream on core 1), keep-alive GETs
# and new CONNECT tunnels + 64-byte echo, first with a quiet registry, then
# while crackbox-control-bench makes RATE changes per second (register and
# unregister of other sources). Reports the engine's CPU per request / tunnel
# for both phases (crackbox-load report; --proxy-pid is the engine, so the
# control plane's own work for the churn is not counted). Loopback only,
# bounded in time.
#
#   benches/churn.sh [SECONDS] [RATE]      (defaults 10 and 200)
set -euo pipefail

seconds=${1:-10}
rate=${2:-200}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$root/target/release
for tool in crackbox crackbox-load crackbox-control-bench; do
    [[ -x $bin/$tool ]] || { echo "churn.sh: build first: cargo build --release -p crackbox -p crackbox-benches" >&2; exit 2; }
done
out=$(mktemp -d)
base=$((20000 + RANDOM % 20000))
echo_port=$base http_port=$((base + 1)) proxy_port=$((base + 2)) admin_port=$((base + 3))
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT

taskset -c 1 "$bin/crackbox-load" upstream --echo "127.0.0.1:$echo_port" --http "127.0.0.1:$http_port" \
    --for $((seconds * 6 + 120)) >"$out/upstream.log" 2>&1 &
pids+=($!)
CRACKBOX_LOG=warn taskset -c 0 "$bin/crackbox" proxy serve --listen "127.0.0.1:$proxy_port" \
    --admin "127.0.0.1:$admin_port" --transparent '' --threads 1 --allow-private-destinations \
    --register 127.0.0.1=bench:localhost >"$out/crackbox.log" 2>&1 &
serve=$!
pids+=("$serve")
healthy=
for _ in $(seq 300); do
    curl -fs "http://127.0.0.1:$admin_port/health" >/dev/null 2>&1 && { healthy=1; break; }
    sleep 0.1
done
[[ -n $healthy ]] || { echo "churn.sh: crackbox did not become healthy:" >&2; cat "$out/crackbox.log" >&2; exit 2; }
engine=$(cat /proc/"$serve"/task/*/children | awk '{print $1; exit}')
[[ -n $engine ]] || { echo "churn.sh: no engine child" >&2; exit 2; }

measure() {
    local phase=$1
    taskset -c 1 "$bin/crackbox-load" http-rate --proxy "127.0.0.1:$proxy_port" --target "localhost:$http_port" \
        --proxy-pid "$engine" --label "keep-alive GET, $phase" --duration "$seconds" --json >>"$out/results.jsonl"
    taskset -c 1 "$bin/crackbox-load" connect-rate --proxy "127.0.0.1:$proxy_port" --target "localhost:$echo_port" \
        --proxy-pid "$engine" --label "new tunnel + echo, $phase" --duration "$seconds" --json >>"$out/results.jsonl"
}

measure "quiet registry"
taskset -c 1 "$bin/crackbox-control-bench" --churn-admin "127.0.0.1:$admin_port" --churn-rate "$rate" \
    --churn-seconds $((seconds * 2 + 2)) >"$out/churn.log" &
churn=$!
pids+=("$churn")
sleep 1
measure "$rate changes/s"
wait "$churn"
cat "$out/churn.log"
"$bin/crackbox-load" report "$out/results.jsonl"
