#!/usr/bin/env python3
"""dflash_shortlist.py: the shortlist of a DFlash drafter's head, stored in
its GGUF (docs/speculative.md "The shortlist head").

The shortlist is the K token ids most frequent in text of the target's
training corpus sources (make_corpus.py's Debian packages): every module of
the Python 3.11 standard library and the manual pages of a fixed list of
commands (rendered with man-db at width 80, LANG=C, overstrikes removed),
tokenized with the target's tokenizer (`muser tokenize`). The model was
trained to reproduce that text, so these are the tokens it generates most:
on the greedy outputs of bench/spec-prompts-dflash.json (none of which is
in this text), 2048 of them cover 95.6 % of the tokens, against 89.6 % for
the first 2048 ids and 83.9 % for the 2048 ids most frequent in 16k tokens
of the model's own greedy continuations of 126 such prompts (those hold only
1251 distinct ids). Ties rank the lower id first; when fewer than K ids
occur, the rest are the lowest ids not taken. Stored sorted, as the int32
array `muser.dflash.shortlist` (muser's key: llama.cpp's loader looks keys
up by name and reads no other), with `muser.dflash.shortlist_source`
saying how it was made.

Usage: tools/train/dflash_shortlist.py --draft D.gguf --model M.gguf
       [--muser ./muser] [--k 2048] [--out D2.gguf (default: D.gguf in place)]
       [--counts FILE.json (writes the counts)]
   or: tools/train/dflash_shortlist.py --draft D.gguf --from OLD.gguf [--out D2.gguf]
       (OLD's shortlist and source line, as they are: a retrained drafter
       keeps the list its predecessor shipped with, whatever man pages this
       machine has)
Deterministic for a given model and Debian package set.
"""
import argparse, glob, json, os, re, struct, subprocess, sys, tempfile

MAN_PAGES = ["ls", "cp", "mv", "rm", "find", "grep", "sed", "tar", "gzip", "bash", "ps", "kill", "ssh", "make",
             "less", "diff", "xz", "sqlite3", "openssl", "ip", "git", "chmod", "chown", "mkdir", "cat", "head",
             "tail", "sort", "uniq", "wc", "cut", "tr", "du", "df", "mount", "date", "env", "printf", "test", "xargs"]


def texts():
    out = []
    for p in sorted(glob.glob("/usr/lib/python3.11/*.py")):
        with open(p, encoding="utf-8", errors="replace") as f:
            out.append(f.read())
    env = dict(os.environ, MANWIDTH="80", LANG="C", LC_ALL="C")
    for m in MAN_PAGES:
        r = subprocess.run(["man", "-P", "cat", m], capture_output=True, text=True, env=env)
        if r.returncode == 0 and r.stdout.strip():
            out.append(re.sub(".\x08", "", r.stdout))  # overstrikes (bold)
    return [t for t in out if t.strip()]


def count(muser, model, ts):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(ts, f)
        f.flush()
        r = subprocess.run([muser, "tokenize", "-m", model, "--json-in", f.name], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"muser tokenize failed: {r.stderr.strip()}")
    counts = {}
    for line in r.stdout.splitlines():
        for t in json.loads(line):
            counts[t] = counts.get(t, 0) + 1
    return counts


# ---- GGUF: add (or replace) two keys, tensors and data unchanged ----------
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(b, o, t):
    if t in SCALAR:
        return o + SCALAR[t]
    if t == 8:
        n, = struct.unpack_from("<Q", b, o)
        return o + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        if et in SCALAR:
            return o + n * SCALAR[et]
        for _ in range(n):
            o = skip_value(b, o, et)
        return o
    raise SystemExit(f"gguf: unknown value type {t}")


def gstr(s):
    e = s.encode()
    return struct.pack("<Q", len(e)) + e


