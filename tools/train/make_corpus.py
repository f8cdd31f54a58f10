#!/usr/bin/env python3
"""Builds the training corpus of muser's default model from text that Debian
packages install: the Python 3.11 documentation sources (python3.11-doc), the
Python 3.11 standard library source (libpython3.11-stdlib), and manual pages
(rendered to plain text with man-db/groff), plus short synthetic chat turns
derived from the one-line summaries of those man pages and Python modules.

Deterministic: inputs are read in sorted order, rendering uses a fixed locale
and width, the held-out split is a hash of each document's source name, and
the output JSONL is written in a fixed order. Output (in OUTDIR):
  corpus-train.jsonl.xz, corpus-heldout.jsonl.xz   one {"src","text"} per line
  manifest.json                                    counts, bytes, package versions, sha256
Usage: make_corpus.py OUTDIR   (see make-corpus.sh)
"""
import glob, hashlib, json, lzma, os, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

PYDOC = "/usr/share/doc/python3.11/html/_sources"
PYLIB = "/usr/lib/python3.11"
MAN_PACKAGES = ["manpages", "manpages-dev", "coreutils", "findutils", "grep", "sed", "tar",
                "gzip", "bash", "util-linux", "procps", "openssh-client", "make", "less",
                "diffutils", "man-db", "xz-utils", "bzip2", "sqlite3", "openssl", "iproute2",
                "git-man", "perl-doc"]
ALL_PACKAGES = ["python3.11-doc", "libpython3.11-stdlib", "man-db", "groff-base"] + MAN_PACKAGES
HELDOUT_PERCENT = 2


def pkg_version(p):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout:
        sys.exit(f"make_corpus: package not installed: {p} (apt-get install {p})")
    return r.stdout


