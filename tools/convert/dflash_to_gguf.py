#!/usr/bin/env python3
"""Converts a DFlash drafter checkpoint in the Hugging Face layout (the Muse
Glimmer assistant, transformers' muse_glimmer_assistant, as llama.cpp's
converter reads it: MuseGlimmerAssistantModel) into a `dflash` GGUF that
llama.cpp and muser load (docs/speculative.md "The drafter file").

Pure Python 3 like hf_to_gguf.py (whose checkpoint readers and tensor
encodings it shares): reads config.json and model.safetensors (or shards,
or pytorch_model.bin).

The rules (facts from llama.cpp's converter for this architecture):
- architecture `dflash`; the usual geometry keys from config.json
  (hidden_size, num_hidden_layers, intermediate_size, num_attention_heads,
  num_key_value_heads, head_dim, rms_norm_eps, rope_theta,
  max_position_embeddings), dflash.block_size from block_size;
- dflash.target_layers = [i + 1 for i in target_layer_ids]: the config
  names the target layers whose *outputs* the drafter reads, the GGUF the
  layers whose *inputs* those are;
- sliding_window and layer_types, when both are present, become
  attention.sliding_window and sliding_window_pattern;
- mask_token_id -> tokenizer.ggml.mask_token_id; the vocabulary is the
  target's: copied from the target GGUF (--target T.gguf) or built from the
  target's HF directory (--target T_DIR, as hf_to_gguf.py does);
- tensors keep their values (no norm shift; RoPE stays NeoX, so q/k rows
  are not permuted): encoder.fc -> fc, encoder.output_norm_enc ->
  enc.output_norm, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
  self_attn.{q,k}_norm, post_attention_layernorm, mlp.{gate,up,down}_proj}
  -> blk.N.{attn_norm, attn_q/k/v/output, attn_q/k_norm, ffn_norm,
  ffn_gate/up/down}, model.norm -> output_norm, lm_head -> output,
  model.embed_tokens -> token_embd (both optional: muser and llama.cpp then
  use the target's). model.fc / model.hidden_norm / model.lm_head (the
  z-lab DFlash names) are accepted too, and a "model." prefix may be absent.
  Any other tensor is an error, never silently dropped.

usage: dflash_to_gguf.py HF_DIR OUT.gguf --target T.gguf|T_DIR [--outtype f32|f16|bf16|q8_0] [--name NAME]
"""
import argparse, json, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf
from hf_to_gguf import ConvertError, emit, read_weights, write_vocab

ARCH = "dflash"
GLOBAL = {
    "encoder.fc.weight": "fc.weight", "model.fc.weight": "fc.weight", "fc.weight": "fc.weight",
    "encoder.output_norm_enc.weight": "enc.output_norm.weight", "model.hidden_norm.weight": "enc.output_norm.weight",
    "hidden_norm.weight": "enc.output_norm.weight",
    "model.norm.weight": "output_norm.weight", "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight", "model.lm_head.weight": "output.weight",
    "model.embed_tokens.weight": "token_embd.weight", "embed_tokens.weight": "token_embd.weight",
}
LAYER = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
LAYER_RE = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)\.weight$")


def gguf_name(name, n_layer):
    if name in GLOBAL:
        return GLOBAL[name]
    m = LAYER_RE.match(name)
    if m and m.group(2) in LAYER:
        il = int(m.group(1))
        if il >= n_layer:
            raise ConvertError("tensor %s: layer %d, but num_hidden_layers is %d" % (name, il, n_layer))
        return "blk.%d.%s.weight" % (il, LAYER[m.group(2)])
    raise ConvertError("tensor %s: not part of a DFlash drafter (see the rules in this script)" % name)


def _arr_type(items):
    if all(isinstance(x, str) for x in items):
        return gguf.T_STR
    if all(isinstance(x, bool) for x in items):
        return gguf.T_BOOL
    if all(isinstance(x, int) for x in items):
        return gguf.T_I32
    return gguf.T_F32


def copy_vocab(w, target_gguf):
    """The target GGUF's tokenizer.* keys, as they are."""
    r = gguf.Reader(target_gguf)
    n_vocab = None
    for k, v in r.kv.items():
        if not k.startswith("tokenizer.") or k == "tokenizer.ggml.mask_token_id":
            continue
        t = r.kv_types[k]
        w.add(k, t, (_arr_type(v), v) if t == gguf.T_ARR else v)
        if k == "tokenizer.ggml.tokens":
            n_vocab = len(v)
    return n_vocab


def need(cfg, k):
    if k not in cfg:
        raise ConvertError("config.json: missing %s" % k)
    return cfg[k]


