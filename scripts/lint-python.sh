#!/usr/bin/env bash
# lint-python.sh checks the Python client (client/python): pyright in strict
# mode on the package (the generated code excepted; pyrightconfig.json says
# what), and flake8 on the package and its tests (setup.cfg holds its
# settings). pyright comes from npm, pinned, installed once into a cache
# directory; flake8 is Debian's, installed with apt-get when missing and
# running as root. Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/../client/python"

PYRIGHT_VERSION=1.1.414
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/coordinator/pyright-$PYRIGHT_VERSION"
PYRIGHT="$CACHE/node_modules/.bin/pyright"
if [ ! -x "$PYRIGHT" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "lint-python: npm is missing (Debian/Ubuntu: sudo apt-get install npm)" >&2
    exit 1
  fi
  echo "lint-python: installing pyright $PYRIGHT_VERSION into $CACHE" >&2
  mkdir -p "$CACHE"
  npm install --prefix "$CACHE" --no-save --no-audit --no-fund --silent "pyright@$PYRIGHT_VERSION" >&2
fi

# Debian's flake8 runs on Debian's Python, as do grpcio and protobuf, which
# pyright must see: both use /usr/bin/python3.
PY=/usr/bin/python3
if ! "$PY" -m flake8 --version >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "lint-python: installing flake8 with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq flake8 >/dev/null
  fi
  if ! "$PY" -m flake8 --version >/dev/null 2>&1; then
    echo "lint-python: flake8 is missing (Debian/Ubuntu: sudo apt-get install flake8)" >&2
    exit 1
  fi
fi

status=0
"$PYRIGHT" --pythonpath "$PY" || status=1
"$PY" -m flake8 coordinator tests examples bench.py || status=1
exit $status