def is_heldout(src):
    return int(hashlib.sha256(src.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT


def clean(text):
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    text = re.sub(r"[ ]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def python_docs():
    for path in sorted(glob.glob(PYDOC + "/**/*.rst.txt", recursive=True)):
        rel = os.path.relpath(path, PYDOC)
        if rel.startswith(("whatsnew/changelog", "genindex")):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            yield "pydoc:" + rel, clean(f.read())


def python_stdlib():
    skip = ("site-packages", "dist-packages", "__pycache__", "pydoc_data", "test/", "tests/",
            "idlelib/idle_test")
    for path in sorted(glob.glob(PYLIB + "/**/*.py", recursive=True)):
        rel = os.path.relpath(path, PYLIB)
        if any(s in rel for s in skip) or os.path.getsize(path) > 400_000:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            yield "pylib:" + rel, clean(f.read())


def man_files():
    files = set()
    for p in MAN_PACKAGES:
        out = subprocess.run(["dpkg", "-L", p], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if re.search(r"^/usr/share/man/man[0-9]/[^/]+\.gz$", line) and os.path.isfile(line) \
                    and not os.path.islink(line):
                files.add(line)
    return sorted(files)


def render_man(path):
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80", MAN_KEEP_FORMATTING="",
               MANROFFSEQ="", GROFF_NO_SGR="1")
    r = subprocess.run(["man", "--nh", "--nj", "-E", "UTF-8", "-P", "cat", "-l", path],
                       capture_output=True, env=env)
    text = r.stdout.decode("utf-8", "replace")
    text = re.sub(".\b", "", text)  # overstrike (bold/underline) from grotty
    return clean(text)


def man_pages():
    files = man_files()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for path, text in zip(files, ex.map(render_man, files)):
            if len(text) > 200:
                yield "man:" + os.path.basename(path)[:-3], text


def first_paragraph(text, limit=600):
    para = []
    for line in text.splitlines():
        if not line.strip():
            if para:
                break
            continue
        para.append(line.strip())
    out = " ".join(para)
    if len(out) > limit:
        cut = out[:limit]
        out = cut[:cut.rfind(". ") + 1] if ". " in cut else cut
    return out


CHAT_Q = ["What does the {n} {k} do?", "What is {n}?", "Explain the {n} {k}.",
          "Tell me about {n}.", "What is {n} used for?"]


PYDOC_Q = ["What is the Python {m} module?", "What does the {m} module do?",
           "Tell me about the Python {m} module.", "What is {m} used for in Python?"]


def chat_doc(src, question, answer):
    return ("<|start|>user<|message|>" + question + "<|eot|><|start|>assistant to=user<|message|>"
            + answer + "<|eot|>")


def man_chat(src, text):
    m = re.search(r"^NAME\n\s+(.+?)\s+[-\u2010\u2013]\s+(.+?)\n\s*\n", text, re.M | re.S)
    if not m:
        return None
    names = [n.strip() for n in m.group(1).split(",")]
    desc = " ".join(m.group(2).split())
    section = src.rsplit(".", 1)[-1][:1]
    kind = {"1": "command", "8": "command", "2": "system call", "3": "function"}.get(section, "page")
    d = re.search(r"^DESCRIPTION\n(.+?)(?:\n[A-Z][A-Z ]+\n|\Z)", text, re.M | re.S)
    more = first_paragraph(d.group(1)) if d else ""
    h = int(hashlib.sha256(src.encode()).hexdigest()[:8], 16)
    q = CHAT_Q[h % len(CHAT_Q)].format(n=names[0], k=kind)
    a = f"{names[0]} ({kind}, manual section {section}): {desc}."
    if more:
        a += " " + more
    return chat_doc(src, q, a)


def pydoc_chat(src, text):
    m = re.search(r":mod:`([\w.]+)`\s+---\s+(.+)", text)
    if not m or not src.startswith("pydoc:library/"):
        return None
    body = text[m.end():]
    body = re.sub(r"^\.\. .*$|^   :\w+:.*$|^\*\*Source code:\*\*.*$|^[=\-^~]+$", "", body, flags=re.M)
    more = first_paragraph(body)
    h = int(hashlib.sha256(src.encode()).hexdigest()[:8], 16)
    q = PYDOC_Q[h % len(PYDOC_Q)].format(m=m.group(1))
    a = f"{m.group(1)} is a module of the Python standard library: {m.group(2).strip()}."
    if more:
        a += " " + more
    return chat_doc(src, q, a)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    versions = {p: pkg_version(p) for p in ALL_PACKAGES}
    counts = {}
    nbytes = {"train": 0, "heldout": 0}
    writers = {s: lzma.open(os.path.join(outdir, f"corpus-{s}.jsonl.xz"), "wt", encoding="utf-8",
                            preset=6) for s in ("train", "heldout")}
    for kind, gen in (("pydoc", python_docs()), ("pylib", python_stdlib()), ("man", man_pages())):
        for src, text in gen:
            split = "heldout" if is_heldout(src) else "train"
            docs = [(src, text)]
            chat = man_chat(src, text) if kind == "man" else pydoc_chat(src, text) if kind == "pydoc" else None
            if chat:
                docs.append(("chat:" + src, chat))
            for s, t in docs:
                writers[split].write(json.dumps({"src": s, "text": t}, ensure_ascii=False) + "\n")
                key = s.split(":")[0] + "/" + split
                counts[key] = counts.get(key, 0) + 1
                nbytes[split] += len(t.encode())
    for w in writers.values():
        w.close()
    manifest = {"packages": versions, "documents": counts, "text_bytes": nbytes,
                "heldout_rule": f"sha256(src)[:8] % 100 < {HELDOUT_PERCENT}",
                "sha256": {}}
    for s in ("train", "heldout"):
        p = os.path.join(outdir, f"corpus-{s}.jsonl.xz")
        with lzma.open(p, "rb") as f:
            manifest["sha256"][f"corpus-{s}.jsonl (uncompressed)"] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print(json.dumps(manifest, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
