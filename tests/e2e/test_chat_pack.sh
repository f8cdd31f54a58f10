#!/usr/bin/env bash
# test_chat_pack.sh: `muser chat` /save NAME and /load NAME on KV packs
# (docs/kvpack.md, docs/chat.md): /save writes the conversation (NAME) and
# the slot's KV state (the pack NAME.kv, with its token ids and every row
# the sliding layers' ring held); /load in another process restores both,
# and the next turn reuses the restored state (--stats counts it) and
# answers exactly what the first process answered in that turn (same rows,
# same ubatch split for the new tokens). A damaged pack is a note, and the
# conversation is evaluated afresh with the same answer.
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_chat_pack: skipped: no muser binary at $MUSER"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export MUSER_HOME=$T/home
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
"$MUSER" gen -o "$T/m.gguf" --preset tiny --type f16 --seed 5 >/dev/null 2>&1 || { bad "gen"; exit 1; }
chat() { "$MUSER" chat -m "$T/m.gguf" --temp 0 -n 12 --stats 2>&1; }
# answers: the lines that are not notes or stats
answers() { grep -v '^\[' "$1"; }
T1='tell me about the sea and the long quiet shore where the gulls come in at dusk'
T2='and what of the mountains'
printf '%s\n%s\n%s\n' "$T1" "$T1" "$T2" | chat >"$T/one"
printf '%s\n%s\n/save %s\n' "$T1" "$T1" "$T/conv" | chat >"$T/two"
grep -q "and the KV state (.* tokens) to $T/conv.kv" "$T/two" && ok "/save: conversation and KV state" || bad "/save: $(tail -2 "$T/two")"
[ -f "$T/conv.kv/manifest.kvpk" ] && [ -f "$T/conv.kv/tokens.kvtok" ] && ok "NAME.kv is a pack with its token ids" || bad "no pack"
"$MUSER" pack verify -m "$T/m.gguf" "$T/conv.kv" >"$T/v" 2>&1 && ok "pack verify -m: ok" || bad "verify: $(cat "$T/v")"
printf '/load %s\n%s\n' "$T/conv" "$T2" | chat >"$T/three"
grep -q "restored the KV state" "$T/three" && ok "/load restores the KV state" || bad "/load: $(head -3 "$T/three")"
r1=$(grep '^\[stats\]' "$T/one" | tail -1 | sed -n 's/.*(\([0-9]*\) reused.*/\1/p')
r3=$(grep '^\[stats\]' "$T/three" | tail -1 | sed -n 's/.*(\([0-9]*\) reused.*/\1/p')
[ -n "$r3" ] && [ "$r3" -gt 0 ] && [ "$r3" = "$r1" ] && ok "the next turn reuses $r3 tokens, as in one process" || bad "reused: one $r1, after /load $r3"
[ "$(answers "$T/one" | tail -1)" = "$(answers "$T/three" | tail -1)" ] && ok "the answer after /load = the one-process answer" \
  || bad "answers differ: '$(answers "$T/one" | tail -1)' vs '$(answers "$T/three" | tail -1)'"
f=$(ls "$T/conv.kv"/*.kvchk | head -1)
python3 tests/e2e/flip_byte.py "$f" 300
printf '/load %s\n%s\n' "$T/conv" "$T2" | chat >"$T/four"
grep -q "was not restored" "$T/four" && ok "a damaged pack: a note ($(grep 'not restored' "$T/four" | head -c 120)...)" || bad "damaged: $(head -3 "$T/four")"
[ "$(answers "$T/one" | tail -1)" = "$(answers "$T/four" | tail -1)" ] || \
  echo "note: evaluated afresh, the answer may differ in ties only: '$(answers "$T/four" | tail -1)'"
grep -q '(0 reused' "$T/four" && ok "a damaged pack: the conversation is evaluated afresh" || bad "damaged: $(grep stats "$T/four")"
exit $fail
