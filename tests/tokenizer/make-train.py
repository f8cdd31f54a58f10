#!/usr/bin/env python3
"""make-train.py: writes tests/tokenizer/train.txt, the BPE training text for
the generated test model (muser gen --corpus). Deterministic pseudo-text: a
Zipf-distributed lexicon of English-like words, identifiers, numbers,
punctuation and several scripts, so that BPE learns a few thousand merges
(including merges across case, accents, CJK, Cyrillic, Arabic, Devanagari,
emoji bytes and spaces). train.txt is committed; rerun this only to change it
(then regenerate the goldens, see README.md).

usage: python3 tests/tokenizer/make-train.py [OUT.txt]
"""
import os
import random
import sys

rnd = random.Random(7)
ON = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v", "w", "y", "z",
      "ch", "sh", "th", "st", "tr", "pl", "gr", "br", "str", ""]
NU = ["a", "e", "i", "o", "u", "ea", "ou", "ai", "ee", "oo", "y", "\u00e9", "\u00f6"]
CO = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "rt", "st", "ck", "sh", "th", "x"]
SUF = ["", "", "", "s", "ed", "ing", "er", "ly", "tion", "ment", "ness", "'s", "'t", "'ll"]
CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 300)] + [chr(c) for c in range(0x3041, 0x3094)]
CYR = [chr(c) for c in range(0x0430, 0x0450)]
ARA = [chr(c) for c in range(0x0627, 0x064B)]
DEV = [chr(c) for c in range(0x0915, 0x0939)]
VS = [chr(c) for c in range(0x093E, 0x094D)]
EMO = ["\U0001f600", "\U0001f44d", "\U0001f3fd", "\u2764\ufe0f", "\U0001f680", "\U0001f525", "\u200d"]


def latin():
    w = "".join(rnd.choice(ON) + rnd.choice(NU) + rnd.choice(CO) for _ in range(rnd.choice((1, 1, 2, 2, 3))))
    w += rnd.choice(SUF)
    r = rnd.random()
    if r < 0.15:
        w = w.capitalize()
    elif r < 0.2:
        w = w.upper()
    elif r < 0.23:
        w = w[: len(w) // 2] + w[len(w) // 2:].capitalize()
    return w


def word():
    r = rnd.random()
    if r < 0.70:
        return latin()
    if r < 0.76:
        return "".join(rnd.choice(CJK) for _ in range(rnd.randint(1, 4)))
    if r < 0.81:
        return "".join(rnd.choice(CYR) for _ in range(rnd.randint(2, 8)))
    if r < 0.85:
        return "".join(rnd.choice(ARA) for _ in range(rnd.randint(2, 7)))
    if r < 0.89:
        return "".join(rnd.choice(DEV) + rnd.choice(VS) for _ in range(rnd.randint(1, 4)))
    if r < 0.93:
        return str(rnd.randint(0, 10 ** rnd.randint(1, 6)))
    if r < 0.96:
        return rnd.choice(["_", ""]).join(latin().lower() for _ in range(2)) + rnd.choice(["()", "(x)", "[i]", ".y", ""])
    return "".join(rnd.choice(EMO) for _ in range(rnd.randint(1, 3)))


lex = [word() for _ in range(2500)]
weights = [1.0 / (i + 1) for i in range(len(lex))]
PUNCT = [" ", " ", " ", " ", " ", " ", ", ", ". ", "; ", ": ", "! ", "? ", " - ", " (", ") ", "\n", "\n\n", "  ", "\t",
         " /", "/", " \"", "\" ", " = ", " + ", "->", "::", " {", "}\n", "\r\n"]
out = []
size = 0
while size < 120_000:
    n = rnd.randint(4, 30)
    words = rnd.choices(lex, weights, k=n)
    s = ""
    for w in words:
        s += w + rnd.choice(PUNCT)
    out.append(s.rstrip(" ") + "\n")
    size += len(s.encode("utf-8"))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.txt")
with open(path, "w", encoding="utf-8", newline="") as f:
    f.write("".join(out))
print("wrote %s: %d bytes" % (path, size))
