#!/usr/bin/env bash
# image.sh [IMAGE] builds the image (default coordinator:VERSION) from
# binaries built on the host: the Dockerfile's final stage, fed by
# scripts/image-rootfs.sh instead of its Go build stage, with podman (or
# buildah when there is no podman). Neither needs a daemon, and building
# FROM scratch pulls nothing.
#
# PODMAN overrides the build command (default: podman --storage-driver vfs,
# which works where overlay mounts do not, as in a container; set
# PODMAN=podman to build into your usual storage). IMAGE_STAGE is where the
# filesystem is laid out (default bin/image); REVISION and VERSION as in
# image-rootfs.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-$(cat VERSION)}
image=${1:-coordinator:$version}
stage=${IMAGE_STAGE:-bin/image}
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || true)}
if [ -z "${PODMAN:-}" ]; then
  if command -v podman >/dev/null 2>&1; then
    PODMAN="podman --storage-driver vfs"
  elif command -v buildah >/dev/null 2>&1; then
    PODMAN="buildah --storage-driver vfs"
  else
    echo "image: podman or buildah is needed (Debian/Ubuntu: apt-get install podman), or docker build . instead" >&2
    exit 1
  fi
fi

VERSION=$version REVISION=$revision ./scripts/image-rootfs.sh "$stage"
# The context is the stage alone: the Dockerfile's "context" stage copies it,
# and its Go build stage is skipped.
$PODMAN build --quiet --file Dockerfile --build-arg BINARIES=context \
  --build-arg TARGETARCH="$(go env GOARCH)" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  --tag "$image" "$stage" >/dev/null
# The intermediate stage's image, untagged, would be left behind at every
# build: it carries a label of its own, by which it goes.
$PODMAN image prune --force --filter label=dev.coordinator.stage=context >/dev/null
echo "image: built $image (version $version, revision ${revision:-unknown})"
