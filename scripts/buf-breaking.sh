#!/usr/bin/env bash
# buf-breaking.sh fails when proto/ changed incompatibly since the previous
# commit (HEAD~1, or BUF_BREAKING_AGAINST, any buf input), so that a change
# that breaks generated clients is caught before it lands. A clone without
# the previous commit (shallow) has nothing to compare with and passes.
set -euo pipefail
cd "$(dirname "$0")/.."
against=${BUF_BREAKING_AGAINST:-}
if [ -z "$against" ]; then
  if ! git rev-parse --verify --quiet HEAD~1 >/dev/null; then
    echo "buf-breaking: no previous commit to compare with; skipped" >&2
    exit 0
  fi
  against=".git#ref=HEAD~1"
fi
exec ${GO:-go} tool -modfile=tools/go.mod buf breaking --against "$against"
