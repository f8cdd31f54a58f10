#!/usr/bin/env python3
"""compare-embd.py MUSER MODEL POOLING REF.json: starts `muser serve` on
MODEL with --pooling POOLING, asks /embedding for each reference prompt
(token ids, embd_normalize -1: raw, as llama.cpp's context returns them) and
checks the cosine similarity with llama.cpp's vector: at least 1 - 1e-4
(TOL). Prints one line per prompt; exit status 1 on any failure."""
import json
import math
import re
import subprocess
import sys
import urllib.request

TOL = 1e-4


def main():
    muser, model, pooling, ref_path = sys.argv[1:5]
    ref = json.load(open(ref_path))
    longest = max(len(e["ids"]) for e in ref["embeddings"])
    srv = subprocess.Popen([muser, "serve", "-m", model, "--port", "0", "--threads", "2", "--pooling", pooling,
                            "--ctx", str(max(1024, longest + 16))], stderr=subprocess.PIPE, text=True)
    port = None
    for line in srv.stderr:
        m = re.search(r"on http://[^ ]*:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        print("FAIL muser serve did not start")
        return 1
    rc = 0
    try:
        for e in ref["embeddings"]:
            body = json.dumps({"content": e["ids"], "embd_normalize": -1}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/embedding", body,
                                         {"Content-Type": "application/json"})
            got = json.load(urllib.request.urlopen(req))[0]["embedding"][0]
            want = e["vector"]
            dot = sum(a * b for a, b in zip(got, want))
            na = math.sqrt(sum(a * a for a in got))
            nb = math.sqrt(sum(b * b for b in want))
            cos = dot / (na * nb) if na > 0 and nb > 0 else 0.0
            md = max(abs(a - b) for a, b in zip(got, want))
            good = len(got) == len(want) and cos >= 1 - TOL
            print(f"{'ok  ' if good else 'FAIL'} {e['name']} ({len(e['ids'])} tokens): cosine {cos:.9f}, "
                  f"max |diff| {md:.3g}, norm {na:.6g} vs {nb:.6g}")
            rc |= not good
    finally:
        srv.terminate()
        srv.wait()
    return rc


if __name__ == "__main__":
    sys.exit(main())
