#!/usr/bin/env python3
"""corrupt_models.py: seeded mutations of small GGUFs run through `muser run`.

Usage: corrupt_models.py MUSER WORKDIR N SEED MODEL.gguf...

Each trial takes one of the models, applies one mutation class (bit flips,
an inserted range, a zeroed range, an overwritten 64-bit field, truncation,
non-finite values written into the tensor data), runs
`MUSER run -m MUTANT -p ... -n 4` with a hang detector of HANG_S seconds, and
classifies the outcome. Every outcome must be exit 0 with output on stdout,
or exit 1 with exactly one stderr line that is valid UTF-8 (stdout may hold
the tokens generated before a non-finite logit ended the run); a sanitizer
report, a signal, another exit code, or a hang fails. Prints a summary line
and, for each failure, the trial, its mutation and the first stderr lines
(the mutant is kept in WORKDIR/failed-*.gguf). Exit status 1 on any failure.
The verdict never depends on timing: the timeout only detects hangs.
"""
import os
import random
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HANG_S = int(os.environ.get("CORRUPT_HANG_S", "120"))
JOBS = int(os.environ.get("CORRUPT_JOBS", str(os.cpu_count() or 2)))
SAN = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer", "ERROR: ")

INTERESTING64 = [0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff,
                 1 << 32, 1 << 40, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 64) - 2]


def data_start(b):
    """Offset of the tensor data (approximate: after the last tensor name); used
    only to aim some mutations at weights. Falls back to a third of the file."""
    return len(b) // 3 if len(b) < 4096 else max(4096, len(b) // 20)


def mutate(rng, b):
    b = bytearray(b)
    n = len(b)
    kind = rng.choice(["bitflip", "insert", "zero", "field64", "truncate", "nonfinite", "header"])
    if kind == "bitflip":
        k = rng.choice([1, 1, 2, 4, 8, 32])
        for _ in range(k):
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        what = f"bitflip x{k}"
    elif kind == "insert":
        i = rng.randrange(n)
        ln = rng.choice([1, 2, 3, 4, 7, 8, 16, 64, 1000])
        b[i:i] = bytes(rng.randrange(256) for _ in range(ln))
        what = f"insert {ln} at {i}"
    elif kind == "zero":
        i = rng.randrange(n)
        ln = rng.choice([1, 2, 4, 8, 64, 4096, 65536])
        b[i:i + ln] = bytes(min(ln, n - i))
        what = f"zero {ln} at {i}"
    elif kind == "field64":
        i = rng.randrange(0, min(n, 8192) - 8)  # the header, keys and tensor infos
        v = rng.choice(INTERESTING64 + [rng.getrandbits(64)])
        b[i:i + 8] = struct.pack("<Q", v)
        what = f"field64 {v:#x} at {i}"
    elif kind == "truncate":
        ln = rng.randrange(n)
        b = b[:ln]
        what = f"truncate to {ln}"
    elif kind == "nonfinite":  # f16 or f32 inf/nan patterns in the weights (scales, norms)
        k = rng.choice([1, 4, 64])
        ds = data_start(b)
        for _ in range(k):
            i = rng.randrange(ds, n - 4) & ~1
            pat = rng.choice([b"\x00\x7c", b"\x00\xfc", b"\x01\x7e", b"\xff\xff", b"\x00\x00\x80\x7f",
                              b"\x00\x00\xc0\x7f", b"\xff\xff\x7f\x7f"])
            b[i:i + len(pat)] = pat
        what = f"nonfinite x{k}"
    else:  # header: a few random bytes in the first 4 KiB (keys, lengths, names)
        k = rng.choice([1, 2, 8])
        for _ in range(k):
            b[rng.randrange(min(n, 4096))] = rng.randrange(256)
        what = f"header bytes x{k}"
    return bytes(b), what


def valid_utf8_line(err):
    try:
        s = err.decode("utf-8")
    except UnicodeDecodeError:
        return False
    lines = s.split("\n")
    return len(lines) == 2 and lines[1] == "" and all(c >= " " and c != "\x7f" for c in lines[0])


def trial(args):
    muser, work, t, seed, models = args
    rng = random.Random(seed * 1000003 + t)
    src = models[t % len(models)]
    with open(src, "rb") as f:
        mutant, what = mutate(rng, f.read())
    path = os.path.join(work, f"t{t}.gguf")
    with open(path, "wb") as f:
        f.write(mutant)
    env = dict(os.environ)
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
    cmd = [muser, "run", "-m", path, "-p", "Hello there, how are you?", "-n", "4", "--threads", "1"]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=HANG_S, env=env)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = "hang", b"", b""
    res = None
    if rc == "hang":
        res = "hang"
    elif any(s.encode() in err for s in SAN):
        res = "sanitizer"
    elif rc == 0 and out:
        res = "ok"
    elif rc == 1 and valid_utf8_line(err):  # stdout may hold tokens printed before the error
        res = "error"
    else:
        res = "bad-outcome"
    if res in ("ok", "error"):
        os.unlink(path)
    else:
        os.replace(path, os.path.join(work, f"failed-{t}.gguf"))
    return t, src, what, rc, res, err[:600]


def main():
    muser, work, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    models = sys.argv[5:]
    os.makedirs(work, exist_ok=True)
    counts = {}
    failures = []
    with ThreadPoolExecutor(max_workers=JOBS) as ex:
        for t, src, what, rc, res, err in ex.map(trial, [(muser, work, t, seed, models) for t in range(n)]):
            counts[res] = counts.get(res, 0) + 1
            if res not in ("ok", "error"):
                failures.append((t, os.path.basename(src), what, rc, res, err))
    print(f"corrupt models: {n} trials (seed {seed}): " +
          ", ".join(f"{k} {counts.get(k, 0)}" for k in ("ok", "error", "sanitizer", "hang", "bad-outcome")))
    for t, src, what, rc, res, err in failures[:20]:
        print(f"FAIL trial {t} ({src}, {what}): {res}, exit {rc}: " + err.decode("utf-8", "replace")[:400])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
