#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine, as root: installs the
# system packages the tests use, starts the Docker engine (and stops the
# one it started at exit), then runs every test. The `crackbox run` tests
# build their images from the binary under test, with no pulls; at exit the
# images that this run made are removed (those that were there before it
# stay). Nothing else may be left: the entries of /tmp, /etc and /etc/netns
# are listed before the tests and after, and anything new fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

.ci/packages.sh
# Stops at exit only a dockerd this script started (none if one was running).
dockerd_owner="$(mktemp -u /tmp/crackbox-ci-dockerd-owner.XXXXXX)"
deploy/ci-docker.sh start --owner "$dockerd_owner"

# What the tests leave behind on purpose: their images (crackbox-test*, the
# README quick start's crackbox-workload, and the jail proxy images
# crackbox:<hash> that `crackbox run` builds, and the untagged ones their
# rebuilds leave). Listed before, removed after.
test_images() {
    docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^crackbox-test|^crackbox-workload:|^crackbox:[0-9a-f]{12}$' || true
    docker images --filter dangling=true --quiet --no-trunc # the images a rebuild of those tags left untagged
}
# And what must never be left: a file or directory in /tmp, /etc or
# /etc/netns that was not there before (.ci/leftovers.sh).
source .ci/leftovers.sh
images_before="$(test_images)"
entries_before="$(system_entries)"
cleanup() {
    local status=$?
    comm -13 <(echo "$images_before" | sort) <(test_images | sort) | xargs -r docker rmi -f >/dev/null || true
    deploy/ci-docker.sh stop "$dockerd_owner"
    check_leftovers "$entries_before" "the tests" || [ "$status" -ne 0 ] || status=1
    exit "$status"
}
trap cleanup EXIT
# Docker is set up above and this runs as root, so a Docker or root-only
# (network namespace) test that would skip must fail instead; Chromium is
# installed by .ci/packages.sh, so a console test that would skip fails too.
export CRACKBOX_REQUIRE_DOCKER=1
export CRACKBOX_REQUIRE_ROOT=1
export CRACKBOX_REQUIRE_BROWSER=1

cargo nextest run --workspace --no-fail-fast
