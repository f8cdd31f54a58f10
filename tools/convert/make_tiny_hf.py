#!/usr/bin/env python3
"""Writes a tiny, seeded-random Hugging Face Muse Glimmer checkpoint in pure
Python (config.json in transformers' MuseGlimmerConfig layout,
model.safetensors, tokenizer.json with a small byte-level BPE,
tokenizer_config.json) so that the converter can be tested without torch.
Geometry: 4 layers (3 sliding + 1 NoPE full), hidden 64, 4 query / 2 KV
heads of 16 (attention width 64), FFN 96, window 3, vocab 280 (256 bytes, 14
merges, 10 specials). Norm weights are random so that the "+1" folding shows.
usage: make_tiny_hf.py OUT_DIR [seed] [--dtype F32|BF16] [--ff N (96)]"""
import json, os, random, struct, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|message|>", "<|eot|>",
            "<|eom|>", "<|image_start|>", "<|image_end|>", "<|patch|>", "<|mask|>"]
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
          ("Ġ", "s"), ("r", "e"), ("a", "t"), ("e", "n"), ("Ġ", "c"), ("o", "r"), ("Ġ", "w")]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}<|message|>"
            "{{ m['content'] }}<|eot|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}")


def byte_chars():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def main():
    out = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else 7
    dtype = sys.argv[sys.argv.index("--dtype") + 1] if "--dtype" in sys.argv else "F32"
    ff = int(sys.argv[sys.argv.index("--ff") + 1]) if "--ff" in sys.argv else 96
    rnd = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    vocab = {c: i for i, c in enumerate(byte_chars())}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    n_text = len(vocab)
    added = [{"id": n_text + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    V = n_text + len(SPECIALS)
    bos, eos = n_text, n_text + 1
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": "llama4 regex (see tools/train/train_tokenizer.py)"},
               "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
          "post_processor": {"type": "TemplateProcessing",
                             "single": [{"SpecialToken": {"id": SPECIALS[0], "type_id": 0}},
                                        {"Sequence": {"id": "A", "type_id": 0}}],
                             "pair": [], "special_tokens": {SPECIALS[0]: {"id": SPECIALS[0], "ids": [bos],
                                                                          "tokens": [SPECIALS[0]]}}},
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                    "ignore_merges": False, "vocab": vocab, "merges": [[a, b] for a, b in MERGES]}}
    json.dump(tj, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump({"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[1],
               "mask_token": SPECIALS[9], "chat_template": TEMPLATE},
              open(os.path.join(out, "tokenizer_config.json"), "w"))
    E, L, nh, nkv, hd, F = 64, 4, 4, 2, 16, ff
    text = {"vocab_size": V, "hidden_size": E, "intermediate_size": F, "num_hidden_layers": L,
            "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
            "max_position_embeddings": 256, "sliding_window": 3, "rms_norm_eps": 1e-5, "post_norm_eps": 1e-8,
            "hidden_activation": "silu", "attention_bias": False,
            "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
            "layer_rope_theta": [10000.0, 10000.0, 10000.0, 0],
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "qk_scale_factor": 3.87, "output_multiplier": 0.5, "final_logit_softcapping": 20.0,
            "bos_token_id": bos, "eos_token_id": eos, "tie_word_embeddings": False,
            "model_type": "muse_glimmer_text"}
    cfg = {"architectures": ["MuseGlimmerForConditionalGeneration"], "model_type": "muse_glimmer",
           "text_config": text, "vision_config": {"hidden_size": 32, "num_hidden_layers": 1},
           "image_token_id": n_text + 8, "video_token_id": n_text + 8, "tie_word_embeddings": False}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)

    tensors = []
    def add(name, shape, std=None, mean=0.0):
        n = 1
        for s in shape:
            n *= s
        tensors.append((name, shape, [mean + rnd.gauss(0.0, std) for _ in range(n)]))
    p = "model.language_model."
    add(p + "embed_tokens.weight", [V, E], 1.0)
    for il in range(L):
        q = p + "layers.%d." % il
        add(q + "input_layernorm.weight", [E], 0.3)
        add(q + "self_attn.q_proj.weight", [nh * hd, E], 0.2)
        add(q + "self_attn.k_proj.weight", [nkv * hd, E], 0.2)
        add(q + "self_attn.v_proj.weight", [nkv * hd, E], 0.2)
        add(q + "self_attn.gate_proj.weight", [nh * hd, E], 0.2)
        add(q + "self_attn.o_proj.weight", [E, nh * hd], 0.2)
        add(q + "post_attention_layernorm.weight", [E], 0.3)
        add(q + "pre_feedforward_layernorm.weight", [E], 0.3)
        add(q + "mlp.gate_proj.weight", [F, E], 0.2)
        add(q + "mlp.up_proj.weight", [F, E], 0.2)
        add(q + "mlp.down_proj.weight", [E, F], 0.2)
        add(q + "post_feedforward_layernorm.weight", [E], 0.3)
    add(p + "norm.weight", [E], 0.3, 1.0)
    add("lm_head.weight", [V, E], 0.3)
    add("model.vision_tower.patch_embedder.patch_embedding.weight", [32, 8], 0.1)  # not converted
    header, blobs, off = {}, [], 0
    for name, shape, vals in tensors:
        b = gguf.encode_f32(vals) if dtype == "F32" else gguf.encode_bf16(vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    main()
