#!/usr/bin/env bash
# Builds the crackbox image with no base-image pull: a FROM-scratch root file
# system holding the crackbox binary (and, for a dynamically linked binary,
# the shared libraries it needs), imported with `docker import`.
#
#   deploy/build-image.sh                  # static release build -> crackbox:latest
#   deploy/build-image.sh --tag NAME:TAG   # another tag
#   deploy/build-image.sh --binary PATH    # package an existing binary (static or dynamic)
#
# The static build is `RUSTFLAGS='-C target-feature=+crt-static' cargo build
# --release --target <host>-unknown-linux-gnu -p crackbox`. glibc >= 2.34 has
# the `files` and `dns` NSS modules built in, so name resolution (/etc/hosts
# and the resolv.conf Docker mounts into the container) works from scratch.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag="crackbox:latest"
binary=""

while [ $# -gt 0 ]; do
    case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build-image: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ -z "$binary" ]; then
    target="$(uname -m)-unknown-linux-gnu"
    (cd "$repo" && RUSTFLAGS='-C target-feature=+crt-static' \
        cargo build --release --locked --target "$target" -p crackbox)
    binary="${CARGO_TARGET_DIR:-$repo/target}/$target/release/crackbox"
fi
if [ ! -x "$binary" ]; then
    echo "build-image: $binary is not an executable" >&2
    exit 1
fi

rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/run" "$rootfs/var/lib/crackbox"
chmod 1777 "$rootfs/tmp" "$rootfs/run"
chown 65534:65534 "$rootfs/var/lib/crackbox"
cp "$binary" "$rootfs/usr/local/bin/crackbox"
if command -v strip >/dev/null 2>&1; then
    strip --strip-debug "$rootfs/usr/local/bin/crackbox"
fi
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
printf 'root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"

# A dynamically linked binary brings its loader and libraries along.
for lib in $(ldd "$binary" 2>/dev/null | grep -o '/[^ ]*' || true); do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
done

tar -C "$rootfs" --numeric-owner -c . | docker import \
    --change 'ENTRYPOINT ["/usr/local/bin/crackbox"]' \
    --change 'CMD ["proxy", "serve"]' \
    --change 'USER 65534:65534' \
    --change 'EXPOSE 3128 3129' \
    - "$tag" >/dev/null
echo "build-image: built $tag from $binary"
