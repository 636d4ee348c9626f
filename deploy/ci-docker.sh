#!/usr/bin/env bash
# Makes a Docker engine available on a Debian machine, idempotently:
# installs docker.io when dockerd is missing, starts dockerd in the background
# when none answers, and waits until `docker info` works.
#
#   deploy/ci-docker.sh [start] [--owner FILE]   # FILE: written only if this call starts dockerd
#   deploy/ci-docker.sh stop FILE                 # stops the dockerd FILE names, if any
#
# A dockerd this script starts writes its PID to $CRACKBOX_DOCKERD_PIDFILE
# (default /run/crackbox-ci-dockerd.pid, so a second caller waits for it
# rather than starting another) and logs to $CRACKBOX_DOCKERD_LOG (default
# /tmp/crackbox-ci-dockerd.log). Only the caller whose `start --owner FILE`
# started it gets FILE, and `stop FILE` stops only that dockerd, and removes
# its log: an engine that was already running, or that another caller
# started, is never stopped. The dockerd and the containerd it runs get a
# TMPDIR of their own ($CRACKBOX_DOCKERD_TMPDIR, default
# /tmp/crackbox-ci-dockerd.tmp): when dockerd finds its containerd not
# answering (a machine saturated by tests can do that), it restarts it and
# first asks it for a goroutine dump, which containerd writes to TMPDIR. `stop`
# shows such a dump's first lines on stderr and removes the directory with the
# log. Exits non-zero when Docker cannot be made to work, with the
# reason on stderr.
set -euo pipefail

pidfile="${CRACKBOX_DOCKERD_PIDFILE:-/run/crackbox-ci-dockerd.pid}"
logfile="${CRACKBOX_DOCKERD_LOG:-/tmp/crackbox-ci-dockerd.log}"
tmpdir="${CRACKBOX_DOCKERD_TMPDIR:-/tmp/crackbox-ci-dockerd.tmp}"

docker_ok() {
    timeout 10 docker info >/dev/null 2>&1
}

# The PID in the pid file, if that process is still a dockerd (a stale file
# from an earlier boot may name an unrelated process by now).
our_dockerd() {
    local pid
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
    echo "$pid"
}

wait_for_dpkg_lock() {
    local i
    for i in $(seq 1 300); do
        if ! fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock >/dev/null 2>&1; then
            return 0
        fi
        sleep 2
    done
    echo "ci-docker: dpkg lock still held after 10 minutes" >&2
    return 1
}

install_docker() {
    if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
        return 0
    fi
    wait_for_dpkg_lock
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    wait_for_dpkg_lock
    apt-get install -y -q docker.io >/dev/null
}

start_dockerd() {
    if docker_ok; then
        return 0
    fi
    local pid
    if pid="$(our_dockerd)"; then
        echo "ci-docker: dockerd $pid is starting; waiting" >&2
    else
        # A socket left by a dockerd that died would make the new one refuse to start.
        rm -f /var/run/docker.sock
        mkdir -p "$tmpdir"
        TMPDIR="$tmpdir" nohup dockerd >"$logfile" 2>&1 &
        pid=$!
        echo "$pid" >"$pidfile"
        if [ -n "$owner" ]; then
            echo "$pid" >"$owner"
        fi
    fi
    local i
    for i in $(seq 1 60); do
        if docker_ok; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "ci-docker: dockerd exited; last log lines:" >&2
            tail -n 20 "$logfile" >&2 || true
            return 1
        fi
        sleep 1
    done
    echo "ci-docker: dockerd did not answer within 60 s (log: $logfile)" >&2
    return 1
}

stop_dockerd() {
    local pid
    [ -f "$owner" ] || return 0
    pid="$(cat "$owner")"
    rm -f "$owner"
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 0
    kill -TERM "$pid"
    local i
    for i in $(seq 1 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    if [ "$(cat "$pidfile" 2>/dev/null)" = "$pid" ]; then
        rm -f "$pidfile"
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        report_dumps
        rm -f "$logfile"
        rm -rf "$tmpdir"
    fi
}

# Says on stderr that dockerd restarted its containerd, if it did, with the
# first lines of each goroutine dump containerd left in its TMPDIR.
report_dumps() {
    local dump
    for dump in "$tmpdir"/containerd.*.stacks.log; do
        [ -f "$dump" ] || continue
        echo "ci-docker: dockerd restarted a containerd that stopped answering; its dump:" >&2
        head -n 20 "$dump" >&2 || true
    done
}

usage() {
    echo "usage: $0 [start] [--owner FILE] | stop FILE" >&2
    exit 2
}

owner=""
case "${1:-start}" in
start | --owner)
    [ "${1:-}" = start ] && shift
    if [ "${1:-}" = --owner ]; then
        [ $# -eq 2 ] || usage
        owner="$2"
    elif [ $# -ne 0 ]; then
        usage
    fi
    install_docker
    start_dockerd
    ;;
stop)
    [ $# -eq 2 ] || usage
    owner="$2"
    stop_dockerd
    ;;
*)
    usage
    ;;
esac
