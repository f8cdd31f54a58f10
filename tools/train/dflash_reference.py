#!/usr/bin/env python3
"""Writes the expected drafts of a drafter GGUF for a target GGUF, computed
by the PyTorch drafter of dflash_model.py (llama.cpp's dflash graph), on the
deterministic features of dflash_model.test_features: the reference
tests/unit/test_dflash.c holds muser's drafter to (tests/data/dflash/).

usage: dflash_reference.py TARGET.gguf DRAFTER.gguf OUT.json
"""
import json, sys
import torch
from dflash_model import Target, drafter_from_gguf, draft_block, test_features


def main():
    tpath, dpath, out = sys.argv[1:4]
    t = Target(tpath)
    d, tl = drafter_from_gguf(dpath, t)
    n_feat = len(tl) * t.n_embd
    feat = test_features(64, n_feat)
    cases = []
    nd = d.cfg["block_size"] - 1
    for n_ctx, last in ((0, 3), (1, 7), (5, 11), (17, 100), (40, 5), (64, 250)):
        lg = draft_block(d, feat, n_ctx, last, nd)
        top2 = torch.topk(lg, 2, dim=-1)
        cases.append(dict(n_ctx=n_ctx, last=last, drafts=top2.indices[:, 0].tolist(),
                          margins=[round(float(x), 6) for x in (top2.values[:, 0] - top2.values[:, 1])]))
    json.dump(dict(target=tpath, drafter=dpath, n_feat=n_feat, cases=cases), open(out, "w"), indent=1)
    print("wrote %s: %d cases of %d drafts" % (out, len(cases), nd))


if __name__ == "__main__":
    main()
