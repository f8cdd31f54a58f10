#!/usr/bin/env python3
"""Self-check of the PyTorch pieces dflash_train.py relies on (seconds; run
by tools/train/dflash-device.sh before training, on the device it trains
on): the target's KV-cached forward (Target.generate, Target._run with a
cache) gives the logits of a full forward, also past the sliding window;
the drafter's batched training forward (Drafter.forward_windows) computes
what its per-block forward (Drafter.forward, the one checked against muser
and llama.cpp) does. Exit status 1 with the differences when not.

usage: dflash_check.py [--target T.gguf] [--device cpu|cuda]
"""
import argparse, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dflash_model import Drafter, Target, new_config  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=os.path.join(HERE, "..", "..", "models", "muser-default.gguf"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    t = Target(a.target, dev)
    t.n_swa = 16  # the window matters at these lengths
    ids = torch.randint(0, t.n_vocab - 1, (2, 20), device=dev)
    ids[:, 0] = t.bos
    g = t.generate(ids, 12)
    _, full = t.forward(g, [])
    cache = [[torch.zeros(2, t.n_head_kv, 32, t.hd, device=dev) for _ in range(2)] for _ in range(t.n_layer)]
    _, a0 = t._run(g[:, :20], 0, cache, [])
    parts = [a0]
    for p in range(20, 32):
        parts.append(t._run(g[:, p:p + 1], p, cache, [])[1])
    d_cache = float((torch.cat(parts, 1) - full).abs().max())
    greedy_ok = bool((full[:, 19:31].argmax(-1) == g[:, 20:32]).float().mean() >= 0.9)

    cfg = new_config(t, n_layer=2, block_size=4)
    d = Drafter(cfg, t.tok_embd, t.output).to(dev)
    with torch.no_grad():
        for p in d.parameters():
            torch.nn.init.normal_(p, 0, 0.05) if p.dim() > 1 else torch.nn.init.normal_(p, 1, 0.1)
    feats, _ = t.forward(g, [1, 4, 7])
    S, B = 2, 4
    an = torch.tensor([[5, 11, 20], [3, 17, 28]], device=dev)
    bt = torch.full((S, 3, B), cfg["mask_token_id"], device=dev)
    bt[:, :, 0] = g.gather(1, an)
    bt = bt.view(S, -1)
    with torch.no_grad():
        lw = d.forward_windows(feats, an, bt) @ d.output.T
        d_win, scale = 0.0, float(lw.abs().max())
        for s in range(S):
            for j in range(3):
                p0 = int(an[s, j])
                lg = d(feats[s, :p0], torch.arange(p0, device=dev), bt[s, j * B:(j + 1) * B],
                       torch.arange(p0, p0 + B, device=dev), torch.ones(B, p0, dtype=torch.bool, device=dev),
                       torch.ones(B, B, dtype=torch.bool, device=dev))
                d_win = max(d_win, float((lg - lw[s, j * B:(j + 1) * B]).abs().max()))
    ok = d_cache < 1e-3 and greedy_ok and d_win < 1e-4 * max(scale, 1.0)
    print("dflash_check: cached vs full target logits max diff %.3g; greedy tokens consistent: %s; "
          "drafter batched vs per-block logits max diff %.3g (scale %.3g): %s" % (
              d_cache, greedy_ok, d_win, scale, "ok" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
