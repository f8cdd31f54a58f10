#!/usr/bin/env python3
"""Writes a tiny random-weight MuseGlimmer checkpoint (transformers classes,
float32 safetensors) for converter tests, with noisy norm weights so that the
"+1" folding and the plain final norm are both exercised.
usage: tiny_random.py TOKENIZER_DIR OUT_DIR [seed]"""
import sys
import torch
from transformers import AutoTokenizer
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from glimmer_model import TINY, make_config, make_model, text_params

tok_dir, out_dir = sys.argv[1], sys.argv[2]
torch.manual_seed(int(sys.argv[3]) if len(sys.argv) > 3 else 11)
tok = AutoTokenizer.from_pretrained(tok_dir)
cfg = make_config(TINY, tok)
model = make_model(cfg, norm_init=0.3)
with torch.no_grad():  # larger weights than the 0.02 init so that logits are far from uniform
    for n, p in model.named_parameters():
        if p.ndim == 2 and "language_model" in n or n == "lm_head.weight":
            p.normal_(0.0, 0.08)
model.save_pretrained(out_dir)
tok.save_pretrained(out_dir)
print("tiny model:", text_params(model), "text parameters; layer_types", cfg.text_config.layer_types,
      "layer_rope_theta", cfg.text_config.layer_rope_theta)
