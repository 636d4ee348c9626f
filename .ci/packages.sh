#!/usr/bin/env bash
# Installs the system packages the tests use (as root on Debian) and
# cargo-nextest, when missing. Idempotent: a second run installs nothing.
# protobuf-compiler and libprotobuf-dev (protoc and its well-known .proto
# files) build the etcd client; etcd-server and etcd-client (etcd 3.4) run
# the fleet tests' cluster; strace counts syscalls in crackbox-cost's tests.
set -euo pipefail

packages=(curl python3 iptables iproute2 openssl procps psmisc busybox-static squid tinyproxy docker.io nodejs netcat-openbsd protobuf-compiler libprotobuf-dev etcd-server etcd-client chromium chromium-driver strace)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest
