#!/usr/bin/env bash
# test_pack.sh: KV packs end to end with real processes (docs/kvpack.md):
# save, verify (with and without the model), inspect; `run --pack` in
# another process continues exactly: bit for bit against a cold run whose
# prompt splits at the same ubatch boundary (the pack holds exactly 512
# positions), and, for a prefix that does not end on that boundary, with
# the same greedy ids under the tie-aware rule (llama.cpp's numbers depend
# on where ubatches split, so a restored prefix is not a cold run bit for
# bit: only greedy ids are promised, a divergence only where the cold run's
# two best candidates are within 1e-3); refusals name their verdict
# category; and a writer killed (SIGKILL, MUSER_TEST_KILL_AT=N: after its
# N-th write, fsync, rename or unlink, every N in turn) never leaves a
# visible partial or loses the previous generation.
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_pack: skipped: no muser binary at $MUSER"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export MUSER_HOME=$T/home
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$MUSER" gen -o "$T/m.gguf" --preset tiny --type q8_0 --seed 3 2>/dev/null || { bad "gen"; exit 1; }
"$MUSER" gen -o "$T/other.gguf" --preset tiny --type q8_0 --seed 4 2>/dev/null || { bad "gen other"; exit 1; }
ids() { python3 -c "import sys; print(','.join(str((i * 37 + int(sys.argv[2])) % 1000) for i in range(int(sys.argv[1]))))" "$1" "$2"; }
P512=$(ids 512 11)
P100=$(ids 100 5)
REST=5,6,7,8,9

# save, verify, inspect
if "$MUSER" pack save -m "$T/m.gguf" --prompt-ids "$P512" -o "$T/p512" >/dev/null 2>"$T/err"; then ok "save 512 tokens"
else bad "save: $(cat "$T/err")"; fi
[ -f "$MUSER_HOME/kvpack.key" ] && [ "$(stat -c %a "$MUSER_HOME/kvpack.key")" = 600 ] && ok "root key created 0600" || bad "no 0600 root key"
out=$("$MUSER" pack verify "$T/p512" 2>&1); rc=$?
[ $rc = 0 ] && [ "$out" = ok ] && ok "verify" || bad "verify: $rc $out"
out=$("$MUSER" pack verify -m "$T/m.gguf" "$T/p512" 2>&1); rc=$?
[ $rc = 0 ] && [ "$out" = ok ] && ok "verify -m" || bad "verify -m: $rc $out"
"$MUSER" pack inspect "$T/p512" --json >"$T/insp" 2>&1
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['tokens']==512 and j['authenticated'] and j['kind']=='full' and j['layers']==4" "$T/insp" \
  && ok "inspect --json" || bad "inspect: $(cat "$T/insp")"
"$MUSER" pack inspect "$T/p512" | grep -q '^tokens: 512$' && ok "inspect text" || bad "inspect text"
n=$(ls "$T/p512" | grep -c '\.kvchk$'); [ "$n" -gt 0 ] && [ -f "$T/p512/manifest.kvpk" ] && ok "pack directory: manifest.kvpk + $n chunk files" || bad "pack layout"

# run --pack in another process against cold runs
"$MUSER" run -m "$T/m.gguf" --pack "$T/p512" --prompt-ids "$REST" --temp 0 --json --top 5 -n 12 >"$T/a" 2>"$T/err" || bad "run --pack: $(cat "$T/err")"
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$P512,$REST" --ctx 4096 --temp 0 --json --top 5 -n 12 >"$T/b" 2>&1
[ -s "$T/a" ] && cmp -s "$T/a" "$T/b" && ok "run --pack = cold run bit for bit (split at the ubatch boundary)" || bad "run --pack 512 differs from the cold run"
"$MUSER" run -m "$T/m.gguf" --pack "$T/p512" --prompt-ids "$REST" --temp 0 --json --top 5 -n 12 >"$T/a2" 2>&1
cmp -s "$T/a" "$T/a2" && ok "run --pack deterministic" || bad "run --pack twice differs"
"$MUSER" pack save -m "$T/m.gguf" --prompt-ids "$P100" -o "$T/p100" --codec lossless --plain >/dev/null 2>&1 || bad "save lossless plain"
"$MUSER" run -m "$T/m.gguf" --pack "$T/p100" --prompt-ids "$REST" --temp 0 --json --top 5 -n 12 >"$T/c" 2>"$T/err" || bad "run --pack 100: $(cat "$T/err")"
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$P100,$REST" --ctx 4096 --temp 0 --json --top 5 -n 12 >"$T/d" 2>&1
python3 - "$T/c" "$T/d" <<'EOF' && ok "run --pack 100: greedy ids = cold run (tie-aware)" || bad "run --pack 100: greedy ids differ from the cold run"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 12, (len(a), len(b))
for x, y in zip(a, b):
    if x["id"] != y["id"]:
        p = dict((t, q) for t, q in y["top"])
        assert x["id"] in p and abs(p[x["id"]] - y["top"][0][1]) < 1e-3, (x, y)
        break
EOF

