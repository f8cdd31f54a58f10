#!/usr/bin/env bash
# End-to-end test of tools/convert/hf_to_gguf.py (Hugging Face Muse Glimmer
# checkpoint -> muse-glimmer GGUF) without torch, numpy or a GPU:
#  1. writes a tiny seeded-random HF checkpoint (tools/convert/make_tiny_hf.py),
#  2. converts it to F32, BF16 and Q8_0 GGUF (and a BF16-stored checkpoint;
#     NVFP4 from one with FFN 128, whose rows are whole NVFP4 blocks),
#  3. checks keys, tensor names/dims/types, the norm "+1" folding, the q/k
#     norm synthesis, the RoPE row permutation, Q8_0 blocks, BF16 rounding and
#     NVFP4 bytes (hand-checked rules of llama.cpp's quantize_row_nvfp4_ref),
#  4. runs two independent plain-Python forward passes (transformers'
#     semantics on the HF checkpoint, llama.cpp's on the GGUF) and requires
#     the same logits (F32: 1e-4; quantized: loose bounds),
#  5. checks that bad inputs fail with one error line and exit status 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v python3 >/dev/null || { echo "test_convert: skipped: no python3"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
C=tools/convert
python3 $C/make_tiny_hf.py "$tmp/hf" 7
python3 $C/make_tiny_hf.py "$tmp/hfb" 8 --dtype BF16
for t in f32 bf16 q8_0; do
  python3 $C/hf_to_gguf.py "$tmp/hf" "$tmp/m-$t.gguf" --outtype $t --name tiny >/dev/null
done
python3 $C/hf_to_gguf.py "$tmp/hfb" "$tmp/mb-bf16.gguf" --outtype bf16 >/dev/null
python3 $C/hf_to_gguf.py "$tmp/hfb" "$tmp/mb-f32.gguf" --outtype f32 >/dev/null
python3 $C/make_tiny_hf.py "$tmp/hf128" 9 --ff 128
python3 $C/hf_to_gguf.py "$tmp/hf128" "$tmp/m128-nvfp4.gguf" --outtype nvfp4 >/dev/null
python3 $C/hf_to_gguf.py "$tmp/hf128" "$tmp/m128-f32.gguf" --outtype f32 >/dev/null

python3 - "$tmp" <<'PY'
import json, math, struct, sys
sys.path.insert(0, "tools/convert")
import gguf, hf_to_gguf, ref_forward as R
tmp = sys.argv[1]
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)

hf = hf_to_gguf.read_weights(tmp + "/hf")
cfg = json.load(open(tmp + "/hf/config.json"))["text_config"]
def hfv(name):
    shape, dt, raw = hf["model.language_model." + name if not name.startswith("lm_head") else name]
    return shape, list(gguf.f32_values(raw, dt))
