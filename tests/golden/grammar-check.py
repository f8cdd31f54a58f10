#!/usr/bin/env python3
"""Compares muser's greedy tokens under a GBNF grammar with llama.cpp's
(ref-grammar/<model>.json, made by llamacpp-grammar.mjs from
grammar-cases.json: GBNF grammars, and JSON schemas as node-llama-cpp's
createGrammarForJsonSchema writes them in GBNF). For each case, `muser run
--temp 0 --grammar-file` with the case's grammar text and prompt ids.

Rule (the tie-aware rule of compare.py, on the reference's probabilities
after the grammar's mask, which is what greedy picks from): ids identical
step by step; a mismatch is accepted only as a near-tie there
(log(p_ref(ref) / p_ref(ours)) < 0.02, our id in the reference top list),
and the case stops at it. When llama.cpp ended with an end-of-generation
token (the grammar complete and the model choosing to stop, or nothing else
allowed), muser must end there too, with the same token.

Seeded cases ("opts" with temp > 0): muser draws with llama.cpp's generator
and chain and resamples as llama.cpp does when the grammar refuses the drawn
token (mask, whole chain again, a second draw), so equal logits give equal
tokens; as in sampler-check.py, the first SAMPLED_MIN steps (or all, when
the reference ends sooner) must be identical, and a later mismatch stops the
case with a note (logits equal to rounding may still move a draw that lands
within rounding of a boundary).
usage: grammar-check.py MUSER_BIN MODEL.gguf REF.json [--only NAME]
"""
import json, math, os, subprocess, sys, tempfile

TIE_LOG = 0.02
SAMPLED_MIN = 16
FLAGS = {"temp": "--temp", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p", "seed": "--seed"}


def muser_args(opts):
    if not opts:
        return ["--temp", "0"]
    o = {"top_k": 40, "top_p": 0.95, "min_p": 0.05, **opts}  # node-llama-cpp's defaults where left out
    args = []
    for k, v in o.items():
        if k not in FLAGS:
            raise SystemExit(f"grammar-check: unknown option in the reference: {k}")
        args += [FLAGS[k], str(v)]
    return args


def run_muser(bin_, model, prompt, n, gbnf, opts):
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", encoding="utf-8", delete=False) as f:
        f.write(gbnf)
        path = f.name
    try:
        cmd = [bin_, "run", "-m", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n), "--json",
               "--ctx", str(len(prompt) + n), "--grammar-file", path] + muser_args(opts)
        out = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        os.unlink(path)
    if out.returncode != 0:
        raise SystemExit(f"muser failed ({out.returncode}): {out.stderr.strip()}")
    return [json.loads(l)["id"] for l in out.stdout.splitlines() if l.strip()]


def compare(c, ours):
    name, steps = c["name"], c["steps"]
    for k, r in enumerate(steps):
        if k >= len(ours):
            return False, f"{name}: muser stopped after {len(ours)} tokens, reference has {len(steps)}"
        o = ours[k]
        if o == r["id"]:
            continue
        if c.get("opts"):
            if k < SAMPLED_MIN:
                return False, f"{name}: step {k} (of the first {SAMPLED_MIN}): muser drew {o}, reference {r['id']}"
            return True, f"{name}: draws part at step {k} ({o} vs {r['id']}), stopped there"
        rprob = dict((i, p) for i, p in r["top"])
        if o in rprob and rprob[o] > 0 and math.log(rprob[r["id"]] / rprob[o]) < TIE_LOG:
            return True, f"{name}: near-tie at step {k} ({o} vs {r['id']}), stopped there"
        return False, f"{name}: step {k}: muser chose {o}, reference {r['id']}"
    if c["eog"] and len(ours) != len(steps):
        return False, f"{name}: reference ends with end-of-generation after {len(steps)} tokens, muser went on"
    return True, f"{name}: {len(steps)} tokens identical" + (" (to end-of-generation)" if c["eog"] else "")


def main():
    bin_, model, refp = sys.argv[1:4]
    only = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--only" else None
    ref = json.load(open(refp, encoding="utf-8"))
    ok_all = True
    for c in ref["cases"]:
        if only and c["name"] != only:
            continue
        ours = run_muser(bin_, model, c["prompt_ids"], len(c["steps"]), c["gbnf"], c.get("opts"))
        ok, msg = compare(c, ours)
        print(("ok   " if ok else "FAIL ") + msg)
        ok_all &= ok
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
