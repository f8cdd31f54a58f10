#!/usr/bin/env python3
"""suite-summary.py OUT: reads the JUnit files llamacpp-suite.sh left in OUT
and prints, per test file, passed / failed / skipped, then every failed test
with the first line of its failure, then the closing count."""
import glob
import os
import sys
import xml.etree.ElementTree as ET


def main():
    out = sys.argv[1]
    tot = {"passed": 0, "failed": 0, "skipped": 0}
    fails = []
    for path in sorted(glob.glob(os.path.join(out, "*.xml"))):
        n = {"passed": 0, "failed": 0, "skipped": 0}
        for case in ET.parse(path).getroot().iter("testcase"):
            kids = {c.tag: c for c in case}
            if "failure" in kids or "error" in kids:
                n["failed"] += 1
                el = kids.get("failure", kids.get("error"))
                msg = (el.get("message") or el.text or "").strip().splitlines()
                fails.append("%s::%s: %s" % (os.path.basename(path)[:-4], case.get("name"),
                                             (msg[0] if msg else "")[:160]))
            elif "skipped" in kids:
                n["skipped"] += 1
            else:
                n["passed"] += 1
        for k in tot:
            tot[k] += n[k]
        print("%-28s %4d passed %4d failed %4d skipped" % (os.path.basename(path)[:-4], n["passed"], n["failed"],
                                                           n["skipped"]))
    print()
    for f in fails:
        print("FAILED " + f)
    print()
    print("%d passed, %d failed, %d skipped" % (tot["passed"], tot["failed"], tot["skipped"]))


if __name__ == "__main__":
    main()
