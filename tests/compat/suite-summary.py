#!/usr/bin/env python3
"""suite-summary.py OUT [--reasons TSV] [--markdown]: reads the JUnit files
llamacpp-suite.sh left in OUT and prints, per test file, passed / failed /
skipped, then every failed test with the first line of its failure (or,
with --reasons, the kind and reason the TSV gives for it: its first
pattern that matches FILE::TEST), then the closing count. --markdown prints
the same as the tables of docs/llamacpp-server-suite.md. A failed test no
pattern matches is listed as "unclassified"."""
import fnmatch
import glob
import os
import sys
import xml.etree.ElementTree as ET


def load_reasons(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            pat, kind, why = line.rstrip("\n").split("\t")
            out.append((pat, kind, why))
    return out


def main():
    args = sys.argv[1:]
    md = "--markdown" in args
    reasons = None
    if "--reasons" in args:
        reasons = load_reasons(args[args.index("--reasons") + 1])
    out = args[0]
    tot = {"passed": 0, "failed": 0, "skipped": 0}
    rows, fails = [], []
    for path in sorted(glob.glob(os.path.join(out, "*.xml"))):
        fname = os.path.basename(path)[:-4]
        n = {"passed": 0, "failed": 0, "skipped": 0}
        for case in ET.parse(path).getroot().iter("testcase"):
            kids = {c.tag: c for c in case}
            name = "%s::%s" % (fname, case.get("name"))
            if "failure" in kids or "error" in kids:
                n["failed"] += 1
                el = kids.get("failure", kids.get("error"))
                msg = (el.get("message") or el.text or "").strip().splitlines()
                first = (msg[0] if msg else "")[:160]
                kind, why = "unclassified", first
                for pat, k, w in reasons or []:
                    if fnmatch.fnmatchcase(name, pat):
                        kind, why = k, w
                        break
                fails.append((name, kind, why if reasons else first))
            elif "skipped" in kids:
                n["skipped"] += 1
            else:
                n["passed"] += 1
        for k in tot:
            tot[k] += n[k]
        rows.append((fname, n))
    if md:
        print("| file | passed | failed | skipped |")
        print("|---|---|---|---|")
        for fname, n in rows:
            print("| `%s` | %d | %d | %d |" % (fname, n["passed"], n["failed"], n["skipped"]))
        print("| all | %d | %d | %d |" % (tot["passed"], tot["failed"], tot["skipped"]))
        print()
        print("| failing test | kind | why |")
        print("|---|---|---|")
        for name, kind, why in fails:
            print("| `%s` | %s | %s |" % (name.replace("|", "\\|"), kind, why.replace("|", "\\|")))
        print()
    else:
        for fname, n in rows:
            print("%-28s %4d passed %4d failed %4d skipped" % (fname, n["passed"], n["failed"], n["skipped"]))
        print()
        for name, kind, why in fails:
            print("FAILED %s: %s%s" % (name, kind + ": " if reasons else "", why))
        print()
        kinds = {}
        for _, kind, _ in fails:
            kinds[kind] = kinds.get(kind, 0) + 1
        if reasons:
            print("failed by kind: " + ", ".join("%s %d" % kv for kv in sorted(kinds.items())))
    print("%d passed, %d failed, %d skipped" % (tot["passed"], tot["failed"], tot["skipped"]))


if __name__ == "__main__":
    main()
