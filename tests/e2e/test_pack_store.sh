#!/usr/bin/env bash
# test_pack_store.sh: `muser pack ls` and `muser pack gc` on a pack store
# (docs/kvpack.md "The pack store"): ls lists packs with their positions
# and bytes; gc removes dead writers' partial directories and, under a byte
# budget, the least recently used packs first (a server's store hit counts
# as a use: it touches the pack); readers that race a gc see a whole pack
# or a clean io error, never a damaged one.
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_pack_store: skipped: no muser binary at $MUSER"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export MUSER_HOME=$T/home
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
"$MUSER" gen -o "$T/m.gguf" --preset tiny --type f16 --seed 5 >/dev/null 2>&1 || { bad "gen"; exit 1; }
ids() { python3 -c "import sys; print(','.join(str((i * 37 + int(sys.argv[2])) % 1000) for i in range(int(sys.argv[1]))))" "$1" "$2"; }
S=$T/home/packs
mkdir -p "$S"
for i in 1 2 3; do
  "$MUSER" pack save -m "$T/m.gguf" --prompt-ids "$(ids $((i * 100)) $i)" -o "$S/p$i" >/dev/null 2>&1 || bad "save p$i"
  touch -d "@$((1700000000 + i * 100))" "$S/p$i" # p1 oldest
done
"$MUSER" pack ls >"$T/ls" 2>&1
grep -q '^p2 .* 200 tokens' "$T/ls" && grep -q '^3 packs' "$T/ls" && ok "ls: the default store (<muser home>/packs)" || bad "ls: $(cat "$T/ls")"
"$MUSER" pack ls "$S" --json >"$T/lsj"
python3 -c "
import json, sys
v = json.load(open(sys.argv[1]))
assert [e['name'] for e in v] == ['p1', 'p2', 'p3'] and [e['tokens'] for e in v] == [100, 200, 300], v
assert all(e['bytes'] > 0 for e in v)" "$T/lsj" && ok "ls --json" || bad "ls --json: $(cat "$T/lsj")"
b=$(python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print(v[1]['bytes'] + v[2]['bytes'])" "$T/lsj")
head -c 32 /dev/urandom >"$T/k2"; chmod 600 "$T/k2"
"$MUSER" pack ls "$S" --key-file "$T/k2" | grep -q '^p1 .* ? tokens' && ok "ls with another key: positions unknown" || bad "ls other key"

# a dead writer's partial directory, and a live one's
mkdir "$S/.p9.partial-999999-0" "$S/.p8.partial-$$-0"
"$MUSER" pack gc "$S" --dry-run | grep -q "would remove 0 of 3 packs .* 1 partial directory" && [ -d "$S/.p9.partial-999999-0" ] \
  && ok "gc --dry-run removes nothing" || bad "dry run"
"$MUSER" pack gc "$S" >/dev/null
[ ! -e "$S/.p9.partial-999999-0" ] && [ -d "$S/.p8.partial-$$-0" ] && ok "gc: a dead writer's partial goes, a live one's stays" || bad "partials"

# a server's store hit makes p1 the most recently used
ASK=$(ids 100 1),5,6,7
"$MUSER" serve -m "$T/m.gguf" --port 0 --threads 1 --pack-dir "$S" 2>"$T/log" &
SP=$!
for _ in $(seq 600); do grep -q 'on http' "$T/log" && break; sleep 0.1; done
PORT=$(sed -nE 's/.* on https?:\/\/[^ ]*:([0-9]+) .*/\1/p' "$T/log" | head -1)
curl -s "http://127.0.0.1:$PORT/completion" -H 'Content-Type: application/json' \
  -d "{\"prompt\":[$ASK],\"n_predict\":2,\"cache_prompt\":true}" >"$T/hit"
kill $SP; wait $SP 2>/dev/null
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); t=j['timings']; assert j['cache_source']=='pack' and t['cache_n']==100, j" "$T/hit" \
  && ok "the server restored p1 from the store" || bad "store hit: $(cat "$T/hit")"
# the budget holds two of the three: p2, the least recently used now, goes
"$MUSER" pack gc "$S" --max-bytes "$b" >"$T/gc"
ls "$S" | grep -v '^\.' | tr '\n' ' ' >"$T/left"
[ "$(cat "$T/left")" = "p1 p3 " ] && grep -q "removed 1 of 3 packs" "$T/gc" && ok "gc --max-bytes: the least recently used pack goes ($(cat "$T/gc"))" \
  || bad "gc budget: left $(cat "$T/left"); $(cat "$T/gc")"

# readers racing gc: a whole pack or an io error, never a damaged one
for i in $(seq 1 20); do "$MUSER" pack save -m "$T/m.gguf" --prompt-ids "$(ids 64 $i)" -o "$S/r$i" >/dev/null 2>&1; done
( for _ in $(seq 1 40); do for i in $(seq 1 20); do "$MUSER" pack verify "$S/r$i" 2>&1; done; done ) >"$T/readers" &
RP=$!
for _ in $(seq 6000); do [ "$(wc -l <"$T/readers")" -ge 30 ] && break; sleep 0.01; done # readers under way
"$MUSER" pack gc "$S" --max-bytes 0 >/dev/null
wait $RP
bad_lines=$(grep -v '^ok$' "$T/readers" | grep -v '^muser pack verify: io: ' | head -3)
n_ok=$(grep -c '^ok$' "$T/readers"); n_io=$(grep -c '^muser pack verify: io: ' "$T/readers")
[ -z "$bad_lines" ] && [ "$n_ok" -ge 30 ] && [ "$n_io" -gt 0 ] && ok "readers during gc: $n_ok whole packs, $n_io clean io errors, nothing else" || bad "readers saw: $bad_lines"
[ -z "$(ls "$S" | grep -v '^\.')" ] && ok "gc --max-bytes 0 empties the store" || bad "left: $(ls "$S")"
"$MUSER" pack gc "$T/nope" >/dev/null 2>"$T/e"; [ $? != 0 ] && grep -q "cannot open the pack store" "$T/e" && ok "gc of a missing store: one error line" || bad "missing store: $(cat "$T/e")"
exit $fail
