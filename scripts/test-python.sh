#!/usr/bin/env bash
# test-python.sh [PYTEST ARGS...] runs the Python client's tests
# (client/python/tests) with Debian's Python 3 and its python3-grpcio,
# python3-protobuf and python3-pytest, installing them with apt-get when
# missing and running as root. The tests build the coordinator with go and
# start their own; they also test the Redis store when
# COORDINATOR_TEST_REDIS_URL is set (as under scripts/with-redis.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's packages are seen by /usr/bin/python3 only, not by a pyenv or
# virtualenv python earlier on PATH.
PY=/usr/bin/python3

have_deps() { "$PY" -c 'import grpc, google.protobuf, pytest' >/dev/null 2>&1; }

if ! have_deps; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test-python: installing python3-grpcio python3-protobuf python3-pytest with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-grpcio python3-protobuf python3-pytest >/dev/null
  fi
  if ! have_deps; then
    echo "test-python: $PY cannot import grpc, google.protobuf and pytest." >&2
    echo "Install them (Debian/Ubuntu: sudo apt-get install python3-grpcio python3-protobuf python3-pytest)." >&2
    exit 1
  fi
fi

# No __pycache__ in the tree (gen/ above all: it must stay what buf wrote),
# no .pytest_cache.
export PYTHONDONTWRITEBYTECODE=1
exec "$PY" -m pytest -q -p no:cacheprovider client/python/tests "$@"
