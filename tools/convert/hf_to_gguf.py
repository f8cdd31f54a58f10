#!/usr/bin/env python3
"""Converts a Hugging Face Muse Glimmer checkpoint (transformers'
MuseGlimmerForConditionalGeneration, or a text-only checkpoint with the same
tensor names) into a `muse-glimmer` GGUF file that llama.cpp and muser load.

Pure Python 3 (no numpy, no torch): reads config.json, model.safetensors (or a
sharded model.safetensors.index.json, or a zip-format pytorch_model.bin),
tokenizer.json and tokenizer_config.json / chat_template.jinja.

What the conversion does (the same rules as llama.cpp's converter for this
architecture; docs/default-model.md explains each):
- the four per-layer norms are "centered" in transformers (x * (1 + w)):
  1 is added so the GGUF weights multiply directly; the final norm is a plain
  x * w norm and is copied as is;
- the q/k norms have no weights in transformers (scaleless RMSNorm, then q is
  multiplied by qk_scale_factor): attn_q_norm = qk_scale_factor broadcast,
  attn_k_norm = ones;
- transformers applies RoPE to halves (rotate_half, NEOX), the GGUF to adjacent
  pairs: the rows of q_proj and k_proj are permuted within each head so that
  GGUF pair (2i, 2i+1) holds transformers' dims (i, i + head_dim/2);
- output_multiplier -> logit_scale, final_logit_softcapping, sliding_window,
  layer_types -> attention.sliding_window_pattern (bool per layer, true =
  sliding); NoPE layers must be exactly the full-attention layers;
- vocabulary: byte-level BPE ("gpt2") with pre-tokenizer "llama4", merges,
  token types (added special tokens CONTROL, other added tokens USER_DEFINED),
  bos/eos/eot/eom/pad/mask ids, add_bos_token, the chat template.
- the vision tower, adapter and projection are not converted (text model only).
usage: hf_to_gguf.py HF_DIR OUT.gguf [--outtype f32|f16|bf16|q8_0|nvfp4] [--name NAME]
(nvfp4: every matrix NVFP4, quantized byte for byte as llama.cpp's
quantize_row_nvfp4_ref, without a per-tensor scale; rows must be a multiple
of 64)
"""
import argparse, json, os, pickle, struct, sys, time, zipfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf

ARCH = "muse-glimmer"
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6
ST_DTYPES = {"F32": gguf.F32, "F16": gguf.F16, "BF16": gguf.BF16}
SKIP_PREFIXES = ("model.vision_tower.", "model.vision_adapter.", "model.vision_projection.")
TEXT_PREFIXES = ("model.language_model.", "model.")


class ConvertError(Exception):
    pass


# ---------------------------------------------------------------- checkpoint reading

def read_safetensors(path, out):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100 << 20:
            raise ConvertError("safetensors header too large: %s" % path)
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise ConvertError("%s: safetensors header is not valid JSON (truncated file?)" % path)
        data = f.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in ST_DTYPES:
            raise ConvertError("tensor %s: unsupported dtype %s" % (name, dt))
        a, b = info["data_offsets"]
        n_el = 1
        for d in info["shape"]:
            n_el *= d
        if not (0 <= a <= b <= len(data)) or b - a != n_el * (4 if dt == "F32" else 2):
            raise ConvertError("%s: tensor %s: data offsets %d..%d do not fit shape %s / file of %d data bytes"
                               % (path, name, a, b, info["shape"], len(data)))
        out[name] = (list(info["shape"]), ST_DTYPES[dt], data[a:b])


class _StateDict(dict):
    """stands in for OrderedDict: torch pickles set a _metadata attribute on it."""


_TORCH_STORAGES = {"FloatStorage": gguf.F32, "HalfStorage": gguf.F16, "BFloat16Storage": gguf.BF16}
_TORCH_DTYPES = {"float32": gguf.F32, "float16": gguf.F16, "bfloat16": gguf.BF16}


