#!/usr/bin/env python3
"""Compares two answer files of the golden format (transformers' from
tools/train/golden.py, llama.cpp's from tools/convert/llamacpp_probs.mjs)
with the project's rule (shared fixtures README): identical tokenization;
greedy ids equal step by step, a mismatch allowed only at a near-tie of the
reference (log(p_ref(ref)/p_ref(other)) < 0.02), comparison of that sequence
stopping there; at every compared step each reference top-k probability
matched within TOL absolute.
usage: compare.py REF.json OTHER.json [--tol 2e-3]   exit 0 when within the rule"""
import json, math, sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    tol = float(sys.argv[sys.argv.index("--tol") + 1]) if "--tol" in sys.argv else 2e-3
    if "--tol" in sys.argv:
        args.remove(sys.argv[sys.argv.index("--tol") + 1])
    ref, oth = (json.load(open(p)) for p in args[:2])
    ok = True
    otok = {t["text"]: t for t in oth.get("tokenize", [])}
    ntok_bad = 0
    for t in ref.get("tokenize", []):
        o = otok.get(t["text"])
        if o is None:
            continue
        # transformers' tokenizer always splits added special tokens out of the
        # text; llama.cpp does that for control tokens only with parse_special on.
        if o.get("ids_special", o["ids"]) != t["ids"]:
            ntok_bad += 1
            ok = False
            print("tokenize MISMATCH %r: ref %s other %s" % (t["text"], t["ids"], o["ids"]))
    print("tokenize: %d texts, %d mismatches" % (len(ref.get("tokenize", [])), ntok_bad))
    ogen = {g["name"]: g for g in oth.get("generate", [])}
    worst_all = 0.0
    for g in ref.get("generate", []):
        o = ogen.get(g["name"])
        if o is None:
            print("generate %s: missing in other" % g["name"])
            ok = False
            continue
        if o["prompt_ids"] != g["prompt_ids"]:
            print("generate %s: prompt ids differ" % g["name"])
            ok = False
            continue
        worst, compared, note = 0.0, 0, ""
        for k, (rs, os_) in enumerate(zip(g["steps"], o["steps"])):
            rp = dict((i, p) for i, p in rs["top"])
            op = dict((i, p) for i, p in os_["top"])
            floor = min(op.values())  # a token absent from the other list has p <= floor
            for i, p in rs["top"]:
                worst = max(worst, abs(p - op[i]) if i in op else max(0.0, p - floor))
            compared += 1
            if rs["id"] != os_["id"]:
                pr, po = rp.get(rs["id"]), rp.get(os_["id"])
                if pr and po and math.log(pr / po) < 0.02:
                    note = " (near-tie divergence at step %d, stopped)" % k
                else:
                    note = " (DIVERGED at step %d: ref %d other %d)" % (k, rs["id"], os_["id"])
                    ok = False
                break
        worst_all = max(worst_all, worst)
        bad = worst > tol
        ok = ok and not bad
        print("generate %-14s %2d steps compared, max |dp| over ref top-%d = %.2e%s%s" % (
            g["name"], compared, len(g["steps"][0]["top"]), worst, note, "  > tol" if bad else ""))
    print("overall max |dp| = %.2e (tol %.0e): %s" % (worst_all, tol, "PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
