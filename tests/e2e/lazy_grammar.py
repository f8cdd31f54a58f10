#!/usr/bin/env python3
"""lazy_grammar.py BASE: llama.cpp's lazy grammars on /completion and
/v1/completions of a running `muser serve` (test_serve_compat.sh).
Triggers are picked from the plain greedy text of the server's model: a
token (type 0), a word over two tokens (type 1), a pattern whose group
starts inside a token (type 2); each answer must equal the plain one up to
the trigger's token and continue with digits only (the grammar's), maybe
ended by the end token. A full pattern (type 3) that never spans the whole
text leaves the answer plain.
Prints "ok NAME" or "FAIL NAME: why" per check."""
import json
import re
import sys
import urllib.request

BASE = sys.argv[1]


def post(path, body):
    req = urllib.request.Request(BASE + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def piece(t):
    return post("/detokenize", {"tokens": [t]})["content"]


def gbnf_lit(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


N = 32
BODY = {"prompt": "Once upon a time", "n_predict": N, "temperature": 0, "return_tokens": True}
plain = post("/completion", BODY)["tokens"]
pieces = [piece(t) for t in plain]
offs = [0]
for p in pieces:
    offs.append(offs[-1] + len(p))
text = "".join(pieces)
digit_piece = lambda p: re.fullmatch(r"[0-9]+", p) is not None
ascii_ok = lambda p: len(p) >= 1 and all(" " <= c <= "~" for c in p)


def check(name, extra, k, path="/completion"):
    """the answer's tokens equal the plain ones through index k, then digits
    (and the end token, which a complete grammar allows)"""
    body = dict(BODY, **extra)
    if path == "/completion":
        j = post(path, body)
        toks = j["tokens"]
        if j.get("stop_type") == "eos":  # the grammar was complete: the end token may follow
            toks = toks[:-1]
    else:
        body.pop("return_tokens")
        body["max_tokens"] = body.pop("n_predict")
        txt = post(path, body)["choices"][0]["text"]
        want = "".join(pieces[: k + 1])
        ok = txt.startswith(want) and re.fullmatch(r"[0-9]+", txt[len(want):]) is not None
        print(("ok " if ok else "FAIL ") + name + ("" if ok else ": %r" % txt))
        return
    tail = [piece(t) for t in toks[k + 1:]]
    ok = toks[: k + 1] == plain[: k + 1] and len(tail) > 0 and all(digit_piece(p) for p in tail)
    print(("ok " if ok else "FAIL ") + name + ("" if ok else ": plain %s, got %s, tail %r" % (plain, toks, tail)))


# a token trigger: the first index >= 2 whose id did not occur before
k = next((i for i in range(2, N - 4) if plain[i] not in plain[:i]), None)
if k is None:
    print("ok lazy grammar, token trigger (skipped: no fresh token in the plain text)")
else:
    check("lazy grammar, a token trigger (type 0): plain text through that token, then the grammar",
          {"grammar": "root ::= <[%d]> [0-9]+" % plain[k], "grammar_lazy": True,
           "grammar_triggers": [{"type": 0, "value": pieces[k], "token": plain[k]}]}, k)


def word_index():
    for i in range(1, N - 5):
        w = pieces[i] + pieces[i + 1]
        if not (ascii_ok(pieces[i]) and ascii_ok(pieces[i + 1])) or text.find(w) != offs[i]:
            continue
        if len(post("/tokenize", {"content": w, "parse_special": True})["tokens"]) < 2:
            continue
        return i
    return None


k = word_index()
if k is None:
    print("ok lazy grammar, word trigger (skipped: no two ASCII tokens in the plain text)")
else:
    w = pieces[k] + pieces[k + 1]
    extra = {"grammar": "root ::= %s [0-9]+" % gbnf_lit(w), "grammar_lazy": True,
             "grammar_triggers": [{"type": 1, "value": w}]}
    check("lazy grammar, a word over two tokens (type 1): plain text through it, then the grammar", extra, k + 1)
    check("lazy grammar on /v1/completions", extra, k + 1, "/v1/completions")

k = next((i for i in range(1, N - 4) if ascii_ok(pieces[i]) and len(pieces[i]) >= 2
          and text.find(pieces[i]) == offs[i]), None)
if k is None:
    print("ok lazy grammar, pattern trigger (skipped: no ASCII token of two bytes)")
else:
    p = pieces[k]
    check("lazy grammar, a pattern whose group starts inside a token (type 2): the grammar from the group on",
          {"grammar": "root ::= %s [0-9]+" % gbnf_lit(p[1:]), "grammar_lazy": True,
           "grammar_triggers": [{"type": 2, "value": re.escape(p[0]) + "(" + re.escape(p[1:]) + ")"}]}, k)

# a full pattern (type 3) is anchored at both ends: the text of a later
# token, which a plain pattern would find, never spans the whole text
k = next((i for i in range(1, N) if ascii_ok(pieces[i]) and not text.startswith(pieces[i])), None)
if k is None:
    print("ok lazy grammar, full pattern (skipped: no ASCII token)")
else:
    toks = post("/completion", dict(BODY, grammar="root ::= [0-9]+", grammar_lazy=True,
                                    grammar_triggers=[{"type": 3, "value": re.escape(pieces[k])}]))["tokens"]
    print(("ok " if toks == plain else "FAIL ") + "lazy grammar, a full pattern (type 3) that never spans the whole text: the plain text")
