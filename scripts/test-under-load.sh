#!/usr/bin/env bash
# test-under-load.sh [RUNS] runs the whole test suite RUNS times in a row
# (3 by default: Go, Python and TypeScript) while a CPU hog keeps every core busy, as on a shared CI
# machine, and stops at the first failure. Timing-dependent tests must hold
# here.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
hogs=()
cleanup() { for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  hogs+=($!)
done
for i in $(seq "$runs"); do
  start=$(date +%s)
  echo "test-under-load: run $i of $runs, $(nproc) busy loops beside it" >&2
  ./scripts/with-redis.sh ./scripts/with-ferretdb.sh go test -race -count=1 ./...
  ./scripts/with-redis.sh ./scripts/test-python.sh
  ./scripts/with-redis.sh ./scripts/test-typescript.sh
  echo "test-under-load: run $i passed in $(( $(date +%s) - start ))s" >&2
done
