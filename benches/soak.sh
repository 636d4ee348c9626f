#!/usr/bin/env bash
# A soak of one crackbox daemon: `crackbox proxy serve` with a state file,
# the Docker label watcher, the DNS filter and steering, driven for SECONDS
# by `crackbox-load soak` (registry churn, traffic from the live sources,
# faults: engine kill -9, container bursts, stalled and reset clients), then
# judged. Prints the daemon minute by minute, the mix and the pass criteria
# (the table last); exits 1 when a criterion fails, 2 when it cannot start.
#
#   benches/soak.sh SECONDS [crackbox-load soak flags...]     (e.g. 3600; CI runs 120)
#
# The daemon is $CRACKBOX_BIN, else the release build (built when missing);
# crackbox-load is (re)built in release. THREADS (default 2) sets the
# engine's core threads. Needs root (port 80 on a loopback address for the
# steered upstream), a running Docker engine (deploy/ci-docker.sh starts
# one) and busybox-static (the labelled containers run an image built
# FROM scratch with it; no pulls, the image is kept for the next run).
#
# Traffic stays on loopback: the daemon listens on 127.0.0.1 and on a
# random 127.254.X.54 (DNS, steered 80/443), the upstreams on 127.0.0.1 and
# 127.254.X.80:80, sources are 127.1.1.1 upwards, and allowlists name IP
# literals only (nothing is resolved). Containers live on an internal
# network the script creates. On every exit path it stops the daemon and
# the driver and removes its containers and network; its files (logs,
# state) are removed after a pass and kept after a failure.
set -euo pipefail

seconds=${1:?usage: benches/soak.sh SECONDS [crackbox-load soak flags...]}
shift
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 30 ]] || { echo "soak.sh: SECONDS must be a whole number, at least 30" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
threads=${THREADS:-2}

if [[ -n ${CRACKBOX_BIN:-} ]]; then
    bin=$CRACKBOX_BIN
else
    bin=$target_dir/release/crackbox
    [[ -x $bin ]] || (cd "$root" && cargo build --release -p crackbox)
fi
[[ -x $bin ]] || { echo "soak.sh: no crackbox binary at $bin" >&2; exit 2; }
(cd "$root" && cargo build --release -q -p crackbox-benches --bin crackbox-load)
load=$target_dir/release/crackbox-load

[[ $(id -u) -eq 0 ]] || { echo "soak.sh: run as root (the steered upstream binds port 80)" >&2; exit 2; }
timeout 10 docker info >/dev/null 2>&1 || { echo "soak.sh: Docker is not answering; start it first (deploy/ci-docker.sh)" >&2; exit 2; }
busybox=$(command -v busybox || true)
if [[ -z $busybox ]] || ldd "$busybox" 2>/dev/null | grep -q '=>'; then
    echo "soak.sh: needs a static busybox (apt-get install busybox-static)" >&2
    exit 2
fi

run="soak-$$-$RANDOM"
octet=$((20 + RANDOM % 200))
steer=127.254.$octet.54
steered_upstream=127.254.$octet.80
out=$(mktemp -d "${TMPDIR:-/tmp}/crackbox-soak.XXXXXX")
network="crackbox-$run"
image=crackbox-soak-busybox:1
daemon=
driver=
passed=

cleanup() {
    set +e
    [[ -n $driver ]] && kill "$driver" 2>/dev/null && wait "$driver" 2>/dev/null
    if [[ -n $daemon ]]; then
        kill -TERM "$daemon" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$daemon" 2>/dev/null
        wait "$daemon" 2>/dev/null
    fi
    local containers
    containers=$(docker ps -aq --filter "label=io.crackbox.soak=$run" 2>/dev/null)
    [[ -n $containers ]] && docker rm -f $containers >/dev/null 2>&1
    docker network rm "$network" >/dev/null 2>&1
    if [[ -n $passed ]]; then rm -rf "$out"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A free TCP (and UDP) port on loopback, below the kernel's ephemeral range
# (the soak's own thousands of outgoing connections take ports there, and a
# port one of them holds cannot be listened on).
ephemeral_low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[[ $ephemeral_low =~ ^[0-9]+$ && $ephemeral_low -gt 11000 ]] || ephemeral_low=32768
free_port() {
    local port
    while :; do
        port=$((10000 + RANDOM % (ephemeral_low - 10000)))
        [[ -z $(ss -Htuan "sport = :$port" 2>/dev/null) ]] && { echo "$port"; return; }
    done
}
proxy_port=$(free_port) admin_port=$(free_port) dns_port=$(free_port) unused_port=$(free_port)

# The containers' image: busybox alone, FROM scratch (built once, kept).
# Soaks started at once build it once: each holds a lock on this script
# (a file that is there anyway, so no lock file is left behind).
(
    flock 9
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        mkdir -p "$out/image"
        cp "$busybox" "$out/image/busybox"
        printf 'FROM scratch\nCOPY busybox /bin/busybox\nENTRYPOINT ["/bin/busybox"]\n' >"$out/image/Dockerfile"
        docker build -q -t "$image" "$out/image" >/dev/null
    fi
) 9<"${BASH_SOURCE[0]}"
docker network create --internal --label "io.crackbox.soak=$run" "$network" >/dev/null

echo "soak.sh: $seconds s, daemon $bin, files in $out (kept if the soak fails)" >&2
CRACKBOX_LOG=${CRACKBOX_LOG:-info} "$bin" proxy serve \
    --listen "127.0.0.1:$proxy_port" --admin "127.0.0.1:$admin_port" --transparent '' \
    --state "$out/state.json" --docker-network "$network" \
    --dns-listen "$steer:$dns_port" --dns-upstream "127.0.0.1:$unused_port" --steer "$steer" \
    --threads "$threads" >"$out/daemon.log" 2>&1 &
daemon=$!

"$load" soak --seconds "$seconds" --daemon-pid "$daemon" \
    --proxy "127.0.0.1:$proxy_port" --admin "127.0.0.1:$admin_port" --dns "$steer:$dns_port" \
    --steer "$steer" --steered-upstream "$steered_upstream" \
    --state "$out/state.json" --log "$out/daemon.log" \
    --docker-network "$network" --docker-image "$image" --run-label "io.crackbox.soak=$run" \
    --engine-threads "$threads" "$@" &
driver=$!
rc=0
wait "$driver" || rc=$?
driver=
[[ $rc -eq 0 ]] && passed=1
if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    echo "soak.sh: the soak could not run; the daemon's log ends:" >&2
    tail -n 20 "$out/daemon.log" >&2
fi
exit "$rc"
