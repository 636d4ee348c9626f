#!/usr/bin/env bash
# Seconds one `crackbox run` adds over a plain `docker run` of the same
# command: N runs of each (interleaved), medians and their difference.
#
#   deploy/measure-run-overhead.sh [N]     # default 10
#
# Env: CRACKBOX (binary, default target/release/crackbox), IMAGE (workload
# image, default crackbox-workload:latest from build-workload-image.sh),
# CRACKBOX_IMAGE (proxy image, default: the one `run` builds from its binary,
# built before the first measured run), DAEMON (measure
# `run --daemon DAEMON` behind that running crackbox container instead of a
# per-run proxy; its secret is read from its environment or
# CRACKBOX_ADMIN_SECRET).
set -euo pipefail

n="${1:-10}"
crackbox="${CRACKBOX:-target/release/crackbox}"
image="${IMAGE:-crackbox-workload:latest}"
daemon=()
if [ -n "${DAEMON:-}" ]; then daemon=(--daemon "$DAEMON"); fi

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

# The first per-run proxy run may build the proxy image: not measured.
"$crackbox" run --quiet --allow none.invalid "${daemon[@]}" --image "$image" -- true </dev/null

plain=()
jailed=()
for _ in $(seq 1 "$n"); do
    t0=$(now)
    docker run --rm "$image" true
    t1=$(now)
    "$crackbox" run --quiet --allow none.invalid "${daemon[@]}" --image "$image" -- true </dev/null
    t2=$(now)
    plain+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
    jailed+=("$(awk -v a="$t1" -v b="$t2" 'BEGIN {print b - a}')")
done
p=$(printf '%s\n' "${plain[@]}" | median)
j=$(printf '%s\n' "${jailed[@]}" | median)
printf 'docker run:   median %.3f s over %d runs\n' "$p" "$n"
printf 'crackbox run: median %.3f s over %d runs\n' "$j" "$n"
printf 'added:        %.3f s\n' "$(awk -v a="$p" -v b="$j" 'BEGIN {print b - a}')"