# refusals, one line each, naming the category
line() { "$MUSER" "$@" 2>&1 >/dev/null | head -5; }
out=$(line pack verify -m "$T/other.gguf" "$T/p512"); rc=$?
"$MUSER" pack verify -m "$T/other.gguf" "$T/p512" >/dev/null 2>&1 && bad "verify accepted another model" || true
echo "$out" | grep -q "^muser pack verify: identity: " && [ "$(echo "$out" | wc -l)" = 1 ] && ok "another model: $out" || bad "another model: $out"
head -c 32 /dev/urandom >"$T/k2"; chmod 600 "$T/k2"
out=$(line pack verify --key-file "$T/k2" "$T/p512")
echo "$out" | grep -q "^muser pack verify: authentication: " && ok "another key: $out" || bad "another key: $out"
chmod 644 "$T/k2"
out=$(line pack verify --key-file "$T/k2" "$T/p512")
echo "$out" | grep -q "readable by others" && ok "key readable by others refused" || bad "key mode: $out"
cp -r "$T/p512" "$T/bad"
f=$(ls "$T/bad"/*.kvchk | head -1)
python3 tests/e2e/flip_byte.py "$f" 4200
out=$(line pack verify "$T/bad")
echo "$out" | grep -q "^muser pack verify: authentication: chunk object digest mismatch" && ok "damaged chunk: $out" || bad "damaged chunk: $out"
out=$(line run -m "$T/m.gguf" --pack "$T/bad" --prompt-ids "$REST" -n 2 --json)
echo "$out" | grep -q "authentication" && ok "run --pack refuses the damaged pack" || bad "run --pack damaged: $out"
cp -r "$T/p512" "$T/short"; truncate -s 9000 "$T/short/manifest.kvpk"
out=$(line pack verify "$T/short")
echo "$out" | grep -qE "^muser pack verify: (bounds|truncated|bad_magic|reserved): " && ok "truncated manifest: $out" || bad "truncated manifest: $out"
rm "$f"
out=$(line pack verify "$T/bad")
echo "$out" | grep -q "^muser pack verify: io: " && ok "missing chunk: $out" || bad "missing chunk: $out"
out=$(line run -m "$T/m.gguf" --pack "$T/p100" --prompt-ids "$REST" --ctx 300 -n 2 --json)
echo "$out" | grep -q "identity" && ok "another ring size (--ctx) refused: $out" || bad "--ctx 64: $out"

# the weights digest is computed once per file: one cache line per model file
n=$(wc -l <"$MUSER_HOME/kvpack/weights.digests")
[ "$n" = 2 ] && ok "weights digests cached: one line per model file" || bad "weights digest cache has $n lines"

# SIGKILL at every counted point of a publication
kill_loop() { # $1 = destination, $2 = the generation that must survive (token_root) or "" for none
  local dst=$1 prev=$2 k rc root killed=0 done_ok=0
  for k in $(seq 1 60); do
    { MUSER_TEST_KILL_AT=$k "$MUSER" pack save -m "$T/m.gguf" --prompt-ids "$P100" -o "$dst" >/dev/null 2>&1; } 2>/dev/null; rc=$?
    if [ $rc = 137 ]; then
      killed=$((killed + 1))
      if [ -e "$dst" ]; then
        "$MUSER" pack verify "$dst" >/dev/null 2>&1 || { bad "kill at $k: $dst does not verify"; return; }
        root=$("$MUSER" pack inspect "$dst" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['token_root'])")
        [ "$root" = "$prev" ] || [ "$root" = "$NEW" ] || { bad "kill at $k: $dst holds neither generation"; return; }
        ls "$dst" | grep -qvE '^(manifest\.kvpk|[0-9a-f]{64}\.kvchk)$' && { bad "kill at $k: partial files in $dst"; return; }
      else
        [ -z "$prev" ] || { bad "kill at $k: the previous generation is gone"; return; }
      fi
    elif [ $rc = 0 ]; then done_ok=1; break
    else bad "kill at $k: exit $rc"; return; fi
  done
  [ $done_ok = 1 ] && [ $killed -ge 10 ] && ok "SIGKILL at each of $killed points: $([ -n "$prev" ] && echo 'previous generation survives' || echo 'nothing or a whole pack'), no partial visible" || bad "kill loop ($killed kills, finished=$done_ok)"
  ls -a "$(dirname "$dst")" | grep -q "^\.$(basename "$dst")\.partial-" && bad "partials of killed writers left after a good save" || ok "a good save removes the killed writers' partials"
}
"$MUSER" pack save -m "$T/m.gguf" --prompt-ids "$P100" -o "$T/ref" >/dev/null 2>&1
NEW=$("$MUSER" pack inspect "$T/ref" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['token_root'])")
OLD=$("$MUSER" pack inspect "$T/p512" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['token_root'])")
mkdir "$T/k1" "$T/k2d"
kill_loop "$T/k1/pack" ""
cp -r "$T/p512" "$T/k2d/pack"
kill_loop "$T/k2d/pack" "$OLD"

exit $fail