E, L, nh, nkv, hd, F, V = 64, 4, 4, 2, 16, 96, 280
a = "muse-glimmer."
for t in ("f32", "bf16", "q8_0"):
    r = gguf.Reader("%s/m-%s.gguf" % (tmp, t))
    kv = r.kv
    want = {"general.architecture": "muse-glimmer", a + "context_length": 256, a + "embedding_length": E,
            a + "feed_forward_length": F, a + "block_count": L, a + "attention.head_count": nh,
            a + "attention.head_count_kv": nkv, a + "attention.key_length": hd, a + "attention.value_length": hd,
            a + "attention.sliding_window": 3, a + "attention.sliding_window_pattern": [True, True, True, False],
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama4", "tokenizer.ggml.bos_token_id": 270,
            "tokenizer.ggml.eos_token_id": 271, "tokenizer.ggml.eot_token_id": 274,
            "tokenizer.ggml.eom_token_id": 275, "tokenizer.ggml.padding_token_id": 271,
            "tokenizer.ggml.mask_token_id": 279, "tokenizer.ggml.add_bos_token": True,
            "general.file_type": {"f32": 0, "bf16": 32, "q8_0": 7}[t]}
    for k, v in want.items():
        check(kv.get(k) == v, "%s: key %s = %r, want %r" % (t, k, kv.get(k), v))
    for k, v in ((a + "rope.freq_base", 10000.0), (a + "attention.layer_norm_rms_epsilon", 1e-5),
                 (a + "final_logit_softcapping", 20.0), (a + "logit_scale", 0.5)):
        check(abs(kv.get(k, -1) - v) <= 1e-6 * abs(v), "%s: key %s = %r, want %r" % (t, k, kv.get(k), v))
    check(kv["tokenizer.chat_template"].startswith("{{ bos_token }}"), t + ": chat template")
    toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    check(len(toks) == V and len(types) == V, t + ": vocabulary size")
    check(toks[270:] == ["<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|message|>", "<|eot|>",
                         "<|eom|>", "<|image_start|>", "<|image_end|>", "<|patch|>", "<|mask|>"], t + ": special texts")
    check(types[:270] == [1] * 270 and types[270:] == [3] * 10, t + ": token types (NORMAL, specials CONTROL)")
    check(kv["tokenizer.ggml.merges"][:3] == ["Ġ t", "h e", "Ġt he"], t + ": merges")
    names = ["token_embd.weight", "output_norm.weight", "output.weight"]
    for il in range(L):
        names += ["blk.%d.%s.weight" % (il, n) for n in (
            "attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_gate", "attn_output",
            "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm")]
    check(list(r.tensors) == names, t + ": tensor names and order")
    dims = {"token_embd": [E, V], "output": [E, V], "output_norm": [E], "attn_norm": [E], "attn_q": [E, nh * hd],
            "attn_k": [E, nkv * hd], "attn_v": [E, nkv * hd], "attn_q_norm": [hd], "attn_k_norm": [hd],
            "attn_gate": [E, nh * hd], "attn_output": [nh * hd, E], "post_attention_norm": [E], "ffn_norm": [E],
            "ffn_gate": [E, F], "ffn_up": [E, F], "ffn_down": [F, E], "post_ffw_norm": [E]}
    qt = {"f32": gguf.F32, "bf16": gguf.BF16, "q8_0": gguf.Q8_0}[t]
    for n, (d, ty, raw) in r.tensors.items():
        short = n.split(".")[-2]
        check(d == dims[short], "%s: %s dims %s, want %s" % (t, n, d, dims[short]))
        check(ty == (gguf.F32 if len(d) == 1 else qt), "%s: %s type %d" % (t, n, ty))
    # norms: layer norms +1, final norm as is; q/k norms synthesized
    for il in range(L):
        for g, h in (("attn_norm", "input_layernorm"), ("post_attention_norm", "post_attention_layernorm"),
                     ("ffn_norm", "pre_feedforward_layernorm"), ("post_ffw_norm", "post_feedforward_layernorm")):
            gv = r.floats("blk.%d.%s.weight" % (il, g))
            hv = hfv("layers.%d.%s.weight" % (il, h))[1]
            check(max(abs(x - (y + 1.0)) for x, y in zip(gv, hv)) < 1e-6, "%s: blk.%d.%s = 1 + w" % (t, il, g))
        check(all(abs(x - 3.87) < 1e-6 for x in r.floats("blk.%d.attn_q_norm.weight" % il)), t + ": q_norm = qk_scale")
        check(all(x == 1.0 for x in r.floats("blk.%d.attn_k_norm.weight" % il)), t + ": k_norm = 1")
    check(max(abs(x - y) for x, y in zip(r.floats("output_norm.weight"), hfv("norm.weight")[1])) < 1e-6,
          t + ": output_norm copied without +1")
    # RoPE permutation and encodings, per matrix
    for il in range(L):
        for g, h, heads in (("attn_q", "self_attn.q_proj", nh), ("attn_k", "self_attn.k_proj", nkv),
                            ("attn_v", "self_attn.v_proj", 0), ("ffn_down", "mlp.down_proj", 0)):
            d, ty, raw = r.tensors["blk.%d.%s.weight" % (il, g)]
            shape, hv = hfv("layers.%d.%s.weight" % (il, h))
            cols = shape[1]
            gv = gguf.decode(raw, ty)
            worst = 0.0
            for row in range(shape[0]):
                src = row
                if heads:
                    hh, rem = divmod(row, hd)
                    src = hh * hd + (rem % 2) * (hd // 2) + rem // 2
                x = hv[src * cols:(src + 1) * cols]
                y = gv[row * cols:(row + 1) * cols]
                if t == "f32":
                    worst = max(worst, max(abs(p - q) for p, q in zip(x, y)))
                elif t == "bf16":
                    want_b = gguf.encode_bf16(x)
                    worst = max(worst, 0.0 if raw[row * cols * 2:(row + 1) * cols * 2] == want_b else 1.0)
                else:
                    for b0 in range(0, cols, 32):
                        amax = max(abs(v) for v in x[b0:b0 + 32])
                        dd = struct.unpack("<e", raw[(row * cols + b0) // 32 * 34:][:2])[0]
                        check(abs(dd - amax / 127) <= 1e-3 * amax / 127 + 1e-12, "q8_0 scale")
                        worst = max(worst, max(abs(p - q) for p, q in zip(x[b0:b0 + 32], y[b0:b0 + 32])) / (dd or 1))
            # q8_0: |x - q*d16| <= d/2 + 127*|d - d16|, and d16 (the stored f16 scale) is within 2^-11 of d
            lim = {"f32": 0.0, "bf16": 0.0, "q8_0": 0.5 + 127 / 2048 + 1e-3}[t]
            check(worst <= lim, "%s: blk.%d.%s values/permutation (worst %.3g)" % (t, il, g, worst))
# forward passes: transformers' semantics on HF vs llama.cpp's on GGUF
ids = [270, 84, 104, 101, 32, 115, 101, 259, 262, 271, 33, 64]
ref = R.hf_logits(tmp + "/hf", ids)
for t, tol in (("f32", 1e-4), ("bf16", 0.5), ("q8_0", 1.5)):
    got = R.gguf_logits("%s/m-%s.gguf" % (tmp, t), ids)
    diff = max(abs(x - y) for ra, rb in zip(ref, got) for x, y in zip(ra, rb))
    top = sum(max(range(V), key=ra.__getitem__) == max(range(V), key=rb.__getitem__) for ra, rb in zip(ref, got))
    print("forward %-5s max |logit diff| %.2e, argmax agrees at %d/%d positions" % (t, diff, top, len(ids)))
    check(diff < tol, "%s forward: max |logit diff| %.3g >= %g" % (t, diff, tol))
    if t == "f32":
        check(top == len(ids), "f32 forward: argmax differs")
refb = R.hf_logits(tmp + "/hfb", ids)
for t in ("bf16", "f32"):  # a bf16 checkpoint converts exactly to BF16 and F32
    got = R.gguf_logits("%s/mb-%s.gguf" % (tmp, t), ids)
    diff = max(abs(x - y) for ra, rb in zip(refb, got) for x, y in zip(ra, rb))
    print("forward bf16-checkpoint -> %s max |logit diff| %.2e" % (t, diff))
    check(diff < 1e-4, "bf16 checkpoint -> %s forward diff %.3g" % (t, diff))
# NVFP4: keys and types, bytes as quantize_row_nvfp4_ref, the forward pass
r = gguf.Reader(tmp + "/m128-nvfp4.gguf")
check(r.kv["general.file_type"] == 39 and r.kv["general.quantization_version"] == 2, "nvfp4: file type keys")
hf128 = hf_to_gguf.read_weights(tmp + "/hf128")
for n, (d, ty, raw) in r.tensors.items():
    check(ty == (gguf.F32 if len(d) == 1 else gguf.NVFP4), "nvfp4: %s type %d" % (n, ty))
for il in range(L):
    for g, h in (("attn_v", "self_attn.v_proj"), ("ffn_down", "mlp.down_proj"), ("ffn_up", "mlp.up_proj")):
        shape, dt, hraw = hf128["model.language_model.layers.%d.%s.weight" % (il, h)]
        check(r.tensors["blk.%d.%s.weight" % (il, g)][2] == gguf.encode_nvfp4(gguf.f32_values(hraw, dt)),
              "nvfp4: blk.%d.%s bytes" % (il, g))
def nv_block(vals16):  # one sub-block (the first of a block of 64 zeros): scale byte, codes
    b = gguf.encode_nvfp4(list(vals16) + [0.0] * 48)
    return b[0], [b[4 + j] & 15 for j in range(8)] + [b[4 + j] >> 4 for j in range(8)]
for amax, want in ((6.0, 0x38), (6.375, 0x39), (6.3, 0x38), (11.625, 0x40), (3000.0, 0x7e), (18 * 2.0 ** -9, 0x03),
                   (9 * 2.0 ** -6, 0x0c), (6 * 2.0 ** -11, 0x00), (0.0, 0x00)):
    got = nv_block([0.0] * 3 + [-amax] + [0.0] * 12)
    check(got[0] == want and got[1][3] == (15 if want else 0), "nvfp4: amax %g -> scale %#x, got %#x" % (amax, want, got[0]))
vals = [6, 5, -5, 0.25, -0.25, -0.0, 2.5, 1.75, 0.7, -6, 3.5, 6, -6, 0.5, 1.25, -2.9]
got = nv_block(vals)
check(got == (0x38, [7, 6, 14, 0, 0, 0, 4, 3, 1, 15, 5, 7, 15, 1, 2, 13]), "nvfp4: codes (first nearest wins) %r" % (got,))
check(gguf.ue4m3_half(0xff) == 240.0 and gguf.ue4m3_half(0x7f) == 0.0 and gguf.ue4m3_half(0x01) == 2.0 ** -10,
      "nvfp4: scale bytes")
ref = R.gguf_logits(tmp + "/m128-f32.gguf", ids)
got = R.gguf_logits(tmp + "/m128-nvfp4.gguf", ids)
diff = max(abs(x - y) for ra, rb in zip(ref, got) for x, y in zip(ra, rb))
print("forward nvfp4 max |logit diff| vs f32 %.2e" % diff)
check(diff < 6.0, "nvfp4 forward: max |logit diff| %.3g" % diff)
print("test_convert checks:", "FAIL (%d)" % len(fails) if fails else "all passed")
sys.exit(1 if fails else 0)
PY

# bad inputs: one error line, status 1, no traceback
expect_fail() {
  local what=$1; shift
  if python3 $C/hf_to_gguf.py "$@" >"$tmp/out" 2>"$tmp/err"; then echo "FAIL: $what: converted"; exit 1; fi
  if grep -q Traceback "$tmp/err" || [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    echo "FAIL: $what: want one error line"; cat "$tmp/err"; exit 1
  fi
  echo "ok: $what: $(cat "$tmp/err")"
}
cp -r "$tmp/hf" "$tmp/bad1"
python3 - "$tmp/bad1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["text_config"]["layer_rope_theta"][3] = 10000.0
json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "RoPE on a full-attention layer" "$tmp/bad1" "$tmp/x.gguf"
cp -r "$tmp/hf" "$tmp/bad2"
head -c 5000 "$tmp/hf/model.safetensors" >"$tmp/bad2/model.safetensors"
expect_fail "truncated safetensors header" "$tmp/bad2" "$tmp/x.gguf"
sz=$(wc -c <"$tmp/hf/model.safetensors")
head -c $((sz - 100)) "$tmp/hf/model.safetensors" >"$tmp/bad2/model.safetensors"
expect_fail "truncated safetensors data" "$tmp/bad2" "$tmp/x.gguf"
cp -r "$tmp/hf" "$tmp/bad3"
python3 - "$tmp/bad3/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["text_config"]["hidden_size"] = 48
json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "shape mismatch" "$tmp/bad3" "$tmp/x.gguf"
expect_fail "missing directory" "$tmp/nothing" "$tmp/x.gguf"
expect_fail "NVFP4 rows of 96" "$tmp/hf" "$tmp/x.gguf" --outtype nvfp4
echo "test_convert: PASS"
