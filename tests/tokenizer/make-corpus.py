#!/usr/bin/env python3
"""make-corpus.py: writes tests/tokenizer/corpus.json, the tokenizer test
corpus (a JSON array of strings). Deterministic: the same script always
writes the same file. Every string is valid UTF-8 (the llama.cpp reference
runs through JavaScript strings); invalid UTF-8 is covered by the unit tests.

Groups: prose, code, scripts (CJK, Arabic, Hebrew, Devanagari, Thai, ...),
emoji (skin tones, ZWJ, flags, keycaps), combining marks, whitespace runs,
digit runs, contractions in all cases, mixed case, special-token look-alikes,
category edge cases (Lt, Lm, No, Nl, Cf, Co, Cn, Z*), long strings, and a
seeded random mix of all of the above.

usage: python3 tests/tokenizer/make-corpus.py [OUT.json]
"""
import json
import os
import random
import sys

C = []


def add(*xs):
    C.extend(xs)


# ---- prose ----
add(
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness...",
    "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world.",
    "She said, \"I'll be there at 5 o'clock.\" He replied: 'OK!'",
    "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal, thank you very much.",
    "e.g. i.e. etc. U.S.A. Ph.D. a.m. p.m.",
    "Well... I don't know?! Maybe; maybe not: (who knows) [nobody] {really}.",
    "  leading spaces",
    "trailing spaces   ",
    "\tTabbed\tcolumns\there",
    "Line one\nLine two\n\nLine four\n",
    "Windows\r\nline\r\nendings\r\n",
    "old Mac\rline\rendings",
)

# ---- code ----
add(
    "def add(a, b):\n    return a + b\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "const f = async (x) => { await fetch(`/api/v1/items/${x}?q=1&r=2`); };",
    "<html><head><title>Test</title></head><body class=\"main\">Hi &amp; bye</body></html>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | tr a-z A-Z; done\n",
    "/usr/local/lib/python3.11/site-packages/numpy/__init__.py",
    "C:\\Users\\Public\\Documents\\file (1).txt",
    "https://example.com/path/to/page.html?query=a+b&lang=en#section-2",
    "git commit -m \"fix: handle CRLF\" && git push origin main",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares\n",
    "if (a && b || !c) { return a->b.c[d]; } // comment\n/* block\n comment */",
    "regex: ^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![0; 16]; Ok(()) }",
    "    indented four\n        indented eight\n\t\ttabs two\n",
    "a/b/c\r\n/d//e///\n/",
    "!!!???...,,,;;;:::",
    "$100 \u20ac20 \u00a330 \u00a5400 50% 3/4 1+1=2 a<b>c a|b a^b ~x `y` @z #w &v *u",
    "__init__ __main__ _private snake_case camelCase PascalCase SCREAMING_CASE kebab-case",
)

# ---- scripts ----
add(
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff01",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694!",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629\u064f \u0644\u064f\u063a\u064e\u0629\u064c",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e! \u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
    "\u0995\u09c7\u09ae\u09a8 \u0986\u099b\u09c7\u09a8? \u09ac\u09be\u0982\u09b2\u09be",
    "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0ba4\u0bae\u0bbf\u0bb4\u0bcd",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u179f\u17bd\u179f\u17d2\u178f\u17b8 \u1797\u17b6\u179f\u17b6\u1781\u17d2\u1798\u17c2\u179a",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0420\u0423\u0421\u0421\u041a\u0418\u0419 \u044f\u0437\u044b\u043a.",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5! \u03a3\u0399\u03a3\u03a5\u03a6\u039f\u03a3",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0 \u0532\u0561\u0580\u0565\u0582",
    "\u1208\u12a0\u121b\u122d\u129b \u1230\u120b\u121d",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u: \u0111\u01b0\u1eddng ph\u1ed1",
    "h\u00e9llo w\u00f6rld \u03a9 \u2248 na\u00efve caf\u00e9 se\u00f1or \u00c5ngstr\u00f6m \u00e6\u00f8\u00e5 \u00df",
    "\u0130stanbul \u0131\u015f\u0131k \u00e7\u00f6\u011f\u00fc\u015f",
)

