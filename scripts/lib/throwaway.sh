# throwaway.sh, sourced by with-redis.sh and with-ferretdb.sh: a server of
# the tests' own on a free loopback port, in a temporary directory, stopped
# and removed when the script exits.
#
# The sourcing script defines serve PORT (which execs the server, so that
# the background job is the server itself) and ready PORT (true once it
# answers), then calls throwaway_start NAME LOG READY_TRIES; that sets port
# and pid, or exits with the server's log. $throwaway_dir is the directory.

throwaway_dir=$(mktemp -d)
pid=""
throwaway_cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$throwaway_dir"
}
trap throwaway_cleanup EXIT

throwaway_start() {
  local name=$1 log=$2 tries=$3
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$(( 20000 + RANDOM % 20000 ))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi # taken
    serve "$port" &
    pid=$!
    for _ in $(seq "$tries"); do
      if ready "$port"; then return 0; fi
      if ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""
  done
  echo "$name: could not start the server; its log:" >&2
  cat "$log" >&2 || true
  exit 1
}
