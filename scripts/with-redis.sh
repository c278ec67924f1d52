#!/usr/bin/env bash
# with-redis.sh CMD ARGS... runs CMD with COORDINATOR_TEST_REDIS_URL pointing
# at a Redis. When the variable is already set, that Redis is used; otherwise a
# throwaway redis-server is started on a free loopback port (installed with
# apt-get when missing and running as root) and stopped afterwards.
set -euo pipefail

if [ -n "${COORDINATOR_TEST_REDIS_URL:-}" ]; then
  exec "$@"
fi

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
need_debs with-redis "command -v redis-server" redis-server

# shellcheck source=lib/throwaway.sh
. "$(dirname "$0")/lib/throwaway.sh"
serve() {
  exec redis-server --bind 127.0.0.1 --port "$1" --save '' --appendonly no \
    --dir "$throwaway_dir" --logfile "$throwaway_dir/redis.log" --maxmemory-policy noeviction
}
ready() { redis-cli -p "$1" ping >/dev/null 2>&1; }
throwaway_start with-redis "$throwaway_dir/redis.log" 50

export COORDINATOR_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
echo "with-redis: throwaway Redis at $COORDINATOR_TEST_REDIS_URL" >&2
"$@"
