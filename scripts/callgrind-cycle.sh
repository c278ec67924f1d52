#!/usr/bin/env bash
# callgrind-cycle.sh [CYCLES [DIR]] counts the instructions a private
# redis-server runs per uncontended cycle (acquire + release) of the Redis
# store's scripts, under valgrind's callgrind: a lease of its own, one
# attached to a session, and a yardstick of bsm/redislock's commands
# (server/store/redisstore/callgrind_test.go). CYCLES (default 2000) a
# window, pipelined 50 calls at a time; the counts are deterministic to about
# 0.1%. DIR keeps the dumps, one a window, for callgrind_annotate, e.g.
#   callgrind_annotate --inclusive=yes DIR/callgrind.out.*.1 | head -40
# It needs valgrind and redis-server, and runs at nice 10: callgrind is
# CPU-heavy (about 20 s for 2,000 cycles).
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-2000}
dir=${2:-}
if [ -n "$dir" ]; then mkdir -p "$dir"; dir=$(cd "$dir" && pwd); fi
COORDINATOR_CALLGRIND_CYCLES=$cycles COORDINATOR_CALLGRIND_OUT=$dir \
  nice -n 10 go test -count=1 -v -run '^TestCallgrindCycle$' ./server/store/redisstore |
  sed -n '/^Redis instructions per cycle/,/a handoff/p'
