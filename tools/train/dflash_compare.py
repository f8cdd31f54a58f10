#!/usr/bin/env python3
"""muser's DFlash drafts against the PyTorch drafter's, on the same
sequences, policy-free.

For each prompt: muser's greedy continuation (`muser run --prompt-ids`,
BOS first); then at every position a of the continuation, the block
[ids[a], mask x K] drafted from the context rows < a by
  - muser (build/bench/draftacc: one target forward with feature capture,
    one injection, a drafting pass per anchor), and
  - the PyTorch drafter of dflash_model.py (features from the PyTorch
    target, float32, on the same ids; per anchor, draft_block),
and the accepted length of each against muser's own continuation (what
verification compares with). Prints per prompt: agreement of the two
drafters' tokens per block row, mean accepted length and the first row's
acceptance of each, and the same figures over every prompt.

usage: dflash_compare.py [--model M.gguf] [--draft D.gguf] [--muser ./muser]
       [--draftacc build/bench/draftacc] [-n 256] [-k 15] [--prompt-ids FILE]
(FILE: a JSON list of id lists; default: the texts of dflash_accept.py and
bench/spec-ngram.)
"""
import argparse, json, os, subprocess, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
from dflash_model import Target, drafter_from_gguf, draft_block  # noqa: E402
from dflash_accept import TEXTS  # noqa: E402

MORE = {
    "py-rename": "Rename x to count in this function.\n\ndef f(x):\n    total = 0\n    for i in range(x):\n"
                 "        total += i * x\n    return total + x\n\ndef f(count):\n    total = 0\n    for i in range(count):\n",
    "man-ls": "ls -la lists all files. ls -la lists all files in long format. The ls command",
    "free": "The history of the printing press",
}


def accepted(drafts, seq, a):
    n = 0
    while n < len(drafts) and a + 1 + n < len(seq) and drafts[n] == seq[a + 1 + n]:
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "muser-default.gguf"))
    ap.add_argument("--draft", default=os.path.join(ROOT, "models", "muser-default.dflash.gguf"))
    ap.add_argument("--muser", default=os.path.join(ROOT, "muser"))
    ap.add_argument("--draftacc", default=os.path.join(ROOT, "build", "bench", "draftacc"))
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-k", type=int, default=15)
    ap.add_argument("--prompt-ids")
    a = ap.parse_args()
    t = Target(a.model)
    d, tl = drafter_from_gguf(a.draft, t)
    layers = list(tl)
    work = []
    if a.prompt_ids:
        work = [("ids-%d" % i, p) for i, p in enumerate(json.load(open(a.prompt_ids)))]
    else:
        for name, text in list(TEXTS.items()) + list(MORE.items()):
            r = subprocess.run([a.muser, "tokenize", "-m", a.model, text], capture_output=True, text=True, check=True)
            work.append((name, [t.bos] + json.loads(r.stdout)))
    tot = dict(blocks=0, agree=[0] * a.k, m_acc=0, p_acc=0, m_first=0, p_first=0, m_hist={}, p_hist={})
    for name, prompt in work:
        r = subprocess.run([a.muser, "run", "-m", a.model, "--prompt-ids", ",".join(map(str, prompt)), "-n",
                            str(a.n), "--temp", "0", "--ignore-eos", "--json", "--threads", "1"],
                           capture_output=True, text=True, check=True)
        out = [json.loads(x)["id"] for x in r.stdout.splitlines() if x.startswith('{"id"')]
        seq = prompt + out
        P = len(prompt)
        r = subprocess.run([a.draftacc, a.model, a.draft, str(P), str(a.k)], input=" ".join(map(str, seq)),
                           capture_output=True, text=True, check=True)
        mus = {j["a"]: j["drafts"] for j in map(json.loads, r.stdout.splitlines())}
        feats, _ = t.forward(torch.tensor([seq]), layers)
        feats = feats[0]
        agree = [0] * a.k
        ma = pa = mf = pf = nb = 0
        for anc in range(P, len(seq) - 1):
            pt = draft_block(d, feats, anc, seq[anc], a.k).argmax(-1).tolist()
            mt = mus[anc]
            for i in range(a.k):
                agree[i] += pt[i] == mt[i]
            x, y = accepted(mt, seq, anc), accepted(pt, seq, anc)
            ma += x
            pa += y
            mf += x > 0
            pf += y > 0
            nb += 1
            tot["m_hist"][x] = tot["m_hist"].get(x, 0) + 1
            tot["p_hist"][y] = tot["p_hist"].get(y, 0) + 1
        print("%-14s blocks %3d  row agreement %s  mean accepted muser %.2f torch %.2f  first row muser %.2f torch %.2f"
              % (name, nb, " ".join("%.2f" % (g / nb) for g in agree[:6]), ma / nb, pa / nb, mf / nb, pf / nb),
              flush=True)
        tot["blocks"] += nb
        tot["agree"] = [u + v for u, v in zip(tot["agree"], agree)]
        tot["m_acc"] += ma
        tot["p_acc"] += pa
        tot["m_first"] += mf
        tot["p_first"] += pf
    nb = tot["blocks"]
    print("all: %d blocks; row agreement %s; mean accepted muser %.3f torch %.3f; first row muser %.3f torch %.3f"
          % (nb, " ".join("%.3f" % (g / nb) for g in tot["agree"]), tot["m_acc"] / nb, tot["p_acc"] / nb,
             tot["m_first"] / nb, tot["p_first"] / nb))
    print("accepted-length histogram muser", dict(sorted(tot["m_hist"].items())))
    print("accepted-length histogram torch", dict(sorted(tot["p_hist"].items())))


if __name__ == "__main__":
    main()
