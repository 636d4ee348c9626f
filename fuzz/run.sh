#!/usr/bin/env bash
# Builds every fuzz target once, then runs each for SECONDS seconds, two at a
# time (one per core), starting from the committed seeds plus whatever the
# local corpus (fuzz/corpus/, not committed) has grown. Exits non-zero when
# any target crashes, hangs or fails an invariant; the input that did it is
# left in fuzz/artifacts/<target>/ and the log from the failure on is printed.
#
#   fuzz/run.sh SECONDS
#
# Environment: FUZZ_JOBS (targets run at once, default 2), FUZZ_TARGETS
# (space-separated subset), FUZZ_SANITIZER (address or none, default address).
#
# No cargo-fuzz needed: the targets are built by plain cargo with the flags
# `cargo fuzz build` uses (cargo-fuzz 0.13, src/project.rs) and the libFuzzer
# binaries are run directly with the arguments `cargo fuzz run` adds. The
# stable toolchain accepts the one unstable flag (-Zsanitizer) under
# RUSTC_BOOTSTRAP=1. Only CXXFLAGS (libFuzzer's C++, below) differ from a
# plain `cargo fuzz run`; with the same CXXFLAGS the two share one build.
set -euo pipefail

seconds=${1:?usage: fuzz/run.sh SECONDS}
jobs=${FUZZ_JOBS:-2}
sanitizer=${FUZZ_SANITIZER:-address}
read -ra targets <<<"${FUZZ_TARGETS:-http_head tls_peek allowlist match_host wire admin_body socks5 decide_body}"
cd "$(dirname "${BASH_SOURCE[0]}")"

export RUSTC_BOOTSTRAP=1
triple=$(rustc -vV | sed -n 's/^host: //p')

# Coverage for libFuzzer (sancov with inline 8-bit counters, PC table,
# compare tracing and stack depth), `cfg(fuzzing)`, no branch folding (keeps
# the comparisons the fuzzer steers by), debug assertions and overflow checks
# on an optimised build, and one codegen unit so ThinLTO can still inline
# through the instrumented code.
rustflags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    --cfg fuzzing
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0
)
case $sanitizer in
    none) ;;
    address) rustflags+=("-Zsanitizer=$sanitizer") ;;
    *) echo "fuzz: FUZZ_SANITIZER must be address or none, not $sanitizer" >&2; exit 2 ;;
esac
case $triple in
    *-linux-*) rustflags+=(-Cllvm-args=-sanitizer-coverage-stack-depth) ;;
esac
rustflags+=(-Cdebug-assertions -Ccodegen-units=1)
# The caller's RUSTFLAGS come last so they can override these.
export RUSTFLAGS="${rustflags[*]}${RUSTFLAGS:+ $RUSTFLAGS}"
if [ "$sanitizer" = address ]; then
    # Rust generics instantiated in several crates look like ODR violations.
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0"
fi
# libFuzzer's own C++ (libfuzzer-sys, built by cc) is the longest build step.
# Build it as LLVM does, without a sanitizer (cc would follow -Zsanitizer into
# it), and with line tables only (cc makes "line-tables-only" a full -g):
# that more than halves its build and speeds up every run.
export CXXFLAGS="-g1 -fno-sanitize=address${CXXFLAGS:+ $CXXFLAGS}"

# An explicit --target keeps RUSTFLAGS (and so the instrumentation and the
# sanitizer) away from build scripts and proc-macros, which run on the host.
bins=()
for target in "${targets[@]}"; do
    bins+=(--bin "$target")
done
build_started=$SECONDS
cargo build --manifest-path Cargo.toml --target "$triple" --release \
    --config 'profile.release.debug="line-tables-only"' "${bins[@]}"
echo "fuzz: built ${#targets[@]} targets in $((SECONDS - build_started)) s"

target_dir=$(cargo metadata --manifest-path Cargo.toml --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin_dir=$target_dir/$triple/release

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Options per target: the transparent plane buffers up to 18 KiB of
# ClientHello, so tls_peek inputs may be that long.
options() {
    case $1 in
        tls_peek) echo "-max_len=20480" ;;
        *) ;;
    esac
}

run_target() {
    local target=$1 extra
    read -ra extra <<<"$(options "$target")"
    mkdir -p "corpus/$target" "artifacts/$target"
    # The first corpus folder receives the new inputs; the seeds are only read.
    "$bin_dir/$target" -artifact_prefix="artifacts/$target/" \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 "${extra[@]}" \
        "corpus/$target" "seeds/$target" >"$logs/$target.log" 2>&1
}

# Prints a failed run's log from where the failure starts (a panic, a
# sanitizer or libFuzzer error, a timeout alarm) plus its last lines, which
# name the input kept in artifacts/; a short log is printed whole.
show_failure() {
    local log=$1 first lines
    first=$(grep -n -m1 -E '==[0-9]+== ?ERROR|panicked at|^ALARM' "$log" | cut -d: -f1)
    lines=$(wc -l <"$log")
    if [ -z "$first" ]; then
        tail -n 40 "$log"
    elif [ $((lines - first)) -lt 60 ]; then
        tail -n "+$first" "$log"
    else
        sed -n "${first},$((first + 39))p" "$log"
        echo "[...]"
        tail -n 12 "$log"
    fi
}

report() {
    local target=$1 status=$2 log=$logs/$1.log
    local runs rate input
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if [ "$status" -eq 0 ]; then
        echo "fuzz: $target ok: ${runs:-?} execs, ${rate:-?}/s"
    else
        echo "fuzz: $target FAILED (exit $status); log:"
        show_failure "$log"
        input=$(sed -n 's/.*Test unit written to //p' "$log" | tail -1)
        echo "fuzz: replay in fuzz/: ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS }$bin_dir/$target ${input:-artifacts/$target/<file>}"
    fi
}

failed=0
running=()
finish_oldest() {
    local target=${running[0]%%:*} pid=${running[0]#*:} status=0
    wait "$pid" || status=$?
    report "$target" "$status"
    [ "$status" -eq 0 ] || failed=1
    running=("${running[@]:1}")
}

started=$SECONDS
for target in "${targets[@]}"; do
    run_target "$target" &
    running+=("$target:$!")
    if [ "${#running[@]}" -ge "$jobs" ]; then
        finish_oldest
    fi
done
while [ "${#running[@]}" -gt 0 ]; do
    finish_oldest
done

echo "fuzz: ran ${#targets[@]} targets in $((SECONDS - started)) s, $((SECONDS - build_started)) s with the build"
exit "$failed"