def kv_walk(src):
    """(bytes, header fields, [(key, type, value offset, entry start, entry end)], end of the key/values)"""
    b = open(src, "rb").read()
    magic, ver, n_t, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    if magic != b"GGUF" or ver < 2:
        raise SystemExit(f"{src}: not a GGUF v2+ file")
    o, kvs = 24, []
    for _ in range(n_kv):
        k0 = o
        n, = struct.unpack_from("<Q", b, o)
        key = b[o + 8:o + 8 + n].decode()
        o += 8 + n
        t, = struct.unpack_from("<I", b, o)
        o = skip_value(b, o + 4, t)
        kvs.append((key, t, k0 + 12 + n, k0, o))
    return b, (ver, n_t), kvs, o


def read_shortlist(src):
    """(ids, source) of src's shortlist keys; (None, None) when it has none"""
    b, _, kvs, _ = kv_walk(src)
    ids = source = None
    for key, t, v, _, _ in kvs:
        if key == "muser.dflash.shortlist" and t == 9:
            et, m = struct.unpack_from("<IQ", b, v)
            if et != 5:
                raise SystemExit(f"{src}: muser.dflash.shortlist is not an int32 array")
            ids = list(struct.unpack_from(f"<{m}i", b, v + 12))
        elif key == "muser.dflash.shortlist_source" and t == 8:
            m, = struct.unpack_from("<Q", b, v)
            source = b[v + 8:v + 8 + m].decode()
    return ids, source


def write_keys(src, dst, ids, source):
    b, (ver, n_t), entries, o = kv_walk(src)
    kvs, align = [], 32
    for key, t, v, k0, k1 in entries:
        if key == "general.alignment":
            align, = struct.unpack_from("<I", b, v)
        if not key.startswith("muser.dflash.shortlist"):
            kvs.append(b[k0:k1])
    t0 = o
    for _ in range(n_t):
        n, = struct.unpack_from("<Q", b, o)
        o += 8 + n
        nd, = struct.unpack_from("<I", b, o)
        o += 4 + 8 * nd + 4 + 8
    tinfo = b[t0:o]
    data = b[(o + align - 1) // align * align:]
    kvs.append(gstr("muser.dflash.shortlist") + struct.pack("<IIQ", 9, 5, len(ids)) + struct.pack(f"<{len(ids)}i", *ids))
    kvs.append(gstr("muser.dflash.shortlist_source") + struct.pack("<I", 8) + gstr(source))
    head = struct.pack("<4sIQQ", b"GGUF", ver, n_t, len(kvs)) + b"".join(kvs) + tinfo
    head += b"\0" * (-len(head) % align)
    with open(dst + ".tmp", "wb") as f:
        f.write(head + data)
    os.replace(dst + ".tmp", dst)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", required=True)
    ap.add_argument("--model")
    ap.add_argument("--from", dest="src", help="copy this drafter's shortlist (and its source line) instead")
    ap.add_argument("--muser", default="./muser")
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--out")
    ap.add_argument("--counts")
    ap.add_argument("--n-vocab", type=int, default=8192)
    a = ap.parse_args()
    if a.src:
        ids, source = read_shortlist(a.src)
        if ids is None:
            raise SystemExit(f"{a.src}: no muser.dflash.shortlist")
        write_keys(a.draft, a.out or a.draft, ids, source or "")
        print(f"{len(ids)} ids from {a.src}: {source}")
        return
    if not a.model:
        ap.error("--model is required (or --from)")
    ts = texts()
    counts = count(a.muser, a.model, ts)
    n_tok = sum(counts.values())
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:a.k]
    taken = set(ranked)
    for t in range(a.n_vocab):
        if len(ranked) >= a.k:
            break
        if t not in taken:
            ranked.append(t)
            taken.add(t)
    ids = sorted(ranked)
    covered = sum(counts.get(t, 0) for t in ranked) / max(n_tok, 1)
    source = (f"tools/train/dflash_shortlist.py: the {a.k} ids most frequent in {len(ts)} texts of the corpus' "
              f"sources ({n_tok} tokens, {len(counts)} distinct ids; covers {covered:.4f})")
    if a.counts:
        json.dump({"k": a.k, "n_texts": len(ts), "n_tokens": n_tok, "covered": covered,
                   "counts": {str(t): counts[t] for t in sorted(counts)}}, open(a.counts, "w"))
    write_keys(a.draft, a.out or a.draft, ids, source)
    print(source)


if __name__ == "__main__":
    main()