# ---- emoji ----
add(
    "emoji \U0001f44b\U0001f3fd \U0001f680 \u2764\ufe0f",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
    "\U0001f469\U0001f3fe\u200d\U0001f4bb coder \U0001f3f3\ufe0f\u200d\U0001f308 flag",
    "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea flags",
    "1\ufe0f\u20e3 #\ufe0f\u20e3 *\ufe0f\u20e3 keycaps",
    "\U0001f44d\U0001f3fb\U0001f44d\U0001f3fc\U0001f44d\U0001f3fd\U0001f44d\U0001f3fe\U0001f44d\U0001f3ff",
    "I \u2764 NY \u263a \u2603 \u2600\ufe0f \u2708",
    "\U0001f600\U0001f603\U0001f604\U0001f601\U0001f606\U0001f605\U0001f923\U0001f602",
    "text\U0001f525text \U0001f4afpercent",
)

# ---- combining marks ----
add(
    "e\u0301 e\u0300 a\u0308 n\u0303 c\u0327",
    "cafe\u0301 re\u0301sume\u0301 Zu\u0308rich",
    "Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307l\u036e\u0312\u036bg\u0328\u0325\u030bo\u0357\u035c",
    "\u0301\u0302\u0303 marks first",
    "A\u0301B\u0302C\u0303 UPPER marks",
    "x\u20dd y\u20de circled",
)

# ---- whitespace ----
add(
    " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n\n", "\r", "\r\r\n\n",
    "\n\n\n\t\t  mixed\r\nwhitespace \u00a0 nbsp",
    "a  b   c    d",
    "a\t\tb\t \tc",
    "a \n b \n\n c",
    "  \n  x",
    "x  \r\n  y",
    "end with newline\n",
    "end with spaces and newline  \n",
    "\u3000\u3000ideographic\u3000space",
    "thin\u2009space hair\u200aspace em\u2003space",
    "line\u2028separator paragraph\u2029separator",
    "next\u0085line",
    "no-break\u00a0\u00a0space",
    "vertical\x0btab form\x0cfeed",
    "\u1680ogham \u202fnarrow \u205fmath",
    "word \u00a0",
    "  \u00a0  ",
)

# ---- digits ----
add(
    "1", "12", "123", "1234", "12345", "123456", "1234567",
    "12345678901234567890",
    "Numbers: 1234567 3.14159 -42 1e10 0x1F",
    "1,000,000 1.000.000 1 000 000",
    "2024-01-15T10:30:00Z",
    "+1 (555) 123-4567",
    "v1.2.3-rc.4+build.5",
    "abc123def456",
    "123abc ABC123",
    "\u0661\u0662\u0663 \u0968\u0966\u0968\u096a \u0e51\u0e52\u0e53",
    "\u00bd \u00bc \u00be \u00b2 \u00b3 \u2074 \u2160\u2161\u2162 \u216b",
    "\uff11\uff12\uff13\uff14 fullwidth",
    "\U0001d7d9\U0001d7da\U0001d7db math digits",
    "3\u00bd cups",
)

# ---- contractions ----
add(
    "don't I'LL we've THEY'RE she'd you'm",
    "I'm you're he's she's it's we're they're I've you've I'd you'd I'll you'll",
    "DON'T WON'T CAN'T SHOULDN'T I'M YOU'RE IT'S WE'VE THEY'D SHE'LL",
    "Don'T wOn't cAn'T i'M yOu'Re iT's We'Ve tHeY'd ShE'lL",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock'n'roll O'Neil o'clock y'all ma'am",
    "x'sy x'ty x're x'rx x'vex x'll x'l",
    "''quoted'' 'single' \"double\"",
    "caf\u00e9's na\u00efve't \u00c9COLE'S",
    "\u4e2d\u6587's \u0645\u0631\u062d\u0628\u0627'll",
    "it\u2019s don\u2019t",
    "'",
    "''",
    "a'",
    "'a",
)

# ---- mixed case ----
add(
    "HTTPServer XMLHttpRequest getHTTPResponseCode iPhone",
    "McDonald MacBook eBay iOS macOS YouTube LaTeX",
    "ABCdef aBC AbC abC ABc",
    "\u00c4BC. A\u00e9B. \u00e9ABc \u00c9\u00c9\u00c9 \u00e9\u00e9\u00e9 \u00c9t\u00c9",
    "\u01c4\u01c5\u01c6 \u01c5ungla \u01f2ok",
    "\u02b0\u02b1\u02b2 modifier \u00aa\u00ba",
    "CamelCASEWord lowerUPPERlower UPPERlowerUPPER",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 math letters",
    "SSSSs sssSS \u1e9e\u00df",
)

