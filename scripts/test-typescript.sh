#!/usr/bin/env bash
# test-typescript.sh builds and tests the TypeScript client (client/typescript)
# against real coordinators: npm ci (scripts/npm-ci.sh) when node_modules does
# not match package-lock.json, then `npm test` (tsc, go build of the coordinator,
# node --test). `make test` runs it under scripts/with-redis.sh, which sets
# COORDINATOR_TEST_REDIS_URL so that the Redis store is tested too; without it
# only the memory store is. Node.js and npm are installed with apt-get when
# missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=client/typescript

./scripts/npm-ci.sh "$dir"
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "test-typescript: Node.js $(node --version) is too old; 20 or later is needed" >&2
  exit 1
fi

cd "$dir"
exec npm test --silent
