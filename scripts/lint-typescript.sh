#!/usr/bin/env bash
# lint-typescript.sh lints the TypeScript client (client/typescript): npm ci
# (scripts/npm-ci.sh) when node_modules does not match package-lock.json,
# then `npm run lint`: the package is built (its examples import it by
# name), tsc --noEmit checks the sources, tests, examples and benchmark, and
# eslint with typescript-eslint (eslint.config.mjs) lints them.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=client/typescript

./scripts/npm-ci.sh "$dir"
cd "$dir"
exec npm run --silent lint
