#!/usr/bin/env bash
# Builds a small workload image for tests and demos with no base-image pull:
# busybox (static, with its applets linked into /bin) plus curl and the
# shared libraries it needs, all copied from this machine; --add PROGRAM
# (repeatable) copies another installed program the same way into /usr/bin
# (e.g. node, or nc: OpenBSD netcat from Debian's netcat-openbsd; busybox's
# shell runs its own applet for a bare name, so call it /usr/bin/nc).
#
#   deploy/build-workload-image.sh [--tag NAME:TAG] [--add PROGRAM]...   # default crackbox-workload:latest
#
# Needs Debian's busybox-static and curl packages (installed when missing).
set -euo pipefail

tag="crackbox-workload:latest"
programs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --add) programs+=("$2"); shift 2 ;;
    *) echo "build-workload-image: unknown argument $1" >&2; exit 2 ;;
    esac
done

busybox="$(command -v busybox || true)"
if [ -z "$busybox" ] || ldd "$busybox" 2>/dev/null | grep -q '=>' || ! command -v curl >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static curl >/dev/null
    busybox="$(command -v busybox)"
fi
curl_bin="$(command -v curl)"
binaries=("$curl_bin")
for program in "${programs[@]}"; do
    path="$(command -v "$program" || true)"
    if [ -z "$path" ]; then
        echo "build-workload-image: $program is not installed" >&2
        exit 1
    fi
    binaries+=("$path")
done

rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs/bin" "$rootfs/usr/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/www"
chmod 1777 "$rootfs/tmp"
cp "$busybox" "$rootfs/bin/busybox"
for applet in $("$busybox" --list); do
    [ -e "$rootfs/bin/$applet" ] || ln -s busybox "$rootfs/bin/$applet"
done
for binary in "${binaries[@]}"; do
    cp -L "$binary" "$rootfs/usr/bin/$(basename "$binary")"
    ldd "$binary" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
done
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
printf 'crackbox upstream ok\n' >"$rootfs/www/index.html"

tar -C "$rootfs" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/sh"]' \
    - "$tag" >/dev/null
echo "build-workload-image: built $tag"
