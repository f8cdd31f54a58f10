#!/usr/bin/env python3
"""Writes the golden prompt spec: prompts from 1 token to several thousand
(far past every golden model's window), as token ids so they do not depend on
the tokenizer. usage: make-spec.py N_VOCAB BOS > spec.json"""
import json, sys

n_vocab, bos = int(sys.argv[1]), int(sys.argv[2])
usable = n_vocab - 64  # stay clear of the special and reserved ids at the end


def ids(n, seed):
    x, out = seed, [bos]
    for _ in range(n - 1):
        x = (x * 1103515245 + 12345) % 2147483648
        out.append((x >> 8) % usable)
    return out


prompts = [{"name": "bos", "ids": [bos]},
           {"name": "p7", "ids": ids(7, 1)},
           {"name": "p100", "ids": ids(100, 2)},
           {"name": "p600", "ids": ids(600, 3)},
           {"name": "p3000", "ids": ids(3000, 4)}]
json.dump({"n_predict": 32, "top": 8, "ctx": 4096, "prompts": prompts}, sys.stdout)
