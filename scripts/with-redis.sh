#!/usr/bin/env bash
# with-redis.sh CMD ARGS... runs CMD with COORDINATOR_TEST_REDIS_URL pointing
# at a Redis. When the variable is already set, that Redis is used; otherwise a
# throwaway redis-server is started on a free loopback port (installed with
# apt-get when missing and running as root) and stopped afterwards.
set -euo pipefail

if [ -n "${COORDINATOR_TEST_REDIS_URL:-}" ]; then
  exec "$@"
fi

if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "with-redis: redis-server is missing; installing it with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "with-redis: the tests need redis-server. Install it (Debian/Ubuntu: sudo apt-get install redis-server;" >&2
    echo "macOS: brew install redis) or point COORDINATOR_TEST_REDIS_URL at a Redis you may flush." >&2
    exit 1
  fi
fi

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
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" --maxmemory-policy noeviction &
  pid=$!
  for _ in $(seq 50); do
    if redis-cli -p "$port" ping >/dev/null 2>&1; then break 2; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""
done
if [ -z "$pid" ]; then
  echo "with-redis: could not start redis-server; its log:" >&2
  cat "$dir/redis.log" >&2 || true
  exit 1
fi

export COORDINATOR_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
echo "with-redis: throwaway Redis at $COORDINATOR_TEST_REDIS_URL" >&2
"$@"
