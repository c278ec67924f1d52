#!/usr/bin/env bash
# lint-python.sh checks the Python client (client/python): pyright in strict
# mode on the package (the generated code excepted; pyrightconfig.json says
# what), and flake8 on the package and its tests (setup.cfg holds its
# settings). pyright comes from npm, pinned, installed once into a cache
# directory; flake8 is Debian's, installed with apt-get when missing and
# running as root. Exits non-zero on any finding.
set -euo pipefail
# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
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
have_deps() { "$PY" -c 'import grpc, google.protobuf, flake8'; }
need_debs lint-python have_deps python3 python3-grpcio python3-protobuf flake8

status=0
"$PYRIGHT" --pythonpath "$PY" || status=1
"$PY" -m flake8 coordinator tests examples bench.py || status=1
exit $status
