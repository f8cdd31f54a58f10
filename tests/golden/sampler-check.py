#!/usr/bin/env python3
"""Compares muser's tokens with llama.cpp's under the sampler chain's stages
(ref-sampler/<model>.json, made by llamacpp-sampler.mjs from
sampler-cases.json): for each case, `muser run` with the case's options as
CLI flags (--ignore-eos: llama.cpp's evaluation does not stop at EOS either).

Rule:
  - greedy cases (temp 0): the tie-aware rule of compare.py on the
    reference's probabilities after the history stages (logit bias,
    penalties, DRY), which is what greedy picks from: ids identical step by
    step; a mismatch is accepted only as a near-tie there (log(p_ref(ref) /
    p_ref(ours)) < 0.02, our id in the reference top list), and the case
    stops at it.
  - sampled cases (temp > 0, seeded): muser draws with llama.cpp's generator
    and chain, so equal logits give equal tokens; logits equal to rounding
    may still move a draw that lands within rounding of a boundary, which no
    rule can tell from a real difference: the first SAMPLED_MIN steps must
    be identical, and a later mismatch stops the case with a note.
usage: sampler-check.py MUSER_BIN MODEL.gguf REF.json [--only NAME]
"""
import json, math, subprocess, sys

TIE_LOG = 0.02
SAMPLED_MIN = 16

FLAGS = {
    "temp": "--temp", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p", "seed": "--seed",
    "repeat_penalty": "--repeat-penalty", "repeat_last_n": "--repeat-last-n",
    "frequency_penalty": "--frequency-penalty", "presence_penalty": "--presence-penalty",
    "dry_multiplier": "--dry-multiplier", "dry_base": "--dry-base",
    "dry_allowed_length": "--dry-allowed-length", "dry_penalty_last_n": "--dry-penalty-last-n",
    "xtc_probability": "--xtc-probability", "xtc_threshold": "--xtc-threshold",
}


def muser_args(opts):
    # node-llama-cpp's defaults where a case leaves them out
    o = {"top_k": 40, "top_p": 0.95, "min_p": 0.05, **opts}
    args = []
    for k, v in o.items():
        if k == "dry_sequence_breakers":
            for b in v or ["none"]:
                args += ["--dry-sequence-breaker", b]
        elif k == "logit_bias":
            for tid, b in v:
                args += ["--logit-bias", f"{tid}-inf" if b == "-inf" else f"{tid}{'+' if b >= 0 else '-'}{abs(b)}"]
        elif k in FLAGS:
            args += [FLAGS[k], str(v)]
        else:
            raise SystemExit(f"sampler-check: unknown option in the reference: {k}")
    if "repeat_last_n" not in o and any(k in o for k in ("repeat_penalty", "frequency_penalty", "presence_penalty")):
        args += ["--repeat-last-n", "64"]
    return args


def run_muser(bin_, model, prompt, n, opts):
    cmd = [bin_, "run", "-m", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n), "--json",
           "--ignore-eos", "--ctx", str(len(prompt) + n)] + muser_args(opts)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"muser failed ({out.returncode}): {out.stderr.strip()}")
    return [json.loads(l)["id"] for l in out.stdout.splitlines() if l.strip()]


def compare(c, ours):
    name, steps = c["name"], c["steps"]
    greedy = c["opts"].get("temp", 0) <= 0
    if len(ours) < len(steps):
        return False, f"{name}: muser produced {len(ours)} tokens, reference {len(steps)}"
    for k, (r, o) in enumerate(zip(steps, ours)):
        if o == r["id"]:
            continue
        if greedy:
            rprob = dict((i, p) for i, p in r["top"])
            if o in rprob and rprob[o] > 0 and math.log(rprob[r["id"]] / rprob[o]) < TIE_LOG:
                return True, f"{name}: near-tie at step {k} ({o} vs {r['id']}), stopped there"
            return False, f"{name}: step {k}: muser chose {o}, reference {r['id']}"
        if k < SAMPLED_MIN:
            return False, f"{name}: step {k} (of the first {SAMPLED_MIN}): muser drew {o}, reference {r['id']}"
        return True, f"{name}: draws part at step {k} ({o} vs {r['id']}), stopped there"
    return True, f"{name}: {len(steps)} tokens identical"


def main():
    bin_, model, refp = sys.argv[1:4]
    only = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--only" else None
    ref = json.load(open(refp))
    ok_all = True
    for c in ref["cases"]:
        if only and c["name"] != only:
            continue
        ours = run_muser(bin_, model, c["prompt_ids"], len(c["steps"]), c["opts"])
        ok, msg = compare(c, ours)
        print(("ok   " if ok else "FAIL ") + msg)
        ok_all &= ok
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