def read_torch_bin(path, out):
    """zip-format torch.save() state dict, read with a restricted unpickler:
    only tensor rebuilds, storages and OrderedDict are allowed."""
    zf = zipfile.ZipFile(path)
    names = zf.namelist()
    pkl = next((n for n in names if n.endswith("/data.pkl")), None)
    if pkl is None:
        raise ConvertError("%s: not a zip-format torch checkpoint" % path)
    root = pkl[:-len("data.pkl")]

    def rebuild(storage, offset, size, stride, *rest):
        dtype, raw = storage
        esz = 4 if dtype == gguf.F32 else 2
        n = 1
        for s in size:
            n *= s
        exp, acc = [], 1
        for s in reversed(size):
            exp.insert(0, acc)
            acc *= s
        if n > 1 and list(stride) != exp:
            raise ConvertError("non-contiguous tensor in %s" % path)
        return (list(size), dtype, raw[offset * esz:(offset + n) * esz])

    class U(pickle.Unpickler):
        def find_class(self, mod, name):
            if mod == "torch._utils" and name == "_rebuild_tensor_v2":
                return rebuild
            if mod == "collections" and name == "OrderedDict":
                return _StateDict
            if mod == "torch" and name in _TORCH_STORAGES:
                return _TORCH_STORAGES[name]
            if mod == "torch" and name in _TORCH_DTYPES:
                return _TORCH_DTYPES[name]
            raise ConvertError("%s: pickle wants %s.%s, not allowed" % (path, mod, name))

        def persistent_load(self, pid):
            # ('storage', storage_type, key, location, numel)
            if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
                raise ConvertError("%s: unexpected persistent id" % path)
            dtype, key = pid[1], pid[2]
            if dtype not in (gguf.F32, gguf.F16, gguf.BF16):
                raise ConvertError("%s: unsupported storage type" % path)
            return (dtype, zf.read(root + "data/" + str(key)))

    sd = U(zf.open(pkl)).load()
    if not isinstance(sd, dict):
        raise ConvertError("%s: not a state dict" % path)
    out.update(sd)


def read_weights(d):
    out = {}
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        read_safetensors(os.path.join(d, "model.safetensors"), out)
    elif os.path.exists(idx):
        for shard in sorted(set(json.load(open(idx))["weight_map"].values())):
            read_safetensors(os.path.join(d, shard), out)
    elif os.path.exists(os.path.join(d, "pytorch_model.bin")):
        read_torch_bin(os.path.join(d, "pytorch_model.bin"), out)
    else:
        raise ConvertError("%s: no model.safetensors, index or pytorch_model.bin" % d)
    return out


# ---------------------------------------------------------------- tensor transforms

