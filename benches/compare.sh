#!/usr/bin/env bash
# Side-by-side: direct path, crackbox, squid and tinyproxy, every load mode,
# one run, one table. See benches/README.md for how to read it. The target
# crackbox-epoll is the same binary on the epoll driver (crackbox itself runs
# on the default, io_uring), for A/B runs of the two drivers. The target
# bare is benches/bare-relay/relay.c (compiled here with cc -O2): a one-thread
# epoll + splice CONNECT relay without policy, the floor any relay here costs;
# it only tunnels, so the http-* modes skip it. The target crackbox-socks5 is
# a second crackbox of the same binary whose tunnels are opened through its
# SOCKS5 listener (`--socks`, the load tool's `--socks5`): connect-bulk,
# connect-rate, echo-latency and idle beside crackbox's HTTP CONNECT; it
# skips the HTTP modes (http-*, denied). The target crackbox-base is
# another crackbox binary (CRACKBOX_BASE_BIN, e.g. a build of main) for A/B
# runs of a change; crackbox-capped is the binary under test with every
# source capped far above the traffic (CAP, default 1024GiB/s);
# crackbox-asking is it with every source in ask mode and 100 deny entries
# under the allowed name (what an allowed tunnel of such a source costs).
# The target nginx relays the same absolute-URI GETs to the http upstream
# with pooled upstream keep-alive and no policy (one worker, no master,
# temp files under $OUT): the cost of a plain HTTP relay; it does not tunnel,
# so it runs only the http-* modes.
#
#   benches/compare.sh            full run (several minutes)
#   QUICK=1 benches/compare.sh    short run (under 3 minutes)
#
# Paired: each round runs every target once, seconds apart, in turn (in
# reverse order every other round), so with ROUNDS >= 2 the report adds the
# paired table: per mode, crackbox's n-th run against the n-th run of the
# bare relay, nginx and crackbox-base, the median ratio with min and max.
# BASE_REV=<git rev> builds crackbox-base from that commit (a detached
# worktree and target directory under $OUT) unless CRACKBOX_BASE_BIN is set.
#
# Knobs (env): QUICK, TARGETS ("direct crackbox squid tinyproxy"; also
# crackbox-epoll, crackbox-socks5, crackbox-base, crackbox-capped, crackbox-asking, nginx and bare), MODES (every mode), ROUNDS (1: runs of each mode per
# target, alternating targets), DURATION (seconds per timed mode),
# PROXY_CORE (0), LOAD_CORE (1), BASE_PORT (18000), OUT (results dir),
# CRACKBOX_BIN, CRACKBOX_LOAD (prebuilt binaries), CRACKBOX_BASE_BIN,
# BASE_REV, CAP, NO_INSTALL=1 (no apt-get).
# Other CRACKBOX_* variables (e.g. CRACKBOX_IO_DRIVER=epoll) reach crackbox.
#
# Only loopback traffic. Every step is bounded by `timeout`. Only processes
# this script started are stopped, by PID.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
QUICK=${QUICK:-0}
TARGETS=${TARGETS:-direct crackbox squid tinyproxy}
PROXY_CORE=${PROXY_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
BASE_PORT=${BASE_PORT:-18000}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/crackbox-compare.XXXXXX")}
LOAD=${CRACKBOX_LOAD:-$TARGET_DIR/release/crackbox-load}
CRACKBOX=${CRACKBOX_BIN:-$TARGET_DIR/release/crackbox}
CRACKBOX_BASE=${CRACKBOX_BASE_BIN:-}
BASE_REV=${BASE_REV:-}
CAP=${CAP:-1024GiB/s}

ECHO_PORT=$((BASE_PORT + 1))
HTTP_PORT=$((BASE_PORT + 3))
CRACKBOX_PORT=$((BASE_PORT + 128))
ADMIN_PORT=$((BASE_PORT + 129))
SQUID_PORT=$((BASE_PORT + 130))
TINYPROXY_PORT=$((BASE_PORT + 131))
EPOLL_PORT=$((BASE_PORT + 132))
EPOLL_ADMIN_PORT=$((BASE_PORT + 133))
BARE_PORT=$((BASE_PORT + 134))
SOCKS_FORWARD_PORT=$((BASE_PORT + 135))
SOCKS_ADMIN_PORT=$((BASE_PORT + 136))
SOCKS_PORT=$((BASE_PORT + 137))
BASE_BIN_PORT=$((BASE_PORT + 138))
BASE_BIN_ADMIN_PORT=$((BASE_PORT + 139))
CAPPED_PORT=$((BASE_PORT + 140))
CAPPED_ADMIN_PORT=$((BASE_PORT + 141))
ASKING_PORT=$((BASE_PORT + 142))
ASKING_ADMIN_PORT=$((BASE_PORT + 143))
NGINX_PORT=$((BASE_PORT + 144))
ROUNDS=${ROUNDS:-1}
ALLOWED=localhost
DENIED=denied.invalid:$ECHO_PORT
# Sources for the idle mode: crackbox caps connections per source address.
IDLE_SOURCES=127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8,127.0.0.9,127.0.0.10

if [[ $QUICK == 1 ]]; then
    DURATION=${DURATION:-3} BULK_MIB=128 ECHO_COUNT=5000 IDLE_TUNNELS=1000
else
    DURATION=${DURATION:-10} BULK_MIB=1024 ECHO_COUNT=20000 IDLE_TUNNELS=9000
fi
WORKERS=8

mkdir -p "$OUT"
chmod 755 "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
declare -A PID_OF=()
STARTED=()

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

stop_pid() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
    local pid
    for pid in "${STARTED[@]}"; do stop_pid "$pid"; done
    wait 2>/dev/null || true
    if [[ -d $OUT/base-src ]]; then
        git -C "$ROOT" worktree remove --force "$OUT/base-src" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits until `cmd...` succeeds, for at most $1 seconds.
wait_for() {
    local limit=$1
    shift
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

port_free() { ! port_open "$1"; }

install_peers() {
    [[ ${NO_INSTALL:-0} == 1 ]] && return 0
    local missing=()
    [[ $TARGETS == *squid* ]] && ! command -v squid >/dev/null && missing+=(squid)
    [[ $TARGETS == *tinyproxy* ]] && ! command -v tinyproxy >/dev/null && missing+=(tinyproxy)
    ((${#missing[@]} == 0)) && return 0
    log "installing ${missing[*]}"
    timeout 300 apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${missing[@]}"
}

build() {
    if [[ ! -x $LOAD ]]; then
        log "building crackbox-load"
        (cd "$ROOT" && timeout 1200 cargo build --release -q -p crackbox-benches --bin crackbox-load)
    fi
    if [[ $TARGETS == *crackbox* && ! -x $CRACKBOX ]]; then
        log "building crackbox"
        (cd "$ROOT" && timeout 1200 cargo build --release -q -p crackbox)
    fi
    if [[ $TARGETS == *crackbox-base* && -z $CRACKBOX_BASE && -n $BASE_REV ]]; then
        log "building crackbox-base from $BASE_REV"
        git -C "$ROOT" worktree add -q --detach "$OUT/base-src" "$BASE_REV"
        (cd "$OUT/base-src" && CARGO_TARGET_DIR="$OUT/base-target" timeout 2400 cargo build --release -q -p crackbox)
        CRACKBOX_BASE=$OUT/base-target/release/crackbox
    fi
}

# Starts `cmd...` pinned to core $2, logging to $OUT/$1.log; sets LAST_PID.
start() {
    local name=$1 core=$2
    shift 2
    taskset -c "$core" "$@" >"$OUT/$name.log" 2>&1 &
    LAST_PID=$!
    STARTED+=("$LAST_PID")
}

start_upstream() {
    start upstream "$LOAD_CORE" "$LOAD" upstream --echo "127.0.0.1:$ECHO_PORT" --http "127.0.0.1:$HTTP_PORT" --for 3600
    wait_for 10 port_open "$HTTP_PORT" || { log "upstream did not start"; exit 2; }
}

# A tunnel through the proxy works end to end.
proxy_ready() {
    timeout 10 "$LOAD" idle --proxy "127.0.0.1:$1" --target "$ALLOWED:$ECHO_PORT" --tunnels 1 --hold 0 --timeout 2
}

# A SOCKS5 tunnel through the listener on port $1 works end to end.
socks_ready() {
    timeout 10 "$LOAD" idle --proxy "127.0.0.1:$1" --socks5 --target "$ALLOWED:$ECHO_PORT" --tunnels 1 --hold 0 --timeout 2
}

# Starts crackbox binary $4 as target $1 on ports $2 (proxy) and $3 (admin),
# with $5 appended to every --register value (options, e.g. ";bandwidth=1GiB/s");
# extra environment for it follows as NAME=VALUE words.
start_crackbox_as() {
    local name=$1 port=$2 admin=$3 binary=$4 options=$5
    shift 5
    [[ -x $binary ]] || { log "no crackbox binary at '$binary'"; return 1; }
    local register=() source
    for source in ${IDLE_SOURCES//,/ }; do
        register+=(--register "$source=bench-$source:$ALLOWED$options")
    done
    local threads=()
    "$binary" proxy serve --help 2>/dev/null | grep -q -- '--threads' && threads=(--threads 1)
    mkdir -p "$OUT/$name"
    start "$name" "$PROXY_CORE" env CRACKBOX_LOG="${CRACKBOX_LOG:-warn}" "$@" \
        "$binary" proxy serve --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" \
        --transparent '' --allow-private-destinations --control-socket "$OUT/$name/control.sock" \
        "${threads[@]}" "${register[@]}"
    PID_OF[$name]=$LAST_PID
    wait_for 20 proxy_ready "$port"
}

start_crackbox() { start_crackbox_as crackbox "$CRACKBOX_PORT" "$ADMIN_PORT" "$CRACKBOX" ""; }

start_crackbox-epoll() {
    start_crackbox_as crackbox-epoll "$EPOLL_PORT" "$EPOLL_ADMIN_PORT" "$CRACKBOX" "" CRACKBOX_IO_DRIVER=epoll
}

start_crackbox-base() { start_crackbox_as crackbox-base "$BASE_BIN_PORT" "$BASE_BIN_ADMIN_PORT" "$CRACKBOX_BASE" ""; }

start_crackbox-capped() {
    start_crackbox_as crackbox-capped "$CAPPED_PORT" "$CAPPED_ADMIN_PORT" "$CRACKBOX" ";bandwidth=$CAP"
}

start_crackbox-asking() {
    local deny
    deny=$(seq -s, -f "deny%g.$ALLOWED" 0 99)
    start_crackbox_as crackbox-asking "$ASKING_PORT" "$ASKING_ADMIN_PORT" "$CRACKBOX" ";mode=ask;deny=$deny"
}

start_crackbox-socks5() {
    start_crackbox_as crackbox-socks5 "$SOCKS_FORWARD_PORT" "$SOCKS_ADMIN_PORT" "$CRACKBOX" "" \
        CRACKBOX_SOCKS_ADDR="127.0.0.1:$SOCKS_PORT" && wait_for 20 socks_ready "$SOCKS_PORT"
}

start_squid() {
    command -v squid >/dev/null || { log "squid is not installed"; return 1; }
    local dir=$OUT/squid
    mkdir -p "$dir"
    cat >"$dir/squid.conf" <<EOF
http_port 127.0.0.1:$SQUID_PORT
workers 1
acl allowed_dst dstdomain .$ALLOWED
acl test_ports port $ECHO_PORT $HTTP_PORT
acl CONNECT method CONNECT
acl local_src src 127.0.0.0/8
http_access deny CONNECT !test_ports
http_access allow local_src allowed_dst
http_access deny all
cache deny all
cache_mem 0 MB
access_log none
cache_store_log none
cache_log $dir/cache.log
pid_filename none
coredump_dir $dir
max_filedescriptors 20000
shutdown_lifetime 0 seconds
dns_nameservers 127.0.0.1
via off
forwarded_for delete
EOF
    chown -R proxy "$dir" 2>/dev/null || chmod 777 "$dir"
    start squid "$PROXY_CORE" squid -N -f "$dir/squid.conf"
    PID_OF[squid]=$LAST_PID
    wait_for 20 proxy_ready "$SQUID_PORT"
}

start_tinyproxy() {
    command -v tinyproxy >/dev/null || { log "tinyproxy is not installed"; return 1; }
    local dir=$OUT/tinyproxy
    mkdir -p "$dir"
    printf '^%s$\n' "${ALLOWED//./\\.}" >"$dir/filter"
    cat >"$dir/tinyproxy.conf" <<EOF
Port $TINYPROXY_PORT
Listen 127.0.0.1
Timeout 600
MaxClients 20000
Allow 127.0.0.0/8
ConnectPort $ECHO_PORT
ConnectPort $HTTP_PORT
Filter "$dir/filter"
FilterType ere
FilterDefaultDeny Yes
LogLevel Critical
LogFile "$dir/tinyproxy.log"
DisableViaHeader Yes
EOF
    chmod 755 "$dir"
    chmod 644 "$dir"/*
    start tinyproxy "$PROXY_CORE" tinyproxy -d -c "$dir/tinyproxy.conf"
    PID_OF[tinyproxy]=$LAST_PID
    wait_for 20 proxy_ready "$TINYPROXY_PORT"
}

# A plain GET through the relay on port $1 is answered 200.
http_ready() {
    local reply
    reply=$(timeout 5 curl -s -o /dev/null -w '%{http_code}' --noproxy '' -x "http://127.0.0.1:$1" \
        "http://$ALLOWED:$HTTP_PORT/r/0/0") || return 1
    [[ $reply == 200 ]]
}

# nginx as a plain HTTP relay: absolute-URI GETs to the http upstream over
# pooled keep-alive connections, no policy; one process, pinned like the others.
start_nginx() {
    command -v nginx >/dev/null || { log "nginx is not installed"; return 1; }
    local dir=$OUT/nginx
    mkdir -p "$dir/logs"
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 16000; }
http {
    access_log off;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    upstream allowed_http {
        server 127.0.0.1:$HTTP_PORT;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://allowed_http;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    start nginx "$PROXY_CORE" nginx -p "$dir" -e "$dir/logs/error.log" -c "$dir/nginx.conf"
    PID_OF[nginx]=$LAST_PID
    wait_for 20 http_ready "$NGINX_PORT"
}

# The bare relay: compiled from source into $OUT, no policy but the allowed name.
start_bare() {
    command -v cc >/dev/null || { log "no C compiler (cc): skipping bare"; return 1; }
    log "compiling the bare relay"
    timeout 120 cc -O2 -o "$OUT/bare-relay" "$ROOT/benches/bare-relay/relay.c" >"$OUT/bare.log" 2>&1 || return 1
    start bare "$PROXY_CORE" "$OUT/bare-relay" "$BARE_PORT" "$ALLOWED"
    PID_OF[bare]=$LAST_PID
    wait_for 20 proxy_ready "$BARE_PORT"
}

proxy_port() {
    case $1 in
        bare) echo "$BARE_PORT" ;;
        crackbox) echo "$CRACKBOX_PORT" ;;
        crackbox-epoll) echo "$EPOLL_PORT" ;;
        crackbox-socks5) echo "$SOCKS_PORT" ;;
        crackbox-base) echo "$BASE_BIN_PORT" ;;
        crackbox-capped) echo "$CAPPED_PORT" ;;
        crackbox-asking) echo "$ASKING_PORT" ;;
        squid) echo "$SQUID_PORT" ;;
        tinyproxy) echo "$TINYPROXY_PORT" ;;
        nginx) echo "$NGINX_PORT" ;;
    esac
}

# Runs one mode against one target, appending its JSON line to $RESULTS.
measure() {
    local target=$1 limit=$2
    shift 2
    local args=(--label "$target" --json)
    if [[ $target != direct ]]; then
        args+=(--proxy "127.0.0.1:$(proxy_port "$target")" --proxy-pid "${PID_OF[$target]}")
    fi
    [[ $target == crackbox-socks5 ]] && args+=(--socks5)
    log "$target $1"
    timeout --kill-after=5 "$limit" taskset -c "$LOAD_CORE" "$LOAD" "$@" "${args[@]}" \
        >>"$RESULTS" 2>>"$OUT/load.log" || log "$target $1: failed (exit $?), see $OUT/load.log"
    tail -n 1 "$OUT/load.log" >&2
}

# Whether target $2 cannot run mode $1: the direct path has nothing to deny,
# the bare relay forwards no plain HTTP, SOCKS5 speaks no HTTP to the proxy,
# nginx only relays plain HTTP (no CONNECT, no policy to deny with).
skipped() {
    case $2:$1 in
        direct:denied | bare:http-* | crackbox-socks5:http-* | crackbox-socks5:denied | crackbox-asking:denied) return 0 ;;
        nginx:http-*) return 1 ;;
        nginx:*) return 0 ;;
        *) return 1 ;;
    esac
}

# Stops target $1 and starts it again (same ports, a new process).
restart() {
    stop_pid "${PID_OF[$1]}"
    "start_$1" || { log "$1 did not restart; see $OUT/$1.log"; return 1; }
}

# Runs one mode once against target $2.
run_mode() {
    local mode=$1 t=$2
    if skipped "$mode" "$t"; then
        log "$t $mode: skipped (not a mode this target can run)"
        return 0
    fi
    case $mode in
        connect-bulk) measure "$t" 300 connect-bulk --target "$ALLOWED:$ECHO_PORT" --mib "$BULK_MIB" ;;
        connect-rate) measure "$t" $((DURATION + 60)) connect-rate --target "$ALLOWED:$ECHO_PORT" \
            --workers "$WORKERS" --duration "$DURATION" ;;
        http-keepalive) measure "$t" $((DURATION + 60)) http-rate --target "$ALLOWED:$HTTP_PORT" \
            --workers "$WORKERS" --duration "$DURATION" ;;
        http-newconn) measure "$t" $((DURATION + 60)) http-rate --target "$ALLOWED:$HTTP_PORT" \
            --workers "$WORKERS" --duration "$DURATION" --new-connection ;;
        echo-latency) measure "$t" 120 echo-latency --target "$ALLOWED:$ECHO_PORT" --count "$ECHO_COUNT" ;;
        idle) measure "$t" 300 idle --target "$ALLOWED:$ECHO_PORT" --tunnels "$IDLE_TUNNELS" \
            --bind "$IDLE_SOURCES" --hold 2 --open-limit 180 ;;
        denied) measure "$t" $((DURATION + 60)) denied --target "$DENIED" \
            --workers "$WORKERS" --duration "$DURATION" ;;
        *) log "unknown mode $mode" ;;
    esac
}

run_modes() {
    local t mode round
    local modes=(${MODES:-connect-bulk connect-rate http-keepalive http-newconn echo-latency idle denied})
    local order=()
    for mode in "${modes[@]}"; do
        for round in $(seq "$ROUNDS"); do
            # Every other round the other way round, so no target always
            # runs first (or right after the same neighbour).
            order=("${RUNNING[@]}")
            if ((round % 2 == 0)); then
                order=()
                for ((i = ${#RUNNING[@]} - 1; i >= 0; i--)); do order+=("${RUNNING[i]}"); done
            fi
            for t in "${order[@]}"; do
                # Memory freed by the last round is reused, not grown into:
                # each idle round after the first gets a fresh process.
                if [[ $mode == idle && $round -gt 1 && $t != direct ]]; then
                    restart "$t" || continue
                fi
                run_mode "$mode" "$t"
            done
        done
    done
}

main() {
    ulimit -n "$(ulimit -Hn)"
    install_peers
    build
    local port
    for port in "$ECHO_PORT" "$HTTP_PORT" "$CRACKBOX_PORT" "$ADMIN_PORT" "$SQUID_PORT" "$TINYPROXY_PORT" \
        "$EPOLL_PORT" "$EPOLL_ADMIN_PORT" "$BARE_PORT" "$SOCKS_FORWARD_PORT" "$SOCKS_ADMIN_PORT" "$SOCKS_PORT" \
        "$BASE_BIN_PORT" "$BASE_BIN_ADMIN_PORT" "$CAPPED_PORT" "$CAPPED_ADMIN_PORT" "$NGINX_PORT"; do
        port_free "$port" || { log "port $port is in use; set BASE_PORT"; exit 2; }
    done
    LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
    start_upstream
    RUNNING=()
    local t
    for t in $TARGETS; do
        if [[ $t == direct ]] || "start_$t"; then
            RUNNING+=("$t")
        else
            log "$t did not start; see $OUT/$t.log"
        fi
    done
    run_modes
    {
        echo "crackbox compare: $(date -u '+%Y-%m-%d %H:%M UTC'), QUICK=$QUICK"
        echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -sr)"
        echo "load average before / after: $LOAD_BEFORE / $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "proxy on core $PROXY_CORE, load + upstream on core $LOAD_CORE; results in $RESULTS"
        echo
        "$LOAD" report "$RESULTS"
    } | tee "$OUT/table.txt"
}

main "$@"
