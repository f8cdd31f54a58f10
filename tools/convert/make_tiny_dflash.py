#!/usr/bin/env python3
"""Writes a small DFlash drafter checkpoint in the Hugging Face layout that
dflash_to_gguf.py reads (config.json, model.safetensors) for a target GGUF,
with seeded random values: the converter's test input (the real layout's
classes, transformers' muse_glimmer_assistant, exist only on the GPU
machine). Pure Python. Matrices are F32 except the FFN's, stored as BF16
(a second dtype through the converter); norms are F32 around 1.

usage: make_tiny_dflash.py TARGET.gguf OUT_DIR [--layers 2] [--block 8] [--seed 1]
       [--drop TENSOR] [--extra TENSOR] [--no-mask]   (broken variants for the tests)
"""
import argparse, json, os, random, struct, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drop")
    ap.add_argument("--extra")
    ap.add_argument("--no-mask", action="store_true")
    a = ap.parse_args()
    r = gguf.Reader(a.target)
    arch = r.kv["general.architecture"]
    g = lambda k, d=None: r.kv.get("%s.%s" % (arch, k), d)  # noqa: E731
    E, H, HK = g("embedding_length"), g("attention.head_count"), g("attention.head_count_kv")
    hd, Fd, n_t = g("attention.key_length", E // H), g("feed_forward_length"), g("block_count")
    tids = sorted({0, max(0, n_t // 2 - 1), max(0, n_t - 2)})  # outputs of these target layers
    cfg = dict(architectures=["MuseGlimmerAssistantModel"], model_type="muse_glimmer_assistant",
               hidden_size=E, num_hidden_layers=a.layers, intermediate_size=Fd, num_attention_heads=H,
               num_key_value_heads=HK, head_dim=hd, rms_norm_eps=1e-6, rope_theta=10000.0,
               max_position_embeddings=2048, block_size=a.block, target_layer_ids=tids,
               vocab_size=len(r.kv["tokenizer.ggml.tokens"]), hidden_act="silu")
    if not a.no_mask:
        cfg["mask_token_id"] = len(r.kv["tokenizer.ggml.tokens"]) - 1
    rng = random.Random(a.seed)
    shapes = {"encoder.fc.weight": [E, len(tids) * E], "encoder.output_norm_enc.weight": [E],
              "model.norm.weight": [E]}
    for i in range(a.layers):
        p = "model.layers.%d." % i
        shapes.update({p + "input_layernorm.weight": [E], p + "self_attn.q_proj.weight": [H * hd, E],
                       p + "self_attn.k_proj.weight": [HK * hd, E], p + "self_attn.v_proj.weight": [HK * hd, E],
                       p + "self_attn.o_proj.weight": [E, H * hd], p + "self_attn.q_norm.weight": [hd],
                       p + "self_attn.k_norm.weight": [hd], p + "post_attention_layernorm.weight": [E],
                       p + "mlp.gate_proj.weight": [Fd, E], p + "mlp.up_proj.weight": [Fd, E],
                       p + "mlp.down_proj.weight": [E, Fd]})
    if a.drop:
        del shapes[a.drop]
    if a.extra:
        shapes[a.extra] = [E]
    head, blobs, off = {}, [], 0
    for name in sorted(shapes):
        sh = shapes[name]
        n = 1
        for x in sh:
            n *= x
        if len(sh) == 1:
            vals = [1.0 + rng.uniform(-0.2, 0.2) for _ in range(n)]
        else:
            amp = (3.0 / sh[1]) ** 0.5
            vals = [rng.uniform(-amp, amp) for _ in range(n)]
        if ".mlp." in name:  # BF16: the top half of the float's bits
            b = b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in vals)
            dt = "BF16"
        else:
            b = struct.pack("<%df" % n, *vals)
            dt = "F32"
        head[name] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    os.makedirs(a.out, exist_ok=True)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=1)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    main()
