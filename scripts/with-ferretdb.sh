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
# shellcheck source=lib/throwaway.sh
. "$(dirname "$0")/lib/throwaway.sh"
serve() {
  exec "$bin" --handler=sqlite --sqlite-url="file:$throwaway_dir/" --state-dir="$throwaway_dir" --listen-addr="127.0.0.1:$1" \
    --telemetry=disable --debug-addr=- --log-level=warn >"$throwaway_dir/ferretdb.log" 2>&1
}
ready() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
throwaway_start with-ferretdb "$throwaway_dir/ferretdb.log" 100

export COORDINATOR_TEST_MONGODB_URI="mongodb://127.0.0.1:$port/"
export COORDINATOR_TEST_FERRETDB="$bin"
echo "with-ferretdb: throwaway FerretDB at $COORDINATOR_TEST_MONGODB_URI" >&2
"$@"
