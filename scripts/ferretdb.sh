#!/usr/bin/env bash
# ferretdb.sh prints the path of a FerretDB binary (a MongoDB wire protocol
# server over SQLite), building it once from the Go module proxy and caching
# it: the tests' stand-in for Deckard's MongoDB, which is not installable
# here. The module lacks its generated build/version/version.txt, so it is
# built from a copy with that file written.
set -euo pipefail

version=v1.24.2
cache="${COORDINATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coordinator}"
bin="$cache/ferretdb-$version"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

go=${GO:-go}
mkdir -p "$cache"
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
dir=$(GOFLAGS=-mod=mod "$go" mod download -json "github.com/FerretDB/FerretDB@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "ferretdb.sh: could not download github.com/FerretDB/FerretDB@$version" >&2
  exit 1
fi
cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"
mkdir -p "$work/src/build/version"
printf '%s' "$version" > "$work/src/build/version/version.txt"
echo "ferretdb.sh: building FerretDB $version (once; cached in $cache)" >&2
(cd "$work/src" && GOFLAGS=-mod=mod CGO_ENABLED=0 "$go" build -trimpath -o "$work/ferretdb" ./cmd/ferretdb)
mv "$work/ferretdb" "$bin.tmp.$$"
mv "$bin.tmp.$$" "$bin"
echo "$bin"
