# Sourced by .ci/run and .ci/test.sh: nothing a CI step does may be left in
# /tmp, /etc or /etc/netns. Each takes the entries there before its steps
# (after starting its dockerd, which keeps its own files in /etc and its log
# in /tmp until it stops) and checks them again once they ran (after
# stopping that dockerd).

# The entries of /tmp, /etc and /etc/netns, sorted.
system_entries() {
    # /etc/netns may not exist (find then exits 1, which must not end the run).
    { find /tmp /etc /etc/netns -mindepth 1 -maxdepth 1 2>/dev/null || true; } | sort
}

# Says what is there now and was not in $1 (what `system_entries` gave
# before), and fails if anything is; $2 names what ran in between.
check_leftovers() {
    local left
    left="$(comm -13 <(echo "$1") <(system_entries))"
    if [ -n "$left" ]; then
        echo "ci: $2 left these in /tmp and /etc:" >&2
        echo "$left" >&2
        return 1
    fi
    echo "ci: $2 left nothing in /tmp or /etc"
}
