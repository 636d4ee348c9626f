#!/usr/bin/env bash
# The operator console's benchmark (docs/console.md, benches/README.md), one
# run: the page in headless Chromium with 500 sandboxes and 200 held
# requests (first render, sandboxes list, CONNECT-to-row latency), then the
# engine's CPU per allowed tunnel with five console subscribers on
# /v1/events against none, in alternating phases of one daemon, the daemon
# pinned to PROXY_CORE and the load to LOAD_CORE (as compare.sh pins them).
#
#   benches/console.sh                 # both parts (about two minutes)
#
# Knobs (env): SANDBOXES (500), PENDING (200), SAMPLES (20), SUBSCRIBERS (5),
# ROUNDS (3: phases of each kind), PHASE_SECONDS (5 per phase), WORKERS (4),
# PROXY_CORE (0), LOAD_CORE (1), CRACKBOX_BIN (a prebuilt crackbox).
# Only loopback traffic; every step is bounded by `timeout`; only processes
# this run started are stopped, by pid.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
if [ -z "${CRACKBOX_BIN:-}" ]; then
    cargo build --release -p crackbox
    CRACKBOX_BIN="$TARGET_DIR/release/crackbox"
fi
cargo build --release -p crackbox-benches --bin crackbox-console-bench
BENCH="$TARGET_DIR/release/crackbox-console-bench"

echo "== the page: ${SANDBOXES:-500} sandboxes, ${PENDING:-200} held requests"
timeout 600 "$BENCH" --crackbox "$CRACKBOX_BIN" render \
    --sandboxes "${SANDBOXES:-500}" --pending "${PENDING:-200}" --samples "${SAMPLES:-20}"
echo "== the data plane: ${SUBSCRIBERS:-5} subscribers against none"
timeout 600 taskset -c "${LOAD_CORE:-1}" "$BENCH" --crackbox "$CRACKBOX_BIN" subscribers \
    --subscribers "${SUBSCRIBERS:-5}" --rounds "${ROUNDS:-3}" --seconds "${PHASE_SECONDS:-5}" \
    --workers "${WORKERS:-4}" --daemon-cpus "${PROXY_CORE:-0}"
