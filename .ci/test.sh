#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine, as root: installs the
# system packages the tests use, starts the Docker engine (and stops the
# one it started at exit), then runs every test. The `crackbox run` tests
# build their images from the binary under test, with no pulls.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

.ci/packages.sh
# Stops at exit only a dockerd this script started (none if one was running).
dockerd_owner="$(mktemp -u /tmp/crackbox-ci-dockerd-owner.XXXXXX)"
deploy/ci-docker.sh start --owner "$dockerd_owner"
trap 'deploy/ci-docker.sh stop "$dockerd_owner"' EXIT
# Docker is set up above and this runs as root, so a Docker or root-only
# (network namespace) test that would skip must fail instead.
export CRACKBOX_REQUIRE_DOCKER=1
export CRACKBOX_REQUIRE_ROOT=1

cargo nextest run --workspace --no-fail-fast
