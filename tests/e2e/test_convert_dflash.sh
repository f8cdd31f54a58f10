#!/usr/bin/env bash
# End-to-end test of tools/convert/dflash_to_gguf.py (a DFlash drafter in the
# Hugging Face assistant layout -> `dflash` GGUF) without torch or a GPU:
#  1. writes a seeded-random checkpoint for the committed tiny target
#     (tools/convert/make_tiny_dflash.py: F32 and BF16 tensors),
#  2. converts it (f32 and f16) with the target's vocabulary copied from its GGUF,
#  3. checks the keys (target_layers = ids + 1, block size, mask token, the
#     target's tokens), every tensor's name, dims and values (f32: exact;
#     BF16 inputs widened exactly),
#  4. muser binds the result to the target and decodes with it: the same
#     tokens as plain decoding,
#  5. bad checkpoints (a missing tensor, an unknown one, no mask token) fail
#     with one error line and exit status 1.
set -uo pipefail
cd "$(dirname "$0")/../.."
command -v python3 >/dev/null || { echo "test_convert_dflash: skipped: no python3"; exit 0; }
MUSER=${MUSER:-./muser}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
C=tools/convert
TG=tests/data/dflash/target.gguf
npass=0 nfail=0
ok() { echo "ok   $*"; npass=$((npass + 1)); }
bad() { echo "FAIL $*"; nfail=$((nfail + 1)); }

python3 $C/make_tiny_dflash.py "$TG" "$T/hf" --layers 2 --block 8
for t in f32 f16; do
  if python3 $C/dflash_to_gguf.py "$T/hf" "$T/d-$t.gguf" --target "$TG" --outtype $t >"$T/log" 2>&1; then
    ok "convert --outtype $t: $(cat "$T/log")"
  else bad "convert $t: $(cat "$T/log")"; fi
done
if python3 - "$T/hf" "$T/d-f32.gguf" "$T/d-f16.gguf" "$TG" <<'PY'
import json, struct, sys
sys.path.insert(0, "tools/convert")
import gguf
from dflash_to_gguf import gguf_name
hf, g32, g16, tg = sys.argv[1:5]
cfg = json.load(open(hf + "/config.json"))
r, r16, t = gguf.Reader(g32), gguf.Reader(g16), gguf.Reader(tg)
kv = r.kv
assert kv["general.architecture"] == "dflash"
assert kv["dflash.target_layers"] == [i + 1 for i in cfg["target_layer_ids"]], kv["dflash.target_layers"]
assert kv["dflash.block_size"] == cfg["block_size"] and kv["dflash.block_count"] == cfg["num_hidden_layers"]
assert kv["tokenizer.ggml.mask_token_id"] == cfg["mask_token_id"]
assert kv["tokenizer.ggml.tokens"] == t.kv["tokenizer.ggml.tokens"]
assert kv["tokenizer.ggml.merges"] == t.kv["tokenizer.ggml.merges"]
assert abs(kv["dflash.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
with open(hf + "/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    data = f.read()
for name, info in head.items():
    a, b = info["data_offsets"]
    raw = data[a:b]
    want = list(gguf.f32_values(raw, gguf.F32 if info["dtype"] == "F32" else gguf.BF16))
    g = gguf_name(name, cfg["num_hidden_layers"])
    dims, tt, graw = r.tensors[g]
    assert dims == list(reversed(info["shape"])), (name, dims, info["shape"])
    assert tt == gguf.F32 and list(gguf.f32_values(graw, gguf.F32)) == want, name
    d16, t16, raw16 = r16.tensors[g]
    exp16 = gguf.F32 if len(info["shape"]) == 1 else gguf.F16
    assert t16 == exp16, (name, t16)
    got16 = gguf.f32_values(raw16, t16)
    assert max(abs(x - y) for x, y in zip(got16, want)) <= 1e-3 * max(1.0, max(abs(x) for x in want)), name
assert len(r.tensors) == len(head)
print("keys and %d tensors as the checkpoint says" % len(head))
PY
then ok "keys, names, dims and values"; else bad "keys/tensors"; fi

for t in f32 f16; do
  a=$("$MUSER" run -m "$TG" -p "hello world" -n 16 --temp 0 --threads 1 --ignore-eos --json 2>/dev/null | grep '"id"')
  b=$("$MUSER" run -m "$TG" -p "hello world" -n 16 --temp 0 --threads 1 --ignore-eos --json --draft "$T/d-$t.gguf" 2>"$T/err" | grep '"id"')
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "muser run --draft d-$t.gguf: the tokens of plain decoding"
  else bad "muser run --draft d-$t.gguf: $(cat "$T/err")"; fi
done

check_fail() { # name, make_tiny_dflash options
  local name=$1; shift
  rm -rf "$T/bad"
  python3 $C/make_tiny_dflash.py "$TG" "$T/bad" "$@"
  python3 $C/dflash_to_gguf.py "$T/bad" "$T/bad.gguf" --target "$TG" >/dev/null 2>"$T/err"
  local rc=$?
  if [ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^dflash_to_gguf: " "$T/err"; then ok "$name: $(cat "$T/err")"
  else bad "$name: exit $rc: $(cat "$T/err")"; fi
}
check_fail "a missing tensor" --drop model.layers.1.mlp.up_proj.weight
check_fail "an unknown tensor" --extra model.layers.0.self_attn.rotary_emb.weight
check_fail "no mask token" --no-mask
echo "test_convert_dflash: $npass passed, $nfail failed"
[ $nfail = 0 ]
