#!/usr/bin/env bash
# The screenshots of docs/console.md, made again from a real daemon: builds
# crackbox and the console bench, starts `crackbox proxy serve` on loopback
# with a few sandboxes, held requests, traffic and grants, and has a
# headless Chromium (chromium + chromium-driver, as .ci/packages.sh
# installs them) take the inbox, the sandboxes list and one sandbox's page.
# The daemon, chromedriver and Chromium are stopped at the end, by pid.
#
#   deploy/console-screenshots.sh            # writes docs/images/console-*.png
#
# Env: OUT (directory, default docs/images), CRACKBOX_BIN (a prebuilt crackbox).
# Only loopback traffic; nothing is resolved or dialled but a local echo.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-docs/images}
if [ -z "${CRACKBOX_BIN:-}" ]; then
    cargo build --release -p crackbox
    CRACKBOX_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/crackbox"
fi
cargo build --release -p crackbox-benches --bin crackbox-console-bench
timeout 300 "${CARGO_TARGET_DIR:-$ROOT/target}/release/crackbox-console-bench" --crackbox "$CRACKBOX_BIN" screenshots --out "$OUT"
