#!/usr/bin/env python3
"""Writes the bundled drafter's figures into a Markdown file between the
lines `<!-- dflash-figures:begin -->` and `<!-- dflash-figures:end -->`
(docs/speculative.md), from the logs tools/train/dflash-install.sh copies:
summary.json and log.jsonl (dflash_train.py), accept.json
(dflash_accept.py), env.txt (dflash-device.sh). Without the markers the
block is appended.

usage: dflash_figures.py LOG_DIR DOC.md
"""
import json, os, sys

BEGIN, END = "<!-- dflash-figures:begin -->", "<!-- dflash-figures:end -->"


def rates(xs, ns=None):
    if ns is None:
        return ", ".join("%.2f" % x for x in xs)
    return ", ".join("%.2f (%d)" % (x, n) for x, n in zip(xs, ns))


def block(d):
    s = json.load(open(os.path.join(d, "summary.json")))
    ev = s["heldout"]
    out = [BEGIN, ""]
    env = open(os.path.join(d, "env.txt")).read().split("\n") if os.path.exists(os.path.join(d, "env.txt")) else []
    w = s["windows"]
    out.append("Drafter: %d layers, block %d, target layers %s, %d parameters (plus the target's embedding and "
               "output matrix); trained %.0f s (%d steps, the best held-out evaluation at step %d) on %d windows "
               "(%d with sampled continuations) of %d prompt + %d generated tokens; %s." % (
                   s["layers"], s["block"], s["target_layers"], s["params"], s["train_seconds"], s["steps"],
                   s["best_step"], w["train"], w.get("sampled", 0), w["prompt"], w["gen"],
                   "; ".join(x for x in env[:2] if x) or s.get("device", "")))
    out.append("")
    ck = s.get("check_muser") or []
    if ck:
        out.append("The PyTorch target against `muser run` (greedy, held-out prompts): %s tokens agree before the "
                   "first difference; top-token probabilities differ by at most %.4f." % (
                       ", ".join("%d/%d" % (c["agree"], c["compared"]) for c in ck),
                       max(c["max_top_prob_diff"] for c in ck)))
        out.append("")
    out.append("**Policy-free, held-out** (dflash_train.py's evaluation: %d blocks at every 5th position of the "
               "generated part of %d held-out windows; a block's drafts are accepted while they equal the "
               "target's greedy tokens): mean accepted length **%.2f** drafts per block (%.2f tokens per "
               "verification step); acceptance per block row after an accepted prefix: %s; accepted-length "
               "distribution (0..%d): %s." % (
                   ev["blocks"], w["heldout"], ev["mean_accepted"], ev["tokens_per_step"],
                   rates(ev["row_accept_rate"]), s["block"] - 1, ev["accepted_hist"]))
    out.append("")
    ap = os.path.join(d, "accept.json")
    if os.path.exists(ap):
        a = json.load(open(ap))
        out.append("**muser `--spec dflash`, held-out** (tools/train/dflash_accept.py, %d tokens per prompt, "
                   "the draft-length policy on):" % a["n"])
        out.append("")
        out.append("| prompt | mode | same ids as plain | drafted | accepted | steps | accepted/step |")
        out.append("|---|---|---|---|---|---|---|")
        for r in a["rows"]:
            out.append("| %s | %s | %s | %d | %d | %d | %.2f |" % (
                r["prompt"], r["mode"], "yes" if r["same"] else "**no**", r["draft_n"], r["draft_n_accepted"],
                r["spec_steps"], r["draft_n_accepted"] / max(r["spec_steps"], 1)))
        out.append("")
        for mode, t in a["totals"].items():
            out.append("- %s: %d of %d prompts identical to plain decoding; drafted %d, accepted %d (%.1f %%) "
                       "in %d verification steps: **%.2f accepted drafts per step**; per draft position "
                       "(acceptance after an accepted prefix, and how often it was checked): %s." % (
                           mode, t["identical"], t["prompts"], t["draft_n"], t["draft_n_accepted"],
                           100 * t["accept_rate"], t["spec_steps"], t["mean_accepted_per_step"],
                           rates(t["pos_accept_rate"], t["draft_pos_n"])))
        out.append("")
    ev_hist = {}
    for x in open(os.path.join(d, "log.jsonl")):
        if '"eval"' in x:
            e = json.loads(x)
            ev_hist[e["step"]] = e  # the last evaluation of a step
    ev_hist = [ev_hist[k] for k in sorted(ev_hist)]
    if ev_hist:
        out.append("Held-out mean accepted length during training (step: value): %s." % ", ".join(
            "%d: %.2f" % (e["step"], e["eval"]["mean_accepted"]) for e in ev_hist))
        out.append("")
    out.append("Logs: tools/train/logs/dflash/ (train.log, log.jsonl, summary.json, accept.json, accept.md, env.txt).")
    out.append("")
    out.append(END)
    return "\n".join(out)


def main():
    d, doc = sys.argv[1], sys.argv[2]
    text = open(doc).read()
    b = block(d)
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + b + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + b + "\n"
    open(doc, "w").write(text)
    print(b)


if __name__ == "__main__":
    main()
