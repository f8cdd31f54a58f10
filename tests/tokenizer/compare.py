#!/usr/bin/env python3
"""compare.py: tokenizes every case of a golden file with `muser tokenize`
(special parsing off and on) and compares the ids with llama.cpp's.

usage: compare.py MUSER MODEL.gguf GOLDEN.json
  GOLDEN.json: {"cases": [{"text", "ids", "ids_special"}]} (make-golden.mjs),
  or a shared fixture *.ref.json ({"tokenize": [...]}).
Prints "match N/M" per mode; exit 1 on any mismatch (first few shown)."""
import json
import os
import subprocess
import sys
import tempfile

muser, model, golden = sys.argv[1:4]
with open(golden, encoding="utf-8") as f:
    g = json.load(f)
cases = g.get("cases", g.get("tokenize"))
if not isinstance(cases, list):
    sys.exit("compare.py: %s: no cases" % golden)
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
    json.dump([c["text"] for c in cases], f)
    texts = f.name
bad = 0
try:
    for flag, key in (([], "ids"), (["--special"], "ids_special")):
        r = subprocess.run([muser, "tokenize", "-m", model, "--json-in", texts] + flag, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("compare.py: muser tokenize failed: " + r.stderr.strip())
        lines = r.stdout.splitlines()
        if len(lines) != len(cases):
            sys.exit("compare.py: %d output lines for %d cases" % (len(lines), len(cases)))
        ok = 0
        for c, line in zip(cases, lines):
            got = json.loads(line)
            if got == c[key]:
                ok += 1
                continue
            bad += 1
            if bad <= 5:
                print("MISMATCH (%s) text=%r\n  muser:    %s\n  llama.cpp: %s" % (key, c["text"][:120], got[:40], c[key][:40]))
        print("%s %s: match %d/%d" % (os.path.basename(golden), key, ok, len(cases)))
finally:
    os.unlink(texts)
sys.exit(1 if bad else 0)
