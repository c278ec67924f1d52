#!/usr/bin/env bash
# test-python.sh [PYTEST ARGS...] runs the Python client's tests
# (client/python/tests) against the installed package: it builds a wheel of
# a copy of client/python (so the package directory alone must build, with
# its generated code), installs it into a virtualenv over Debian's Python 3
# (venv --system-site-packages: Debian's python3-grpcio, python3-protobuf,
# python3-pytest and python3-pytest-asyncio are seen there; there is no
# PyPI), checks that `pip install DIR` installs it too, and runs the tests
# with the venv's python from a directory where the repository is not
# importable. What is missing is installed with apt-get when running as
# root. The tests build the coordinator with go and start their own; they
# also test the Redis store when COORDINATOR_TEST_REDIS_URL is set (as under
# scripts/with-redis.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

# Debian's packages are seen by /usr/bin/python3 only, not by a pyenv or
# virtualenv python earlier on PATH.
PY=/usr/bin/python3
have_deps() {
  "$PY" -c 'import grpc, google.protobuf, pytest, pytest_asyncio, setuptools, wheel, pip, venv' &&
    "$PY" -m venv --help
}
# shellcheck source=lib/apt.sh
. "$REPO/scripts/lib/apt.sh"
need_debs test-python have_deps python3 python3-grpcio python3-protobuf python3-pytest python3-pytest-asyncio \
  python3-venv python3-pip python3-setuptools python3-wheel

# No __pycache__ in the tree (the generated code above all: it must stay
# what buf wrote), no .pytest_cache.
export PYTHONDONTWRITEBYTECODE=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/coordinator-python.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# A copy of the package directory, without what a checkout may hold besides
# (caches, the tests): a build that reached outside it would fail here.
mkdir -p "$tmp/src" "$tmp/run"
tar -C client/python --exclude=__pycache__ --exclude=tests --exclude=build --exclude='*.egg-info' -cf - . | tar -C "$tmp/src" -xf -

# No build isolation and no index: setuptools and wheel are Debian's, and
# the dependencies (grpcio, protobuf) must be met by what is installed.
PIP_OFFLINE=(--no-index --no-build-isolation --disable-pip-version-check -q)
"$PY" -m pip wheel "${PIP_OFFLINE[@]}" --no-deps "$tmp/src" -w "$tmp/dist"
wheel=$(ls "$tmp"/dist/coordinator_client-*.whl)

# `pip install DIR`, as the README says, into a venv of its own.
"$PY" -m venv --system-site-packages --without-pip "$tmp/venv-dir"
"$tmp/venv-dir/bin/python" -m pip install "${PIP_OFFLINE[@]}" "$tmp/src"
(cd "$tmp/run" && "$tmp/venv-dir/bin/python" -c '
import sys, coordinator, coordinator.aio
assert coordinator.__file__.startswith(sys.prefix), coordinator.__file__
assert coordinator.pb.__file__.startswith(sys.prefix), coordinator.pb.__file__
')

# The wheel, which the tests run against.
"$PY" -m venv --system-site-packages --without-pip "$tmp/venv"
"$tmp/venv/bin/python" -m pip install "${PIP_OFFLINE[@]}" "$wheel"

cd "$tmp/run"
COORDINATOR_TEST_INSTALLED=1 COORDINATOR_TEST_WHEEL="$wheel" \
  "$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider "$REPO/client/python/tests" "$@"
