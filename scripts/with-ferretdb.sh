#!/usr/bin/env bash
# with-ferretdb.sh CMD ARGS... runs CMD with COORDINATOR_TEST_MONGODB_URI
# pointing at a MongoDB wire protocol (the housekeeper's storage tasks work
# on Deckard's MongoDB). When the variable is already set, that server is
# used; otherwise a throwaway FerretDB (SQLite handler; scripts/ferretdb.sh
# builds it once from the Go module proxy) is started on a free loopback port
# and stopped afterwards. COORDINATOR_TEST_FERRETDB names its binary, for
# tests that start servers of their own.
set -euo pipefail

if [ -n "${COORDINATOR_TEST_MONGODB_URI:-}" ]; then
  exec "$@"
fi

bin=$("$(dirname "$0")/ferretdb.sh")
dir=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

for attempt in 1 2 3 4 5 6 7 8 9 10; do
  port=$(( 20000 + RANDOM % 20000 ))
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi # taken
  "$bin" --handler=sqlite --sqlite-url="file:$dir/" --state-dir="$dir" --listen-addr="127.0.0.1:$port" \
    --telemetry=disable --debug-addr=- --log-level=warn >"$dir/ferretdb.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break 2; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""
done
if [ -z "$pid" ]; then
  echo "with-ferretdb: could not start FerretDB; its log:" >&2
  cat "$dir/ferretdb.log" >&2 || true
  exit 1
fi

export COORDINATOR_TEST_MONGODB_URI="mongodb://127.0.0.1:$port/"
export COORDINATOR_TEST_FERRETDB="$bin"
echo "with-ferretdb: throwaway FerretDB at $COORDINATOR_TEST_MONGODB_URI" >&2
"$@"