# ---- special-token look-alikes ----
add(
    "<|start|>user<|message|>hi there<|eot|><|start|>assistant",
    "<|begin_of_text|>hello<|end_of_text|>",
    "<|start|", "<|eot|>x", "x<|eot|>", "<|eot|><|eot|>", "<|eot|> <|eot|>",
    " <|eot|> ", "\n<|eot|>\n", "<<|eot|>>", "<|<|eot|>|>", "<|EOT|>", "<|eot|", "|eot|>",
    "< |eot| >", "<||>", "<|", "|>", "<|>", "<|start|><|message|>",
    "<|image_start|><|patch|><|patch|><|image_end|>",
    "<|eom|>maybe<|eot|>done",
    "<|reserved_special_token_0|> <|reserved_0|> <|finetune_right_pad_id|>",
    "text<|start|>more text<|message|>and more",
    "<|start|>\n<|message|>\n",
    "<|start|><|start|><|start|>",
    "\u00e9<|message|>\u00e9",
    "<|channel|>analysis<|message|>",
)

# ---- category edge cases ----
add(
    "\x00 null \x01\x02\x03 controls \x7f del",
    "zero\u200bwidth\u200cnon\u200djoiner",
    "\ufeffBOM at start",
    "soft\u00adhyphen",
    "private \ue000\uf8ff use",
    "unassigned \u0378\u0379 and \U0002fa1e",
    "noncharacter \ufdd0 \ufffe",
    "replacement \ufffd char",
    "\u2018quotes\u2019 \u201cdouble\u201d \u00abguillemets\u00bb \u300cbrackets\u300d",
    "\u2026 \u2014 \u2013 \u00b7 \u2022 \u2020",
    "\u00a9\u00ae\u2122 \u20ac\u00a3\u00a5 \u00b0C \u00b1 \u00d7 \u00f7",
    "\u2200x\u2203y: x\u2208A \u2227 y\u2209B \u21d2 \u2211 \u222b \u221e",
    "\U00020000\U0002a6d6 ext-B \U0002ebf0 ext-I",
    "\U00013000\U00013001 hieroglyphs",
    "\u0950 \u0fcc \u262f",
)

# ---- long ----
rnd = random.Random(20240601)
para = ("In the beginning was the Word, and the Word was with God. The light shines in the darkness, "
        "and the darkness has not overcome it. ")
add(para * 40)
add("a" * 2000, " " * 1000, "\n" * 500, "9" * 3000, "ab" * 1500, "A" * 1000 + "b",
    "\u00e9" * 1000, "\u4e2d" * 1500, "!" * 1000 + "x", "'s" * 500,
    "https://example.com/" + "/".join("seg%d" % i for i in range(300)))

# ---- seeded random mixes ----
ATOMS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + [
    " ", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "'", "'s", "'T", "'re", "'LL", ".", ",", "!", "?", "/", "//",
    "-", "_", "$", "<", ">", "|", "<|", "|>", "(", ")", "{", "}", "\"", "#", "@", "the", " the", "ing", "tion",
    "\u00e9", "\u00c9", "\u00df", "\u4e2d", "\u6587", "\u01c5", "\u02b0", "\u03c9", "\u03a9", "\u044f", "\u042f",
    "\u0627", "\u0651", "\u0928", "\u093f", "\u094d", "\u0e01", "\u0e31", "\u3042", "\u30a2", "\ud55c", "\u0661",
    "\u00bd", "\u2162", "\u00a0", "\u3000", "\u2028", "\u0085", "\u0301", "\u20e3", "\ufe0f", "\u200d",
    "\U0001f44b", "\U0001f3fd", "\U0001f680", "\u2764", "\u20ac", "\u2014", "\x00", "\x7f", "\ue000",
    "<|start|>", "<|message|>", "<|eot|>", "<|eom|>", "<|begin_of_text|>", "<|patch|>",
]
for _ in range(150):
    n = rnd.randint(1, 40)
    add("".join(rnd.choice(ATOMS) * rnd.choice((1, 1, 1, 2, 3)) for _ in range(n)))

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.json")
with open(out, "w", encoding="utf-8") as f:
    f.write("[\n")
    f.write(",\n".join("  " + json.dumps(s, ensure_ascii=True) for s in C))
    f.write("\n]\n")
print("wrote %s: %d strings" % (out, len(C)))
