#!/usr/bin/env python3
"""Held-out acceptance of a DFlash drafter, measured by muser itself.

For every prompt, `muser run` greedy without speculation and with `--spec
dflash --draft D.gguf` (and, with --sampled, both again at --temp 0.8
--seed 7): the token ids must be the same (docs/speculative.md: speculation
never changes the answer; a difference is reported and makes the exit
status 1); from the `{"timings": ...}` line of the dflash run: drafted and
accepted tokens, verification steps, and per draft position how often it
was checked and accepted (draft_pos_n / draft_pos_accepted). muser's
draft-length policy decides how much is drafted (it drafts longer as drafts
prove right), so these are what a user gets, not the drafter's ceiling
(dflash_train.py's policy-free evaluation gives that).

Prompts: the ids of --prompts (a JSON list of id lists, BOS first, as
dflash_train.py writes heldout-prompts.json), up to --max-prompts, and the
built-in text prompts below (man-page questions and Python code
continuations, the issue's held-out kinds) unless --no-text.

Output: --out JSON (per prompt and totals) and a Markdown table on stdout
(and in --md).

usage: dflash_accept.py --draft D.gguf [--model T.gguf] [--muser ./muser] [--prompts P.json]
       [--max-prompts 12] [-n 128] [--jobs 8] [--sampled] [--out accept.json] [--md accept.md]
"""
import argparse, json, os, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = {
    "man-question": "What does the -h option of ls do?\n\nls -h, --human-readable\n",
    "man-grep": "GREP(1)\n\nNAME\n       grep - print lines that match patterns\n\nSYNOPSIS\n",
    "py-def": "import os\nimport sys\n\n\ndef list_files(path):\n    \"\"\"Return the names of the files in path.\"\"\"\n",
    "py-class": "class Stack:\n    \"\"\"A last-in, first-out stack.\"\"\"\n\n    def __init__(self):\n        self.items = []\n\n"
                "    def push(self, item):\n",
}


def run(muser, args):
    t = time.time()
    r = subprocess.run([muser, "run"] + args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("muser run %s: %s" % (" ".join(args[:4]), r.stderr.strip()[-400:]))
    ids, tim = [], None
    for line in r.stdout.splitlines():
        if line.startswith('{"id"'):
            ids.append(json.loads(line)["id"])
        elif line.startswith('{"timings"'):
            tim = json.loads(line)["timings"]
    return ids, tim, time.time() - t


def one(a, name, src):
    base = ["-m", a.model, "-n", str(a.n), "--ignore-eos", "--json", "--threads", str(a.threads)] + src
    rows = []
    modes = [("greedy", ["--temp", "0"])] + ([("sampled", ["--temp", "0.8", "--seed", "7"])] if a.sampled else [])
    for mode, samp in modes:
        plain, pt, pw = run(a.muser, base + samp + ["--spec", "none"])
        spec, st, sw = run(a.muser, base + samp + ["--spec", "dflash", "--draft", a.draft] +
                           (["--draft-max", str(a.draft_max)] if a.draft_max else []))
        rows.append(dict(prompt=name, mode=mode, same=plain == spec, n=len(spec), plain_tok_s=round(
            pt["predicted_n"] / max(pt["predicted_ms"], 1e-9) * 1e3, 1) if pt else None,
            dflash_tok_s=round(st["predicted_n"] / max(st["predicted_ms"], 1e-9) * 1e3, 1),
            wall_plain=round(pw, 2), wall_dflash=round(sw, 2), draft_n=st["draft_n"],
            draft_n_accepted=st["draft_n_accepted"], spec_steps=st["spec_steps"],
            draft_pos_n=st.get("draft_pos_n", []), draft_pos_accepted=st.get("draft_pos_accepted", [])))
    return rows


def main():
    ap = argparse.ArgumentParser(description="held-out acceptance of a DFlash drafter with muser")
    ap.add_argument("--draft", required=True)
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "muser-default.gguf"))
    ap.add_argument("--muser", default=os.path.join(HERE, "..", "..", "muser"))
    ap.add_argument("--prompts")
    ap.add_argument("--max-prompts", type=int, default=12)
    ap.add_argument("--no-text", action="store_true")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--draft-max", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--sampled", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--md")
    a = ap.parse_args()
    work = []
    if a.prompts:
        for i, ids in enumerate(json.load(open(a.prompts))[:a.max_prompts]):
            work.append(("heldout-%d" % i, ["--prompt-ids", ",".join(map(str, ids))]))
    if not a.no_text:
        for k, v in TEXTS.items():
            work.append((k, ["-p", v]))
    with ThreadPoolExecutor(a.jobs) as ex:
        rows = [r for rs in ex.map(lambda w: one(a, *w), work) for r in rs]
    tot = {}
    for mode in sorted({r["mode"] for r in rows}):
        rs = [r for r in rows if r["mode"] == mode]
        npos = max(len(r["draft_pos_n"]) for r in rs)
        pn = [sum(r["draft_pos_n"][k] for r in rs if k < len(r["draft_pos_n"])) for k in range(npos)]
        pa = [sum(r["draft_pos_accepted"][k] for r in rs if k < len(r["draft_pos_accepted"])) for k in range(npos)]
        dn, da, ss = (sum(r[k] for r in rs) for k in ("draft_n", "draft_n_accepted", "spec_steps"))
        gen = sum(r["n"] for r in rs)
        tot[mode] = dict(prompts=len(rs), identical=sum(r["same"] for r in rs), tokens=gen, draft_n=dn,
                         draft_n_accepted=da, spec_steps=ss, accept_rate=round(da / max(dn, 1), 4),
                         mean_accepted_per_step=round(da / max(ss, 1), 4),
                         pos_accept_rate=[round(x / max(y, 1), 4) for x, y in zip(pa, pn)], draft_pos_n=pn,
                         draft_pos_accepted=pa)
    res = dict(draft=os.path.basename(a.draft), model=os.path.basename(a.model), n=a.n, rows=rows, totals=tot)
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)
    md = ["| prompt | mode | same ids | drafted | accepted | steps | accepted/step | plain tok/s | dflash tok/s |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append("| %s | %s | %s | %d | %d | %d | %.2f | %s | %s |" % (
            r["prompt"], r["mode"], "yes" if r["same"] else "**NO**", r["draft_n"], r["draft_n_accepted"],
            r["spec_steps"], r["draft_n_accepted"] / max(r["spec_steps"], 1), r["plain_tok_s"], r["dflash_tok_s"]))
    for mode, t in tot.items():
        md.append("")
        md.append("%s, all prompts: %d/%d identical to plain decoding; drafted %d, accepted %d (%.1f %%) in %d "
                  "verification steps: %.2f accepted drafts per step; acceptance per draft position (after an "
                  "accepted prefix): %s" % (mode, t["identical"], t["prompts"], t["draft_n"], t["draft_n_accepted"],
                                            100 * t["accept_rate"], t["spec_steps"], t["mean_accepted_per_step"],
                                            ", ".join("%.2f (%d)" % (x, n) for x, n in zip(t["pos_accept_rate"],
                                                                                           t["draft_pos_n"]))))
    text = "\n".join(md) + "\n"
    sys.stdout.write(text)
    if a.md:
        open(a.md, "w").write(text)
    sys.exit(0 if all(r["same"] for r in rows) else 1)


if __name__ == "__main__":
    main()
