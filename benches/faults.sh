#!/usr/bin/env bash
# Fault and load figures (issue 7) from an optimised build: runs the
# measuring end-to-end tests (revocation, limits, faults) one test at a time
# and prints what they measured (revocation delay, idle timeout, EMFILE CPU,
# engine outage on kill -9, the well-behaved client's p99 next to 2,000
# clients, slowloris, the denied-flood slowdown ratio).
#
# Loopback only, bounded: every test stops by itself (about a minute in all
# after the build). Needs root (the full-disk test mounts a small tmpfs) and
# prlimit (util-linux). Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for test in revocation limits faults; do
    echo "== $test"
    # Figures are the test's own stderr lines; daemon logs start with an escape.
    cargo test --release -q -p crackbox --test "$test" -- --nocapture --test-threads 1 2>&1 |
        sed -E 's/^\.+//' | grep -v $'^\e' | grep -vE '^(running [0-9]+ tests?)?$'
done
