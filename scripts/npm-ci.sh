#!/usr/bin/env bash
# npm-ci.sh DIR installs DIR's npm packages from its lockfile (npm ci) unless
# node_modules already matches it. Node.js and npm come from apt-get when
# missing and running as root.
set -euo pipefail
dir=$1

# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
need_node npm-ci

# npm records what it installed in node_modules/.package-lock.json: when that
# matches the lockfile's packages, there is nothing to do.
if [ -f "$dir/node_modules/.package-lock.json" ] &&
  node -e '
    const fs = require("fs");
    const [lock, installed] = process.argv.slice(1).map((f) => JSON.parse(fs.readFileSync(f, "utf8")).packages || {});
    const names = (p) => Object.keys(p).filter((k) => k !== "").sort();
    const want = names(lock), have = names(installed);
    const same = want.length === have.length && want.every((k, i) => k === have[i] && lock[k].version === installed[k].version);
    process.exit(same ? 0 : 1);
  ' "$dir/package-lock.json" "$dir/node_modules/.package-lock.json"; then
  exit 0
fi
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
