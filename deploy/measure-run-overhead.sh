#!/usr/bin/env bash
# Seconds one `crackbox run` adds over a plain `docker run --rm --network none`
# of the same image and command: N runs of each (interleaved), medians, their
# difference, and the median of each step of the crackbox runs (from the
# debug spans `run` logs with CRACKBOX_LOG=crackbox_run=debug).
#
#   deploy/measure-run-overhead.sh [N]     # default 10
#
# Env: CRACKBOX (binary, default target/release/crackbox), IMAGE (workload
# image, default crackbox-workload:latest from build-workload-image.sh),
# CRACKBOX_IMAGE (proxy image, default: the one `run` builds from its binary,
# built before the first measured run), DAEMON (measure
# `run --daemon DAEMON` behind that running crackbox container instead of a
# per-run proxy; its secret is read from its environment or
# CRACKBOX_ADMIN_SECRET; DAEMON=start starts a throwaway one from
# CRACKBOX_IMAGE on a network of its own and removes both at the end).
# The first crackbox run (unmeasured) builds what a run builds once: the
# proxy image, or the daemon's pool of jail networks.
set -euo pipefail

n="${1:-10}"
crackbox="${CRACKBOX:-target/release/crackbox}"
image="${IMAGE:-crackbox-workload:latest}"
work="$(mktemp -d)"
started=""
cleanup() {
    if [ -n "$started" ]; then
        docker rm -f "$started" $(docker ps -aq --filter "label=io.crackbox.pool=$started") >/dev/null 2>&1 || true
        for net in $(docker network ls -q --filter "label=io.crackbox.pool=$started"); do
            docker network rm "$net" >/dev/null 2>&1 || true
        done
        docker network rm "$started" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# A daemon as README's set-up starts one, its admin API on a network of its
# own that the host reaches and jails never join.
start_daemon() {
    local name="crackbox-measure-$$" subnet ip
    : "${CRACKBOX_IMAGE:?DAEMON=start needs CRACKBOX_IMAGE (deploy/build-image.sh builds one)}"
    for third in $(seq 10 120); do
        subnet="10.213.$third.0/28"
        if docker network create --internal --subnet "$subnet" "$name" >/dev/null 2>&1; then
            ip="10.213.$third.14"
            break
        fi
    done
    [ -n "${ip:-}" ] || { echo "measure-run-overhead: no free subnet for the daemon" >&2; exit 1; }
    started="$name"
    docker run -d --name "$name" --network "$name" --ip "$ip" \
        -e CRACKBOX_ADMIN_SECRET="measure-$$" "$CRACKBOX_IMAGE" \
        proxy serve --admin "$ip:3129" --transparent "" >/dev/null
    for _ in $(seq 1 100); do
        if curl -s -m 1 "http://$ip:3129/health" | grep -q ok; then
            DAEMON="$name"
            return
        fi
        sleep 0.1
    done
    echo "measure-run-overhead: the daemon never answered /health" >&2
    exit 1
}

daemon=()
if [ "${DAEMON:-}" = start ]; then start_daemon; fi
if [ -n "${DAEMON:-}" ]; then daemon=(--daemon "$DAEMON"); fi

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR) print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
# One crackbox run, its log in $work/log (shown when it fails).
crackbox_run() {
    CRACKBOX_LOG=crackbox_run=debug CRACKBOX_LOG_FORMAT=text NO_COLOR=1 \
        "$crackbox" run --quiet --allow x "${daemon[@]}" --image "$image" -- true </dev/null 2>"$work/log" ||
        { cat "$work/log" >&2; echo "measure-run-overhead: crackbox run failed" >&2; exit 1; }
}

# Step spans close as `step{name="network create"}: ... close
# time.busy=1.2ms time.idle=3ms`: one "name seconds" line per step.
steps() {
    sed -n 's/.*step{name="\([^"]*\)"}.* close time.busy=\([0-9.]*\)\([µnm]*s\) time.idle=\([0-9.]*\)\([µnm]*s\).*/\1|\2 \3|\4 \5/p' |
        awk -F'|' '
            function sec(v,   p) { split(v, p, " "); return p[1] * (p[2] == "s" ? 1 : p[2] == "ms" ? 1e-3 : p[2] == "µs" ? 1e-6 : 1e-9) }
            { printf "%s|%.6f\n", $1, sec($2) + sec($3) }'
}

crackbox_run

plain=()
jailed=()
for i in $(seq 1 "$n"); do
    t0=$(now)
    docker run --rm --network none "$image" true
    t1=$(now)
    crackbox_run
    t2=$(now)
    plain+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
    jailed+=("$(awk -v a="$t1" -v b="$t2" 'BEGIN {print b - a}')")
    steps <"$work/log" | sed "s/^/$i|/" >>"$work/steps"
done
p=$(printf '%s\n' "${plain[@]}" | median)
j=$(printf '%s\n' "${jailed[@]}" | median)
printf 'docker run:   median %.3f s over %d runs\n' "$p" "$n"
printf 'crackbox run: median %.3f s over %d runs\n' "$j" "$n"
printf 'added:        %.3f s\n' "$(awk -v a="$p" -v b="$j" 'BEGIN {print b - a}')"
echo "crackbox run by step (median over the runs that took the step; steps overlap where they run concurrently):"
cut -d'|' -f2 "$work/steps" | awk '!seen[$0]++' | while IFS= read -r step; do
    m=$(awk -F'|' -v s="$step" '$2 == s {t[$1] += $3} END {for (r in t) print t[r]}' "$work/steps" | median)
    printf '  %-18s %7.1f ms\n' "$step" "$(awk -v m="$m" 'BEGIN {print m * 1000}')"
done
