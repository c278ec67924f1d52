#!/usr/bin/env bash
# image-rootfs.sh OUT lays out in OUT what the image's final stage copies:
# OUT/rootfs, its files, owned by root: the three binaries, static and
# stamped, CA certificates (for rediss:// and a TLS coordinator) and the
# non-root user; and OUT/state, the empty directory that becomes
# /var/lib/coordinator, owned by that user (the memory store's state). The Dockerfile's build stage runs it,
# and so does `make image` on the host (scripts/image.sh), so that both
# images hold the same files.
#
# VERSION and REVISION, from the environment, are stamped into the binaries
# (-version prints them); VERSION defaults to the VERSION file and REVISION
# to git's HEAD, when there is a git tree. GOOS and GOARCH default to linux
# and the host's architecture.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:?usage: image-rootfs.sh OUT}
case $out in /|.|..|"") echo "image-rootfs: refusing to replace $out" >&2; exit 2 ;; esac
version=${VERSION:-$(cat VERSION)}
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || true)}
ca=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$ca" ]; then
  echo "image-rootfs: $ca is missing: install the CA certificates (Debian: apt-get install ca-certificates)" >&2
  exit 1
fi

rm -rf "$out"
root=$out/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/var/lib" "$out/state"
app=github.com/coordinator-dev/coordinator/internal/app
CGO_ENABLED=0 GOOS=${GOOS:-linux} go build -trimpath \
  -ldflags "-s -w -X $app.release=$version -X $app.stampedRevision=$revision" \
  -o "$root/usr/local/bin/" ./cmd/coordinator ./cmd/housekeeper ./cmd/coordctl
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
cp deploy/image/passwd deploy/image/group "$root/etc/"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/ssl/certs/ca-certificates.crt"
