#!/usr/bin/env python3
"""Compares muser's greedy generation with llama.cpp's answers (a *.ref.json
file: {"generate": [{name, prompt_ids, ids, steps: [{id, top: [[id, p], ...]}]}]}).

Rule (the team's, from the shared fixtures README):
  1. greedy ids must match step by step; a mismatch at step k is accepted only
     if it is a near-tie in the reference: log(p_ref(ref_id) / p_ref(our_id))
     < 0.02 with our id in the reference top list; that sequence stops there.
  2. at every compared step, each reference top-8 probability is matched
     within 2e-3 absolute (our probability of the same id).
usage: compare.py MUSER_BIN MODEL.gguf REF.json [--kern K] [--only NAME]
"""
import json, math, os, subprocess, sys

TIE_LOG = 0.02
PROB_TOL = 2e-3


def run_muser(bin_, model, prompt, n, kern, extra_env=None):
    cmd = [bin_, "run", "-m", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n),
           "--temp", "0", "--json", "--top", "40", "--ignore-eos", "--ctx", str(len(prompt) + n)]
    if kern:
        cmd += ["--kern", kern]
    # the model tier checks the CPU engine; the gpu tier sets MUSER_BACKEND=cuda
    cmd += ["--backend", os.environ.get("MUSER_BACKEND", "cpu")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"muser failed ({out.returncode}): {out.stderr.strip()}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.strip()]


def compare(name, ref, ours):
    worst = 0.0
    steps = ref["steps"]
    if len(ours) < len(steps):
        return False, f"{name}: muser produced {len(ours)} steps, reference {len(steps)}", worst
    for k, (r, o) in enumerate(zip(steps, ours)):
        oprob = dict((i, p) for i, p in o["top"])
        for rid, rp in r["top"]:
            op = oprob.get(rid, 0.0)
            d = abs(op - rp)
            worst = max(worst, d)
            if d > PROB_TOL:
                return False, f"{name}: step {k}: p({rid}) = {op:.6f}, reference {rp:.6f} (diff {d:.2e})", worst
        if o["id"] != r["id"]:
            rprob = dict((i, p) for i, p in r["top"])
            if o["id"] in rprob and math.log(rprob[r["id"]] / rprob[o["id"]]) < TIE_LOG:
                return True, f"{name}: near-tie at step {k} ({o['id']} vs {r['id']}), stopped there", worst
            return False, f"{name}: step {k}: muser chose {o['id']}, reference {r['id']}", worst
    return True, f"{name}: {len(steps)} steps identical", worst


def main():
    bin_, model, refp = sys.argv[1:4]
    kern = None
    only = None
    args = sys.argv[4:]
    while args:
        a = args.pop(0)
        if a == "--kern":
            kern = args.pop(0)
        elif a == "--only":
            only = args.pop(0)
    ref = json.load(open(refp))
    ok_all = True
    for g in ref["generate"]:
        if only and g["name"] != only:
            continue
        ours = run_muser(bin_, model, g["prompt_ids"], len(g["steps"]), kern)
        ok, msg, worst = compare(g["name"], g, ours)
        print(("ok   " if ok else "FAIL ") + msg + f" (prompt {len(g['prompt_ids'])} tokens, max |dp| {worst:.2e})")
        ok_all &= ok
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
