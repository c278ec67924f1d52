#!/usr/bin/env bash
# npm-ci.sh DIR installs DIR's npm packages from its lockfile (npm ci) unless
# node_modules already matches it. Node.js and npm come from apt-get when
# missing and running as root.
set -euo pipefail
dir=$1

if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "npm-ci: installing nodejs and npm with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "npm-ci: Node.js 20 and npm are needed" >&2
    exit 1
  fi
fi

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
