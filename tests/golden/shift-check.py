#!/usr/bin/env python3
"""Compares muser's greedy generation across context shifts with llama.cpp's
(ref-shift/<model>.json, made by make-shift.sh): `muser run --context-shift
--ctx C --keep K --discard D` from the case's prompt, under the rule of
compare.py (ids step by step, near-ties in the reference excepted; top-8
probabilities within 2e-3), and, on the CPU engine, every printed
probability equal to the reference's (7 digits): the rule alone passes a
shifted cache whose cells are in another order (differences near 1e-4), and
the CPU engine's logits are llama.cpp's bit for bit.
usage: shift-check.py MUSER_BIN MODEL.gguf REF.json [--kern K]
"""
import json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import compare  # noqa: E402


def run_muser(bin_, model, c, kern):
    cmd = [bin_, "run", "-m", model, "--prompt-ids", ",".join(map(str, c["prompt_ids"])), "-n", str(len(c["steps"])),
           "--temp", "0", "--json", "--top", "40", "--ignore-eos", "--ctx", str(c["ctx"]), "--context-shift",
           "--keep", str(c["keep"]), "--discard", str(c["discard"]),
           "--backend", os.environ.get("MUSER_BACKEND", "cpu")]
    if kern:
        cmd += ["--kern", kern]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"muser failed ({out.returncode}): {out.stderr.strip()}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.strip() and '"id"' in l]


def main():
    bin_, model, refp = sys.argv[1:4]
    kern = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--kern" else None
    ref = json.load(open(refp))
    ok_all = True
    for c in ref["cases"]:
        ours = run_muser(bin_, model, c, kern)
        ok, msg, worst = compare(c["name"], c, ours)
        if ok and worst > 0 and os.environ.get("MUSER_BACKEND", "cpu") == "cpu":
            ok, msg = False, f"{c['name']}: probabilities differ from llama.cpp's (max {worst:.2e}): not bit for bit"
        shifts = ",".join(str(s["step"]) for s in c["shifts"])
        print(("ok   " if ok else "FAIL ") + msg +
              f" (ctx {c['ctx']}, prompt {len(c['prompt_ids'])}, shifts before steps {shifts}, max |dp| {worst:.2e})")
        ok_all &= ok
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
