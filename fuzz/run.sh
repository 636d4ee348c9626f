#!/usr/bin/env bash
# Builds every fuzz target once, then runs each for SECONDS seconds, two at a
# time (one per core), starting from the committed seeds plus whatever the
# local corpus (fuzz/corpus/, not committed) has grown. Exits non-zero when
# any target crashes, hangs or fails an invariant; the input that did it is
# left in fuzz/artifacts/<target>/ and the log tail is printed.
#
#   fuzz/run.sh SECONDS
#
# Environment: FUZZ_JOBS (targets run at once, default 2), FUZZ_TARGETS
# (space-separated subset), FUZZ_SANITIZER (address or none, default address).
set -euo pipefail

seconds=${1:?usage: fuzz/run.sh SECONDS}
jobs=${FUZZ_JOBS:-2}
sanitizer=${FUZZ_SANITIZER:-address}
targets=(${FUZZ_TARGETS:-http_head tls_peek allowlist match_host wire admin_body})
cd "$(dirname "${BASH_SOURCE[0]}")"

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

# cargo-fuzz needs -Z flags: use a nightly toolchain when one is installed,
# otherwise let the stable compiler accept them.
cargo=(cargo)
if rustup run nightly rustc --version >/dev/null 2>&1; then
    cargo=(cargo +nightly)
else
    export RUSTC_BOOTSTRAP=1
fi

started=$SECONDS
"${cargo[@]}" fuzz build --sanitizer "$sanitizer"
echo "fuzz: built ${#targets[@]} targets in $((SECONDS - started)) s"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Options per target: the transparent plane buffers up to 18 KiB of
# ClientHello, so tls_peek inputs may be that long.
options() {
    case $1 in
        tls_peek) echo "-max_len=20480" ;;
        *) echo "" ;;
    esac
}

run_target() {
    local target=$1
    mkdir -p "corpus/$target"
    # shellcheck disable=SC2046
    "${cargo[@]}" fuzz run --sanitizer "$sanitizer" "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 $(options "$target") \
        >"$logs/$target.log" 2>&1
}

report() {
    local target=$1 status=$2 log=$logs/$1.log
    local runs rate
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if [ "$status" -eq 0 ]; then
        echo "fuzz: $target ok: ${runs:-?} execs, ${rate:-?}/s"
    else
        echo "fuzz: $target FAILED (exit $status); log tail:"
        tail -n 40 "$log"
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

echo "fuzz: done in $((SECONDS - started)) s"
exit "$failed"
