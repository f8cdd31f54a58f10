#!/usr/bin/env python3
"""Compares muser's greedy generation across context shifts with llama.cpp's
(ref-shift/<model>.json, made by make-shift.sh): `muser run --context-shift
--ctx C --keep K --discard D` from the case's prompt, under the rule of
compare.py (ids step by step, near-ties in the reference excepted; top-8
probabilities within 2e-3), and, on the CPU engine, every printed
probability equal to the reference's (7 digits): the rule alone passes a
shifted cache whose cells are in another order (differences near 1e-4), and
the CPU engine's logits are llama.cpp's bit for bit.
A case with "cont" also runs on `muser serve --context-shift --cache-prompt`:
the case's generation as one /completion request (its tokens must be the
reference's), then a second request whose prompt is what the slot then
holds (the reference's kv_ids) plus the last token and the new ones, which
the server evaluates in one forward into the shifted cache; its tokens and
their 8 most probable alternatives (n_probs) must be the reference's, the
probabilities within 1e-5: the server answers log-probabilities from a
log-softmax in double, llama.cpp's probabilities are a float softmax, so
they part by up to ~3e-6 with bit-identical logits, while cells in another
order than llama.cpp's move them by ~1e-4. The server's ignore_eos bans
the end-of-generation tokens that the reference generates through, so a
case whose reference has one is skipped there.
usage: shift-check.py MUSER_BIN MODEL.gguf REF.json [--kern K]
"""
import json, math, os, re, subprocess, sys, urllib.request

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


def serve(bin_, model, ctx, kern):
    cmd = [bin_, "serve", "-m", model, "--port", "0", "--ctx", str(ctx), "--context-shift", "--cache-prompt",
           "--no-ui", "--backend", os.environ.get("MUSER_BACKEND", "cpu")]
    if kern:
        cmd += ["--kern", kern]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r" on http://[^ ]*:(\d+) ", line)
        if m:
            return p, int(m.group(1))
    raise SystemExit(f"muser serve did not start: {' '.join(cmd)}")


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))


def eog_ids(bin_, model):
    info = subprocess.run([bin_, "info", "-m", model], capture_output=True, text=True).stdout
    m = re.search(r"^tokens\s+bos (-?\d+) eos (-?\d+) eot (-?\d+) eom (-?\d+)", info, re.M)
    return {int(x) for x in m.groups()[1:] if int(x) >= 0} if m else set()


def check_cont(bin_, model, c, kern):
    """The case and its continuation through the server; returns (ok, message)."""
    eog = eog_ids(bin_, model)
    if not eog or eog & set(c["ids"] + c["cont"]["ids"]):
        return True, f"{c['name']} (server): skipped: the reference generates an end-of-generation token"
    p, port = serve(bin_, model, c["ctx"], kern)
    try:
        base = {"temperature": 0, "ignore_eos": True, "return_tokens": True, "cache_prompt": True,
                "n_keep": c["keep"], "n_discard": c["discard"]}
        a = post(port, dict(base, prompt=c["prompt_ids"], n_predict=len(c["ids"])))
        if a["tokens"] != c["ids"]:
            return False, f"{c['name']} (server): the first request's tokens differ from the reference"
        k = c["cont"]
        b = post(port, dict(base, prompt=k["kv_ids"] + k["new_ids"], n_predict=len(k["ids"]), n_probs=8))
        if b["timings"]["cache_n"] != len(k["kv_ids"]):
            return False, f"{c['name']} (server): reused {b['timings']['cache_n']} tokens, want {len(k['kv_ids'])}"
        worst = 0.0
        for i, (r, o) in enumerate(zip(k["steps"], b["completion_probabilities"])):
            if o["id"] != r["id"]:
                return False, f"{c['name']} (server, continued): step {i}: muser chose {o['id']}, reference {r['id']}"
            ours = {t["id"]: math.exp(t["logprob"]) for t in o["top_logprobs"]}
            for rid, rp in r["top"]:
                worst = max(worst, abs(ours.get(rid, 0.0) - rp))
        if len(b["tokens"]) != len(k["ids"]) or worst > 1e-5:
            return False, f"{c['name']} (server, continued): {len(b['tokens'])} tokens, max |dp| {worst:.2e}"
        return True, (f"{c['name']} (server): {len(c['ids'])} tokens, then {len(k['new_ids'])} in one forward on the "
                      f"shifted cache and {len(k['ids'])} more identical (max |dp| {worst:.2e})")
    finally:
        p.terminate()
        p.wait()


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
        if "cont" in c and ok:
            ok, msg = check_cont(bin_, model, c, kern)
            print(("ok   " if ok else "FAIL ") + msg)
            ok_all &= ok
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
