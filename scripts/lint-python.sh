#!/usr/bin/env bash
# lint-python.sh checks the Python client (client/python): pyright in strict
# mode on the package (the generated code excepted; pyrightconfig.json says
# what), and flake8 on the package and its tests (setup.cfg holds its
# settings). pyright comes from npm, pinned, installed once into a cache
# directory; flake8 is Debian's, installed with apt-get when missing and
# running as root. Exits non-zero on any finding.
set -euo pipefail
# shellcheck source=lib/node.sh
. "$(dirname "$0")/lib/node.sh"
cd "$(dirname "$0")/../client/python"

PYRIGHT_VERSION=1.1.414
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/coordinator/pyright-$PYRIGHT_VERSION"
PYRIGHT="$CACHE/node_modules/.bin/pyright"
need_node lint-python # pyright runs on Node
if [ ! -x "$PYRIGHT" ]; then
  echo "lint-python: installing pyright $PYRIGHT_VERSION into $CACHE" >&2
  mkdir -p "$CACHE"
  npm install --prefix "$CACHE" --no-save --no-audit --no-fund --silent "pyright@$PYRIGHT_VERSION" >&2
fi

# Debian's flake8 runs on Debian's Python, as do grpcio and protobuf, which
# pyright must see to check the package's calls: all use /usr/bin/python3.
PY=/usr/bin/python3
DEBS="python3 python3-grpcio python3-protobuf flake8"
have_deps() { "$PY" -c 'import grpc, google.protobuf, flake8' >/dev/null 2>&1; }
if ! have_deps; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "lint-python: installing $DEBS with apt-get" >&2
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $DEBS >/dev/null
  fi
  if ! have_deps; then
    echo "lint-python: $PY lacks grpc, google.protobuf or flake8 (Debian/Ubuntu: sudo apt-get install $DEBS)" >&2
    exit 1
  fi
fi

status=0
"$PYRIGHT" --pythonpath "$PY" || status=1
"$PY" -m flake8 coordinator tests examples bench.py || status=1
exit $status
