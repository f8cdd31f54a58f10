# serve_lib.sh: helpers for the `muser serve` end-to-end tests (sourced).
# Provides: MUSER, MODEL (a tiny model from `muser gen`, else
# models/muser-default.gguf), start_server ARGS..., stop_server,
# PORT, BASE, ok/bad, jget (JSON field via python3), and $T (temp dir).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
name=${SERVE_TEST_NAME:-serve}
if [ ! -x "$MUSER" ]; then echo "$name: skipped: no muser binary at $MUSER"; exit 0; fi
if "$MUSER" serve --help 2>&1 | grep -q "not part of this build"; then echo "$name: skipped: serve is not built"; exit 0; fi
command -v curl >/dev/null || { echo "$name: skipped: curl is missing"; exit 0; }
command -v python3 >/dev/null || { echo "$name: skipped: python3 is missing"; exit 0; }
T=$(mktemp -d)
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fail=0
npass=0
nfail=0
ok() { echo "ok   $*"; npass=$((npass + 1)); }
bad() { echo "FAIL $*"; fail=1; nfail=$((nfail + 1)); }

# A tiny generated model keeps the tests fast and their context sizes known;
# models/muser-default.gguf is the fallback when `muser gen` is unavailable.
MODEL=$T/model.gguf
if ! "$MUSER" gen -o "$MODEL" --preset tiny --type f16 --seed 5 --name serve-test-model >"$T/gen.log" 2>&1; then
  if [ -f models/muser-default.gguf ]; then MODEL=models/muser-default.gguf
  else echo "$name: skipped: muser gen failed and models/muser-default.gguf is absent: $(tail -1 "$T/gen.log")"; exit 0; fi
fi

# start_server ARGS...: starts `muser serve -m MODEL --port 0 ARGS` and waits
# for its "on http(s)://host:port" line; sets PORT, BASE, SERVER_PID. The wait
# ends on that line or when the server exits; its 600 s limit only turns a
# hang into a failure (a start under ASan on a loaded 2-core machine takes
# seconds), so it costs nothing when the server starts.
start_server() {
  local log=$T/server.log scheme i
  : >"$log"
  "$MUSER" serve -m "$MODEL" --port 0 "$@" 2>"$log" &
  SERVER_PID=$!
  for ((i = 0; i < 6000; i++)); do
    if grep -qE 'on https?://' "$log"; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "server exited: $(cat "$log")"; SERVER_PID=; return 1; fi
    sleep 0.1
  done
  PORT=$(sed -nE 's/.* on https?:\/\/[^ ]*:([0-9]+) .*/\1/p' "$log" | head -1)
  scheme=$(sed -nE 's/.* on (https?):\/\/.*/\1/p' "$log" | head -1)
  [ -n "$PORT" ] || { echo "no port in the server log (waited up to 600 s): $(cat "$log")"; return 1; }
  BASE=$scheme://127.0.0.1:$PORT
}

stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
  SERVER_PID=
}

# jget FILE PYEXPR: evaluates PYEXPR with j = the parsed JSON of FILE.
jget() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }
