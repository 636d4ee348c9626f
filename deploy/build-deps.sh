#!/usr/bin/env bash
# What building crackbox needs besides Rust: protoc and its well-known
# .proto files (the fleet's etcd client compiles etcd's protocol at build
# time). On Debian or Ubuntu, as root, installs protobuf-compiler and
# libprotobuf-dev when missing; elsewhere, says what to install. Idempotent:
# with protoc on the PATH (or PROTOC set) it does nothing.
set -euo pipefail

if [ -n "${PROTOC:-}" ] || command -v protoc >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
    echo "crackbox's build needs protoc: install protobuf-compiler (Debian, Ubuntu), protobuf (Fedora, Arch, Homebrew), or set PROTOC to its path" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends protobuf-compiler libprotobuf-dev