def permute_rows(raw, n_rows, n_heads, row_bytes):
    """transformers' rotate_half layout -> adjacent pairs, per head:
    new row h*hd + 2i + j = old row h*hd + j*hd/2 + i."""
    if n_rows % n_heads or (n_rows // n_heads) % 2:
        raise ConvertError("q/k rows %d not divisible into %d heads of even size" % (n_rows, n_heads))
    hd = n_rows // n_heads
    out = bytearray(len(raw))
    for h in range(n_heads):
        for i in range(hd // 2):
            for j in (0, 1):
                src = h * hd + j * (hd // 2) + i
                dst = h * hd + 2 * i + j
                out[dst * row_bytes:(dst + 1) * row_bytes] = raw[src * row_bytes:(src + 1) * row_bytes]
    return bytes(out)


def emit(w, name, shape, dtype, raw, outtype, add=0.0):
    """shape in torch order ([out, in] for matrices); GGUF dims are reversed."""
    dims = list(reversed(shape))
    if len(shape) == 1 or add:
        vals = gguf.f32_values(raw, dtype)
        if add:
            vals = [v + add for v in vals]
        w.add_tensor(name, dims, gguf.F32, gguf.encode_f32(vals))
        return
    if outtype == dtype:
        w.add_tensor(name, dims, outtype, raw)
        return
    if outtype == gguf.Q8_0 and shape[-1] % gguf.QK8_0:
        raise ConvertError("%s: row length %d is not a multiple of 32 (Q8_0)" % (name, shape[-1]))
    if outtype == gguf.NVFP4 and shape[-1] % gguf.QK_NVFP4:
        raise ConvertError("%s: row length %d is not a multiple of 64 (NVFP4)" % (name, shape[-1]))
    w.add_tensor(name, dims, outtype, gguf.encode(gguf.f32_values(raw, dtype), outtype))


# ---------------------------------------------------------------- vocabulary

def load_tokenizer(d):
    tj = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    cfg_path = os.path.join(d, "tokenizer_config.json")
    tc = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    model = tj.get("model", {})
    if model.get("type") != "BPE":
        raise ConvertError("tokenizer.json: model type %r, want BPE" % model.get("type"))
    vocab = dict(model["vocab"])
    added = {}
    for t in tj.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        added[t["id"]] = t
    merges = []
    for m in model.get("merges", []):
        merges.append(m if isinstance(m, str) else " ".join(m))
    tmpl = tc.get("chat_template")
    jinja = os.path.join(d, "chat_template.jinja")
    if tmpl is None and os.path.exists(jinja):
        tmpl = open(jinja, encoding="utf-8").read()
    if isinstance(tmpl, list):  # named templates: keep the default one
        tmpl = next((t["template"] for t in tmpl if t.get("name") == "default"), None)
    return tj, tc, vocab, added, merges, tmpl


def add_bos_default(tj, tc, bos_text):
    if "add_bos_token" in tc:
        return bool(tc["add_bos_token"])
    pp = tj.get("post_processor") or {}
    procs = pp.get("processors", [pp]) if pp.get("type") == "Sequence" else [pp]
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            first = p.get("single", [{}])[0]
            return first.get("SpecialToken", {}).get("id") == bos_text
    return False


def token_text(tc, key):
    v = tc.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    return v


def write_vocab(w, d, n_vocab_cfg):
    tj, tc, vocab, added, merges, tmpl = load_tokenizer(d)
    n = max(max(vocab.values()) + 1, n_vocab_cfg)
    if n != n_vocab_cfg:
        raise ConvertError("tokenizer has %d ids but config vocab_size is %d" % (n, n_vocab_cfg))
    tokens = [None] * n
    for s, i in vocab.items():
        tokens[i] = s
    types = []
    for i in range(n):
        if tokens[i] is None:
            tokens[i] = "[PAD%d]" % i
            types.append(TOKEN_UNUSED)
        elif i in added:
            types.append(TOKEN_CONTROL if added[i].get("special") else TOKEN_USER_DEFINED)
        else:
            types.append(TOKEN_NORMAL)
    w.add("tokenizer.ggml.model", gguf.T_STR, "gpt2")
    w.add("tokenizer.ggml.pre", gguf.T_STR, "llama4")
    w.add("tokenizer.ggml.tokens", gguf.T_ARR, (gguf.T_STR, tokens))
    w.add("tokenizer.ggml.token_type", gguf.T_ARR, (gguf.T_I32, types))
    w.add("tokenizer.ggml.merges", gguf.T_ARR, (gguf.T_STR, merges))
    ids = {}
    bos_text = token_text(tc, "bos_token") or "<|begin_of_text|>"
    for key, text in (("bos", bos_text), ("eos", token_text(tc, "eos_token") or "<|end_of_text|>"),
                      ("eot", "<|eot|>"), ("eom", "<|eom|>"),
                      ("padding", token_text(tc, "pad_token")), ("mask", token_text(tc, "mask_token"))):
        if text is not None and text in vocab:
            ids[key] = vocab[text]
            w.add("tokenizer.ggml.%s_token_id" % key, gguf.T_U32, vocab[text])
        elif key in ("bos", "eos"):
            raise ConvertError("tokenizer: %s token %r not in the vocabulary" % (key, text))
    w.add("tokenizer.ggml.add_bos_token", gguf.T_BOOL, add_bos_default(tj, tc, bos_text))
    if tmpl:
        w.add("tokenizer.chat_template", gguf.T_STR, tmpl)
    return ids, n


# ---------------------------------------------------------------- model

def text_hparams(cfg):
    h = dict(cfg.get("text_config") or cfg)
    need = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
            "sliding_window", "layer_types", "qk_scale_factor", "output_multiplier",
            "final_logit_softcapping"]
    miss = [k for k in need if h.get(k) is None]
    if miss:
        raise ConvertError("config.json: missing text config keys: " + ", ".join(miss))
    if h.get("attention_bias"):
        raise ConvertError("config.json: attention_bias is not supported by muse-glimmer GGUF")
    if h.get("hidden_activation", "silu") != "silu":
        raise ConvertError("config.json: hidden_activation %r, want silu" % h["hidden_activation"])
    if abs(h.get("post_norm_eps", 1e-8) - 1e-8) > 1e-12:
        raise ConvertError("config.json: post_norm_eps %r: llama.cpp hard-codes 1e-8" % h["post_norm_eps"])
    rp = h.get("rope_parameters") or {}
    if rp.get("rope_type", "default") != "default":
        raise ConvertError("config.json: rope_type %r is not supported" % rp.get("rope_type"))
    theta = rp.get("rope_theta", h.get("rope_theta"))
    if theta is None:
        raise ConvertError("config.json: no rope_theta")
    L = h["num_hidden_layers"]
    lt = h["layer_types"]
    if len(lt) != L or any(t not in ("sliding_attention", "full_attention") for t in lt):
        raise ConvertError("config.json: layer_types must list %d sliding/full entries" % L)
    lrt = h.get("layer_rope_theta") or [0 if t == "full_attention" else theta for t in lt]
    for il in range(L):
        nope = not lrt[il]
        if nope != (lt[il] == "full_attention"):
            raise ConvertError("config.json: layer %d is %s with rope theta %r; the GGUF format has RoPE "
                               "exactly on sliding layers" % (il, lt[il], lrt[il]))
        if not nope and lrt[il] != theta:
            raise ConvertError("config.json: layer %d rope theta %r differs from %r" % (il, lrt[il], theta))
    h["_theta"] = float(theta)
    return h


def convert(src, dst, outtype, name=None, log=print):
    t0 = time.time()
    cfg = json.load(open(os.path.join(src, "config.json")))
    h = text_hparams(cfg)
    L, E, hd = h["num_hidden_layers"], h["hidden_size"], h["head_dim"]
    nh, nkv = h["num_attention_heads"], h["num_key_value_heads"]
    wts = read_weights(src)
    text = {}
    for k, v in wts.items():
        if k.startswith(SKIP_PREFIXES):
            continue
        if k == "lm_head.weight":
            text[k] = v
            continue
        for p in TEXT_PREFIXES:
            if k.startswith(p):
                text[k[len(p):]] = v
                break
        else:
            raise ConvertError("unexpected tensor %s" % k)

    def get(key, shape):
        if key not in text:
            raise ConvertError("missing tensor %s" % key)
        t = text.pop(key)
        if t[0] != list(shape):
            raise ConvertError("tensor %s has shape %s, want %s" % (key, t[0], list(shape)))
        return t

    w = gguf.Writer()
    w.add("general.architecture", gguf.T_STR, ARCH)
    w.add("general.type", gguf.T_STR, "model")
    w.add("general.name", gguf.T_STR, name or os.path.basename(os.path.abspath(src)))
    w.add("general.file_type", gguf.T_U32, gguf.FTYPE[outtype])
    if outtype in (gguf.Q8_0, gguf.NVFP4):
        w.add("general.quantization_version", gguf.T_U32, 2)
    a = ARCH + "."
    w.add(a + "context_length", gguf.T_U32, h["max_position_embeddings"])
    w.add(a + "embedding_length", gguf.T_U32, E)
    w.add(a + "feed_forward_length", gguf.T_U32, h["intermediate_size"])
    w.add(a + "block_count", gguf.T_U32, L)
    w.add(a + "attention.head_count", gguf.T_U32, nh)
    w.add(a + "attention.head_count_kv", gguf.T_U32, nkv)
    w.add(a + "attention.key_length", gguf.T_U32, hd)
    w.add(a + "attention.value_length", gguf.T_U32, hd)
    w.add(a + "rope.freq_base", gguf.T_F32, h["_theta"])
    w.add(a + "attention.layer_norm_rms_epsilon", gguf.T_F32, float(h["rms_norm_eps"]))
    w.add(a + "final_logit_softcapping", gguf.T_F32, float(h["final_logit_softcapping"]))
    w.add(a + "logit_scale", gguf.T_F32, float(h["output_multiplier"]))
    w.add(a + "attention.sliding_window", gguf.T_U32, h["sliding_window"])
    w.add(a + "attention.sliding_window_pattern", gguf.T_ARR,
          (gguf.T_BOOL, [t == "sliding_attention" for t in h["layer_types"]]))
    ids, n_vocab = write_vocab(w, src, h["vocab_size"])

    V, F = h["vocab_size"], h["intermediate_size"]
    emb = get("embed_tokens.weight", [V, E])
    emit(w, "token_embd.weight", *emb, outtype)
    emit(w, "output_norm.weight", *get("norm.weight", [E]), outtype)
    if "lm_head.weight" in text:
        emit(w, "output.weight", *get("lm_head.weight", [V, E]), outtype)
    elif h.get("tie_word_embeddings", cfg.get("tie_word_embeddings")):
        emit(w, "output.weight", *emb, outtype)
    else:
        raise ConvertError("missing tensor lm_head.weight (and embeddings are not tied)")
    qscale = gguf.encode_f32([float(h["qk_scale_factor"])] * hd)
    ones = gguf.encode_f32([1.0] * hd)
    for il in range(L):
        p, b = "layers.%d." % il, "blk.%d." % il
        emit(w, b + "attn_norm.weight", *get(p + "input_layernorm.weight", [E]), outtype, add=1.0)
        shp, dt, raw = get(p + "self_attn.q_proj.weight", [nh * hd, E])
        emit(w, b + "attn_q.weight", shp, dt, permute_rows(raw, nh * hd, nh, len(raw) // (nh * hd)), outtype)
        shp, dt, raw = get(p + "self_attn.k_proj.weight", [nkv * hd, E])
        emit(w, b + "attn_k.weight", shp, dt, permute_rows(raw, nkv * hd, nkv, len(raw) // (nkv * hd)), outtype)
        emit(w, b + "attn_v.weight", *get(p + "self_attn.v_proj.weight", [nkv * hd, E]), outtype)
        w.add_tensor(b + "attn_q_norm.weight", [hd], gguf.F32, qscale)
        w.add_tensor(b + "attn_k_norm.weight", [hd], gguf.F32, ones)
        emit(w, b + "attn_gate.weight", *get(p + "self_attn.gate_proj.weight", [nh * hd, E]), outtype)
        emit(w, b + "attn_output.weight", *get(p + "self_attn.o_proj.weight", [E, nh * hd]), outtype)
        emit(w, b + "post_attention_norm.weight", *get(p + "post_attention_layernorm.weight", [E]), outtype, add=1.0)
        emit(w, b + "ffn_norm.weight", *get(p + "pre_feedforward_layernorm.weight", [E]), outtype, add=1.0)
        emit(w, b + "ffn_gate.weight", *get(p + "mlp.gate_proj.weight", [F, E]), outtype)
        emit(w, b + "ffn_up.weight", *get(p + "mlp.up_proj.weight", [F, E]), outtype)
        emit(w, b + "ffn_down.weight", *get(p + "mlp.down_proj.weight", [E, F]), outtype)
        emit(w, b + "post_ffw_norm.weight", *get(p + "post_feedforward_layernorm.weight", [E]), outtype, add=1.0)
    if text:
        raise ConvertError("unconverted tensors: " + ", ".join(sorted(text)))
    w.write(dst)
    log("wrote %s: %s, %d layers, n_embd %d, vocab %d, %d tensors, %d bytes, %.1fs" % (
        dst, gguf.TYPE_NAMES[outtype], L, E, n_vocab, len(w.tensors), os.path.getsize(dst), time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description="Hugging Face Muse Glimmer -> muse-glimmer GGUF")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--outtype", default="q8_0", choices=["f32", "f16", "bf16", "q8_0", "nvfp4"])
    ap.add_argument("--name")
    a = ap.parse_args()
    outtype = {"f32": gguf.F32, "f16": gguf.F16, "bf16": gguf.BF16, "q8_0": gguf.Q8_0, "nvfp4": gguf.NVFP4}[a.outtype]
    try:
        convert(a.src, a.dst, outtype, a.name)
    except (ConvertError, OSError, ValueError, KeyError) as e:
        print("hf_to_gguf: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