def convert(src, dst, target, outtype, name=None, log=print):
    cfg = json.load(open(os.path.join(src, "config.json"), encoding="utf-8"))
    n_layer = int(need(cfg, "num_hidden_layers"))
    E = int(need(cfg, "hidden_size"))
    n_head = int(need(cfg, "num_attention_heads"))
    w = gguf.Writer()
    w.add("general.architecture", gguf.T_STR, ARCH)
    w.add("general.name", gguf.T_STR, name or cfg.get("_name_or_path") or os.path.basename(os.path.abspath(src)))
    w.add("general.file_type", gguf.T_U32, gguf.FTYPE[outtype])
    w.add(ARCH + ".context_length", gguf.T_U32, int(cfg.get("max_position_embeddings", 4096)))
    w.add(ARCH + ".embedding_length", gguf.T_U32, E)
    w.add(ARCH + ".block_count", gguf.T_U32, n_layer)
    w.add(ARCH + ".feed_forward_length", gguf.T_U32, int(need(cfg, "intermediate_size")))
    w.add(ARCH + ".attention.head_count", gguf.T_U32, n_head)
    w.add(ARCH + ".attention.head_count_kv", gguf.T_U32, int(cfg.get("num_key_value_heads", n_head)))
    hd = int(cfg.get("head_dim") or E // n_head)
    w.add(ARCH + ".attention.key_length", gguf.T_U32, hd)
    w.add(ARCH + ".attention.value_length", gguf.T_U32, hd)
    w.add(ARCH + ".attention.layer_norm_rms_epsilon", gguf.T_F32, float(need(cfg, "rms_norm_eps")))
    theta = cfg.get("rope_theta")
    if theta is None and isinstance(cfg.get("rope_parameters"), dict):
        theta = cfg["rope_parameters"].get("rope_theta")
    w.add(ARCH + ".rope.freq_base", gguf.T_F32, float(theta if theta is not None else 10000.0))
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        w.add(ARCH + ".hidden_activation", gguf.T_STR, act)  # llama.cpp runs gelu too; muser refuses it
    w.add(ARCH + ".block_size", gguf.T_U32, int(need(cfg, "block_size")))
    tl = [int(x) + 1 for x in need(cfg, "target_layer_ids")]
    w.add(ARCH + ".target_layers", gguf.T_ARR, (gguf.T_I32, tl))
    if cfg.get("sliding_window") and cfg.get("layer_types"):
        w.add(ARCH + ".attention.sliding_window", gguf.T_U32, int(cfg["sliding_window"]))
        w.add(ARCH + ".attention.sliding_window_pattern", gguf.T_ARR,
              (gguf.T_BOOL, [t == "sliding_attention" for t in cfg["layer_types"]]))
    if os.path.isdir(target):
        _, n_vocab = write_vocab(w, target, int(cfg.get("vocab_size") or 0) or json.load(
            open(os.path.join(target, "config.json")))["vocab_size"])
    else:
        n_vocab = copy_vocab(w, target)
    if cfg.get("mask_token_id") is None:
        raise ConvertError("config.json: missing mask_token_id (the block's mask token)")
    mask = int(cfg["mask_token_id"])
    if n_vocab is not None and not 0 <= mask < n_vocab:
        raise ConvertError("mask_token_id %d outside the target's vocabulary of %d" % (mask, n_vocab))
    w.add("tokenizer.ggml.mask_token_id", gguf.T_U32, mask)

    weights = read_weights(src)
    seen = {}
    for hf in sorted(weights):
        shape, dtype, raw = weights[hf]
        g = gguf_name(hf, n_layer)
        if g in seen:
            raise ConvertError("tensors %s and %s both map to %s" % (seen[g], hf, g))
        seen[g] = hf
        emit(w, g, shape, dtype, raw, outtype)
    required = ["fc.weight", "enc.output_norm.weight", "output_norm.weight"] + [
        "blk.%d.%s.weight" % (il, t) for il in range(n_layer) for t in LAYER.values()]
    missing = [t for t in required if t not in seen]
    if missing:
        raise ConvertError("missing tensors: %s" % ", ".join(missing[:6]))
    w.write(dst)
    log("wrote %s: %d tensors, target layers %s, block size %d, mask token %d" % (
        dst, len(seen), tl, int(cfg["block_size"]), mask))


def main():
    ap = argparse.ArgumentParser(description="Hugging Face DFlash drafter (Muse Glimmer assistant) -> dflash GGUF")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--target", required=True, help="the target: its GGUF, or its Hugging Face directory")
    ap.add_argument("--outtype", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--name")
    a = ap.parse_args()
    types = {"f32": gguf.F32, "f16": gguf.F16, "bf16": gguf.BF16, "q8_0": gguf.Q8_0}
    try:
        convert(a.src, a.dst, a.target, types[a.outtype], a.name)
    except (ConvertError, OSError, ValueError) as e:
        print("dflash_to_gguf: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
