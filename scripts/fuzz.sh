#!/usr/bin/env bash
# fuzz.sh [PATTERN] runs every fuzz target, one after the other, each for
# FUZZTIME (default 5m), then the long runs, and then says what each run
# found. With PATTERN, only the targets and runs whose package or name
# contains it run.
#
#   FUZZTIME          how long each target runs (go test -fuzztime), e.g. 30s, 10000x
#   FUZZPARALLEL      fuzzing processes per target (go test -parallel; default: one per core)
#   FUZZMINIMIZETIME  how long go test may minimize a new input (default 10s: at
#                     go's 60s a target with large inputs spends most of its time there)
#   MODELOPS          operations of the model-based check's long run (default 10000000)
#
# A failing input is written to the package's testdata/fuzz/<Target>/, where
# plain go test runs it from then on: fix the bug and commit the file as its
# regression seed. Each target's output is kept in bin/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."

# The fuzz targets: package and name, one a line.
targets="
./server/protocodec                  FuzzUnmarshal
./server                             FuzzValidation
./server/access                      FuzzParse
./internal/redisurl                  FuzzParse
./internal/redisurl                  FuzzParseHidesPasswords
./server/store/redisstore            FuzzDecodeReplies
./housekeeper                        FuzzKeyspaceParse
./housekeeper                        FuzzDecodeView
./server/store/memstore              FuzzModel
"

# The long runs: package, test and the variable that sets how many
# operations it runs (it logs a line with "operations" in it). The
# model-based check of the memory store runs MODELOPS random operations,
# on every core.
long="
./server/store/memstore              TestModel     COORDINATOR_MODEL_OPS
"
modelops=${MODELOPS:-10000000}

fuzztime=${FUZZTIME:-5m}
minimize=${FUZZMINIMIZETIME:-10s}
parallel=()
if [ -n "${FUZZPARALLEL:-}" ]; then parallel=(-parallel "$FUZZPARALLEL"); fi
pattern=${1:-}
logs=bin/fuzz
mkdir -p "$logs"

summary=()
failed=0
while read -r pkg name; do
  [ -n "$pkg" ] || continue
  case "$pkg $name" in *"$pattern"*) ;; *) continue ;; esac
  log="$logs/$(echo "${pkg#./}" | tr / _)_$name.log"
  echo "fuzz: $pkg $name for $fuzztime (output in $log)" >&2
  start=$(date +%s)
  status=passed
  if ! go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "${parallel[@]}" "$pkg" >"$log" 2>&1; then
    status=FAILED
    failed=1
  fi
  last=$(grep -E '^fuzz: elapsed: .*execs: ' "$log" | tail -1 | sed -E 's/^fuzz: elapsed: [^,]*, //; s/ \([0-9]+\/sec\)//') || true
  summary+=("$status  $pkg $name  $(( $(date +%s) - start ))s  ${last:-no executions}")
  if [ "$status" = FAILED ]; then
    grep -E -- '--- FAIL|Failing input written to|^\s+\S+_test\.go:[0-9]+:' "$log" | head -20 >&2 || tail -20 "$log" >&2
  fi
done <<<"$targets"

while read -r pkg name var; do
  [ -n "$pkg" ] || continue
  case "$pkg $name" in *"$pattern"*) ;; *) continue ;; esac
  log="$logs/$(echo "${pkg#./}" | tr / _)_$name.log"
  echo "fuzz: $pkg $name for $modelops operations (output in $log)" >&2
  start=$(date +%s)
  status=passed
  if ! env "$var=$modelops" go test -run "^$name\$" -count=1 -timeout 0 -v "$pkg" >"$log" 2>&1; then
    status=FAILED
    failed=1
  fi
  last=$(grep -E 'operations' "$log" | tail -1 | sed -E 's/^ *[^ ]+: //') || true
  summary+=("$status  $pkg $name  $(( $(date +%s) - start ))s  ${last:-no count}")
  if [ "$status" = FAILED ]; then
    grep -E -- '--- FAIL|^\s+\S+_test\.go:[0-9]+:' "$log" | head -20 >&2 || tail -20 "$log" >&2
  fi
done <<<"$long"

if [ ${#summary[@]} -eq 0 ]; then
  echo "fuzz: no target matches \"$pattern\"" >&2
  exit 2
fi
echo "fuzz: summary" >&2
printf '  %s\n' "${summary[@]}" >&2
exit "$failed"
