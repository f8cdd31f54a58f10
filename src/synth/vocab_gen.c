/* vocab_gen.c: byte-level BPE vocabulary for generated models.
 * Owns: the embedded training corpus, an approximate llama4 pre-split for
 * training, BPE merge learning, the final id layout (see vocab_gen.h).
 * Does not own: tokenization at run time (the tokenizer implements the exact
 * llama.cpp pre-tokenizer and merge application).
 * Key design choice: training is the plain textbook loop (count adjacent
 * pairs over the distinct pre-split words weighted by frequency, merge the
 * most frequent, ties broken by the smaller (left, right) id pair) so the
 * result is deterministic and easy to reason about; the number of learned
 * merges is capped and the rest of a large vocabulary is filled with
 * reserved control tokens, which keeps a 202048-entry vocabulary cheap. */
#include "vocab_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

const char *const mu_vocab_specials[MU_VOCAB_N_SPECIAL] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|start|>",     "<|message|>", "<|eot|>",
    "<|eom|>",           "<|image_start|>", "<|image_end|>", "<|patch|>",
};

/* ---- embedded corpus ----------------------------------------------------- */

static const char CORPUS[] =
    "The quick brown fox jumps over the lazy dog. The dog did not seem to mind, and the fox went on its way\n"
    "through the forest, where the morning light was falling between the trees.\n\n"
    "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife. Every morning\n"
    "he went out in his boat, and every evening he came back with whatever the sea had given him. Some days\n"
    "it was a basket full of silver fish; other days it was nothing at all. \"We will manage,\" his wife would\n"
    "say, \"we always have.\" She was right: they always had.\n\n"
    "Language models read text as a sequence of tokens. A tokenizer splits the text into pieces, and each\n"
    "piece is mapped to an integer id. Byte-level BPE starts from the 256 possible bytes and repeatedly merges\n"
    "the most frequent adjacent pair into a new token, so common words become single tokens while rare words\n"
    "are spelled out from smaller pieces. The model then predicts the next token, one step at a time.\n\n"
    "Attention lets each position look at the positions before it. With a sliding window, a layer only sees\n"
    "the most recent tokens; the full layers see everything. Normalization keeps the activations in a\n"
    "reasonable range, and the residual stream carries information from one layer to the next.\n\n"
    "Questions people often ask: What is the weather like today? How do I install the package? Why does the\n"
    "program crash when the input is empty? Where is the nearest train station? Can you explain how this\n"
    "works, step by step? Which one is faster, and why? I don't know, but I'll find out. It's fine; we're\n"
    "done. They've said they'd come, and you'll see that she's right.\n\n"
    "In 1969, 600 million people watched the first landing on the Moon. The distance is about 384,400 km,\n"
    "and the trip took 3 days, 3 hours and 49 minutes. Prices rose by 12.5% in 2023 and by 7.25% in 2024.\n"
    "Call 555-0134 before 10:30 on 2026-08-10. The answer is 42, not 41 or 43. Pi is 3.14159265358979.\n\n"
    "def fibonacci(n):\n"
    "    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        a, b = b, a + b\n"
    "    return a\n\n"
    "class Model:\n"
    "    def __init__(self, config):\n"
    "        self.config = config\n"
    "        self.layers = [Layer(i, config) for i in range(config.n_layers)]\n\n"
    "    def forward(self, tokens, positions=None):\n"
    "        x = self.embed(tokens)\n"
    "        for layer in self.layers:\n"
    "            x = layer(x, positions)\n"
    "        return self.output(self.norm(x))\n\n"
    "if __name__ == \"__main__\":\n"
    "    import sys\n"
    "    print(fibonacci(int(sys.argv[1])) if len(sys.argv) > 1 else \"usage: fib N\")\n\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n\n"
    "static int compare(const void *a, const void *b) {\n"
    "    const int *x = a, *y = b;\n"
    "    return (*x > *y) - (*x < *y);\n"
    "}\n\n"
    "int main(int argc, char **argv) {\n"
    "    int values[] = {5, 3, 9, 1, 7};\n"
    "    size_t n = sizeof values / sizeof values[0];\n"
    "    qsort(values, n, sizeof values[0], compare);\n"
    "    for (size_t i = 0; i < n; i++) printf(\"%d\\n\", values[i]);\n"
    "    if (argc > 1 && argv[1] == NULL) return 1;\n"
    "    return 0;\n"
    "}\n\n"
    "function isInfinity(value) {\n"
    "  return value === Infinity || value === -Infinity;\n"
    "}\n"
    "const result = items.filter((item) => item.enabled).map((item) => item.name);\n"
    "console.log(`found ${result.length} items`);\n\n"
    "$ sudo apt-get install build-essential\n"
    "$ make -j2 && ./muser run --prompt \"Hello, world\"\n"
    "$ git commit -m \"Fix the local install script\" && git push origin main\n\n"
    "{\"model\": \"muse-glimmer\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"stream\": true,\n"
    " \"temperature\": 1.0, \"top_p\": 0.95, \"top_k\": 64, \"max_tokens\": 256}\n\n"
    "<|start|>system<|message|>You are a helpful assistant. Reasoning strength: high.<|eot|>\n"
    "<|start|>user<|message|>What is the capital of France?<|eot|>\n"
    "<|start|>assistant to=self<|message|>The user asks a simple geography question. The capital of France\n"
    "is Paris.<|eom|><|start|>assistant to=user<|message|>The capital of France is Paris.<|eot|>\n"
    "<|start|>user<|message|>Thanks! And the capital of Germany?<|eot|>\n"
    "<|start|>assistant to=user<|message|>The capital of Germany is Berlin.<|eot|>\n"
    "<|start|>assistant to=self<|message|>I should call the weather tool for the user's city.<|eom|>\n"
    "<|start|>assistant to=get_weather<|message|><atem:function_calls><atem:invoke name=\"get_weather\">"
    "<atem:parameter name=\"city\">Paris</atem:parameter></atem:invoke></atem:function_calls><|eom|>\n"
    "<|start|>tool<|message|>{\"temperature\": 18, \"unit\": \"celsius\", \"sky\": \"cloudy\"}<|eot|>\n\n"
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"status\": \"ok\", \"id\": 7}\r\n\n"
    "THE END OF THE BEGINNING. CamelCaseWords, snake_case_words, kebab-case-words and UPPER_CASE_WORDS.\n"
    "Remember: measure twice, cut once. Don't repeat yourself. Keep it simple.\n\n"
    "Le petit prince regarda les étoiles et dit : « Ce qui est important, on ne le voit pas. » C'était l'été.\n"
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße, Mädchen und Bäume.\n"
    "El niño comió una manzana mientras caminaba por la calle. ¿Dónde está la estación? ¡Qué día!\n"
    "Быстрая коричневая лиса прыгает через ленивую собаку. Привет, как дела?\n"
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί.\n"
    "敏捷的棕色狐狸跳过了懒狗。今天天气很好，我们去公园散步吧。\n"
    "すばやい茶色の狐がのろまな犬を飛び越えた。東京は日本の首都です。\n"
    "빠른 갈색 여우가 게으른 개를 뛰어넘었다. 안녕하세요!\n"
    "الثعلب البني السريع يقفز فوق الكلب الكسول.\n"
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।\n"
    "Emoji: 😀 🎉 👍 🚀 ❤️ and symbols: → ← ≤ ≥ ≠ ∞ © ® ™ € £ ¥ — … •\n\n"
    "The weather was cold, and the wind was blowing from the north. The children stayed inside and read their\n"
    "books, while the adults talked about the harvest, the prices at the market, and the news from the city.\n"
    "Later that evening the rain stopped, the clouds moved away, and the stars came out one by one.\n"
    "She said that the meeting would start at nine, that everyone should bring their notes, and that the\n"
    "results of the experiment would be presented first. Nobody expected the results to be so interesting.\n"
    "A good test is small, fast, and able to fail. A good error message says what failed and the value that\n"
    "caused it. A good function does one thing, does it well, and has a name that says what it does.\n";

const char *mu_vocab_gen_corpus(size_t *len) {
    if (len) *len = sizeof CORPUS - 1;
    return CORPUS;
}

/* ---- GPT-2 byte mapping -------------------------------------------------- */

uint32_t mu_vocab_byte_cp(uint8_t b) {
    /* printable bytes map to themselves; the other 68 get 256, 257, ... in byte order */
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    uint32_t k = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) k++;
    return 256 + k;
}

/* Appends the byte-mapped form of bytes[0..n) to out (cap checked by caller: 2 bytes per byte). */
static size_t byte_map(const uint8_t *bytes, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)utf8proc_encode_char((utf8proc_int32_t)mu_vocab_byte_cp(bytes[i]), (utf8proc_uint8_t *)out + o);
    out[o] = 0;
    return o;
}

/* ---- approximate pre-split ------------------------------------------------ */

enum { C_LETTER, C_NUMBER, C_SPACE, C_NEWLINE, C_OTHER };

static int cp_class(int32_t c) {
    if (c == '\r' || c == '\n') return C_NEWLINE;
    if (c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == 0x85 || c == 0xA0 || c == 0x1680 ||
        (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000)
        return C_SPACE;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return C_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return C_NUMBER;
    default:
        return C_OTHER;
    }
}

typedef struct {
    int32_t *cp;
    int *len; /* UTF-8 bytes of each code point */
    int *cls;
    size_t n;
} cps;

/* Splits text into pre-tokens; calls fn(piece bytes) for each. Invalid UTF-8
 * bytes are treated as single "other" characters. */
typedef int (*piece_fn)(void *ctx, const uint8_t *p, size_t n);

static int presplit(const uint8_t *s, size_t n, piece_fn fn, void *ctx) {
    size_t i = 0;
#define CP_AT(pos, cpv, lenv)                                                                          \
    do {                                                                                               \
        utf8proc_ssize_t _k = utf8proc_iterate(s + (pos), (utf8proc_ssize_t)(n - (pos)), &(cpv));      \
        if (_k <= 0) {                                                                                 \
            (cpv) = 0xFFFD;                                                                            \
            _k = 1;                                                                                    \
        }                                                                                              \
        (lenv) = (size_t)_k;                                                                           \
    } while (0)
    while (i < n) {
        int32_t c, c2 = 0;
        size_t l, l2;
        CP_AT(i, c, l);
        int k = cp_class(c), k2 = -1;
        if (i + l < n) {
            CP_AT(i + l, c2, l2);
            (void)l2;
            k2 = cp_class(c2);
        }
        size_t j = i;
        if (k == C_LETTER || (k != C_NUMBER && k != C_NEWLINE && k2 == C_LETTER)) {
            /* [^\r\n\p{L}\p{N}]? then upper-ish run then lower run, then a contraction */
            if (k != C_LETTER) j += l;
            int seen_lower = 0;
            while (j < n) {
                int32_t d;
                size_t dl;
                CP_AT(j, d, dl);
                if (cp_class(d) != C_LETTER) break;
                int lower = utf8proc_category(d) == UTF8PROC_CATEGORY_LL || utf8proc_category(d) == UTF8PROC_CATEGORY_LO;
                if (!lower && seen_lower) break; /* camelCase boundary */
                if (lower) seen_lower = 1;
                j += dl;
            }
            if (j < n && s[j] == '\'' && j + 1 < n) {
                char a = (char)(s[j + 1] | 0x20), b = j + 2 < n ? (char)(s[j + 2] | 0x20) : 0;
                if (a == 's' || a == 't' || a == 'm' || a == 'd') j += 2;
                else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j += 3;
            }
        } else if (k == C_NUMBER) {
            for (int m = 0; m < 3 && j < n; m++) {
                int32_t d;
                size_t dl;
                CP_AT(j, d, dl);
                if (cp_class(d) != C_NUMBER) break;
                j += dl;
            }
        } else if (k == C_SPACE || k == C_NEWLINE) {
            /* whitespace run; a newline ends it after the newlines; otherwise the
             * last space is left for the following word or punctuation */
            size_t last_nl = 0, end = i;
            int has_nl = 0;
            while (end < n) {
                int32_t d;
                size_t dl;
                CP_AT(end, d, dl);
                int dk = cp_class(d);
                if (dk != C_SPACE && dk != C_NEWLINE) break;
                end += dl;
                if (dk == C_NEWLINE) {
                    has_nl = 1;
                    last_nl = end;
                }
            }
            if (has_nl) j = last_nl;
            else if (end < n && end - i > 1) j = end - 1; /* leave one space (single-byte spaces mostly) */
            else if (end < n && end - i == 1 && k2 == C_OTHER) {
                j = i; /* " ?punct" handled below */
                goto punct;
            } else j = end;
        } else {
        punct:
            if (s[j] == ' ') j++;
            while (j < n) {
                int32_t d;
                size_t dl;
                CP_AT(j, d, dl);
                if (cp_class(d) != C_OTHER) break;
                j += dl;
            }
            while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/')) j++;
        }
        if (j == i) j = i + l; /* always progress */
        int rc = fn(ctx, s + i, j - i);
        if (rc) return rc;
        i = j;
    }
#undef CP_AT
    return 0;
}

/* ---- word table ------------------------------------------------------------ */

typedef struct {
    uint8_t *bytes;
    size_t n;
    uint64_t count;
} word;

typedef struct {
    word *w;
    size_t n, cap;
    size_t *slot; /* hash -> index+1 */
    size_t n_slot;
    int oom;
} words;

static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int words_grow_slots(words *W) {
    size_t ns = W->n_slot ? W->n_slot * 2 : 4096;
    size_t *s = calloc(ns, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < W->n; i++) {
        size_t h = fnv(W->w[i].bytes, W->w[i].n) & (ns - 1);
        while (s[h]) h = (h + 1) & (ns - 1);
        s[h] = i + 1;
    }
    free(W->slot);
    W->slot = s;
    W->n_slot = ns;
    return 0;
}

static int words_add(void *ctx, const uint8_t *p, size_t n) {
    words *W = ctx;
    if (W->n * 2 >= W->n_slot && words_grow_slots(W)) return -1;
    size_t h = fnv(p, n) & (W->n_slot - 1);
    while (W->slot[h]) {
        word *w = &W->w[W->slot[h] - 1];
        if (w->n == n && !memcmp(w->bytes, p, n)) {
            w->count++;
            return 0;
        }
        h = (h + 1) & (W->n_slot - 1);
    }
    if (W->n == W->cap) {
        size_t cap = W->cap ? W->cap * 2 : 1024;
        word *nw = realloc(W->w, cap * sizeof *nw);
        if (!nw) return -1;
        W->w = nw;
        W->cap = cap;
    }
    uint8_t *b = malloc(n);
    if (!b) return -1;
    memcpy(b, p, n);
    W->w[W->n] = (word){b, n, 1};
    W->slot[h] = ++W->n;
    return 0;
}

static void words_free(words *W) {
    for (size_t i = 0; i < W->n; i++) free(W->w[i].bytes);
    free(W->w);
    free(W->slot);
}

/* ---- pair counts (open addressing, key = left << 32 | right) ---------------- */

typedef struct {
    uint64_t *key;
    uint64_t *val;
    size_t cap, n;
} pairmap;

static int pm_init(pairmap *m, size_t cap) {
    m->cap = cap;
    m->n = 0;
    m->key = malloc(cap * sizeof *m->key);
    m->val = calloc(cap, sizeof *m->val);
    if (!m->key || !m->val) return -1;
    memset(m->key, 0xff, cap * sizeof *m->key);
    return 0;
}

static void pm_clear(pairmap *m) {
    memset(m->key, 0xff, m->cap * sizeof *m->key);
    memset(m->val, 0, m->cap * sizeof *m->val);
    m->n = 0;
}

static void pm_add(pairmap *m, uint64_t k, uint64_t v) {
    size_t h = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
    while (m->key[h] != UINT64_MAX && m->key[h] != k) h = (h + 1) & (m->cap - 1);
    if (m->key[h] == UINT64_MAX) {
        m->key[h] = k;
        m->n++;
    }
    m->val[h] += v;
}

/* ---- training ------------------------------------------------------------------ */

typedef struct {
    int32_t *sym; /* symbols of all distinct words, concatenated */
    size_t *off;  /* word i: sym[off[i] .. off[i] + len[i]) */
    size_t *len;
    uint64_t *cnt;
    size_t n_words;
} symtab;

static char *str_cat2(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

static char *str_pair(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    s[la] = ' ';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

void mu_vocab_gen_free(mu_vocab_gen *v) {
    if (!v) return;
    if (v->tokens)
        for (int i = 0; i < v->n_vocab; i++) free(v->tokens[i]);
    if (v->merges)
        for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v);
}

/* string -> id map for dedup of merge results (tiny linear-probe table) */
typedef struct {
    const char **s;
    int *id;
    size_t cap;
} strmap;

static int sm_find(const strmap *m, const char *s) {
    size_t h = fnv((const uint8_t *)s, strlen(s)) & (m->cap - 1);
    while (m->s[h]) {
        if (!strcmp(m->s[h], s)) return m->id[h];
        h = (h + 1) & (m->cap - 1);
    }
    return -1;
}

static void sm_put(strmap *m, const char *s, int id) {
    size_t h = fnv((const uint8_t *)s, strlen(s)) & (m->cap - 1);
    while (m->s[h]) h = (h + 1) & (m->cap - 1);
    m->s[h] = s;
    m->id[h] = id;
}

/* ---- incremental trainer ------------------------------------------------------
 * Same result as recounting every pair after each merge (the reference loop
 * kept below for tests), in time proportional to the words a merge touches:
 * a table of pair -> (count, words that may hold it) and a lazy max-heap of
 * (count, pair) entries; an entry is current when its count equals the
 * table's, stale ones are skipped when popped. Order: larger count first,
 * then the smaller (left << 32 | right) key, as in the reference loop. */

typedef struct {
    uint64_t key, count;
    uint32_t *words;
    uint32_t n_words, cap_words;
} pinfo;

typedef struct {
    uint64_t count, key;
} hent;

typedef struct {
    pinfo *p;
    size_t n_p, cap_p;
    uint32_t *slot; /* pinfo index + 1 */
    size_t n_slot;
    hent *heap;
    size_t n_heap, cap_heap;
    uint32_t *touched;
    size_t n_touched, cap_touched;
    int oom;
} trainer;

static size_t tr_hash(uint64_t k, size_t mask) { return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & mask; }

static int tr_rehash(trainer *t) {
    size_t ns = t->n_slot ? t->n_slot * 2 : 1 << 12;
    uint32_t *s = calloc(ns, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < t->n_p; i++) {
        size_t h = tr_hash(t->p[i].key, ns - 1);
        while (s[h]) h = (h + 1) & (ns - 1);
        s[h] = (uint32_t)i + 1;
    }
    free(t->slot);
    t->slot = s;
    t->n_slot = ns;
    return 0;
}

/* Index of `key`, created with count 0 when absent (-1 on OOM or absent and !create). */
static long tr_find(trainer *t, uint64_t key, int create) {
    if (t->n_slot) {
        size_t h = tr_hash(key, t->n_slot - 1);
        while (t->slot[h]) {
            if (t->p[t->slot[h] - 1].key == key) return (long)t->slot[h] - 1;
            h = (h + 1) & (t->n_slot - 1);
        }
    }
    if (!create) return -1;
    if ((t->n_p + 1) * 2 > t->n_slot && tr_rehash(t)) return -1;
    if (t->n_p == t->cap_p) {
        size_t cap = t->cap_p ? t->cap_p * 2 : 1024;
        pinfo *np = realloc(t->p, cap * sizeof *np);
        if (!np) return -1;
        t->p = np;
        t->cap_p = cap;
    }
    t->p[t->n_p] = (pinfo){key, 0, NULL, 0, 0};
    size_t h = tr_hash(key, t->n_slot - 1);
    while (t->slot[h]) h = (h + 1) & (t->n_slot - 1);
    t->slot[h] = (uint32_t)t->n_p + 1;
    return (long)t->n_p++;
}

static int hent_before(hent a, hent b) { return a.count > b.count || (a.count == b.count && a.key < b.key); }

static int tr_push(trainer *t, uint64_t count, uint64_t key) {
    if (t->n_heap == t->cap_heap) {
        size_t cap = t->cap_heap ? t->cap_heap * 2 : 4096;
        hent *nh = realloc(t->heap, cap * sizeof *nh);
        if (!nh) return -1;
        t->heap = nh;
        t->cap_heap = cap;
    }
    size_t i = t->n_heap++;
    hent e = {count, key};
    while (i > 0 && hent_before(e, t->heap[(i - 1) / 2])) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = e;
    return 0;
}

static hent tr_pop(trainer *t) {
    hent top = t->heap[0], e = t->heap[--t->n_heap];
    size_t i = 0, n = t->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hent_before(t->heap[c + 1], t->heap[c])) c++;
        if (!hent_before(t->heap[c], e)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n) t->heap[i] = e;
    return top;
}

/* Rebuilds the heap from the table when stale entries dominate. */
static int tr_compact(trainer *t) {
    if (t->n_heap < 4 * t->n_p + 4096) return 0;
    t->n_heap = 0;
    for (size_t i = 0; i < t->n_p; i++)
        if (t->p[i].count && tr_push(t, t->p[i].count, t->p[i].key)) return -1;
    return 0;
}

/* count += delta for pair (l, r); when delta > 0 remember that word w holds it. */
static int tr_add(trainer *t, int32_t l, int32_t r, int64_t delta, uint32_t w) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    long i = tr_find(t, key, 1);
    if (i < 0) return -1;
    pinfo *p = &t->p[i];
    p->count = (uint64_t)((int64_t)p->count + delta);
    if (delta > 0 && (p->n_words == 0 || p->words[p->n_words - 1] != w)) {
        if (p->n_words == p->cap_words) {
            uint32_t cap = p->cap_words ? p->cap_words * 2 : 4;
            uint32_t *nw = realloc(p->words, cap * sizeof *nw);
            if (!nw) return -1;
            p->words = nw;
            p->cap_words = cap;
        }
        p->words[p->n_words++] = w;
    }
    if (t->n_touched == t->cap_touched) {
        size_t cap = t->cap_touched ? t->cap_touched * 2 : 256;
        uint32_t *nt = realloc(t->touched, cap * sizeof *nt);
        if (!nt) return -1;
        t->touched = nt;
        t->cap_touched = cap;
    }
    t->touched[t->n_touched++] = (uint32_t)i;
    return 0;
}

static int tr_flush_touched(trainer *t) {
    for (size_t k = 0; k < t->n_touched; k++) {
        const pinfo *p = &t->p[t->touched[k]];
        if (k > 0 && t->touched[k] == t->touched[k - 1]) continue;
        if (p->count && tr_push(t, p->count, p->key)) return -1;
    }
    t->n_touched = 0;
    return 0;
}

static int tr_init(trainer *t, const symtab *T) {
    for (size_t i = 0; i < T->n_words; i++) {
        const int32_t *s = T->sym + T->off[i];
        for (size_t k = 0; k + 1 < T->len[i]; k++)
            if (tr_add(t, s[k], s[k + 1], (int64_t)T->cnt[i], (uint32_t)i)) return -1;
        t->n_touched = 0;
    }
    for (size_t i = 0; i < t->n_p; i++)
        if (tr_push(t, t->p[i].count, t->p[i].key)) return -1;
    return 0;
}

/* The current best pair, or count 0 when none is left. */
static hent tr_best(trainer *t) {
    while (t->n_heap) {
        hent e = tr_pop(t);
        long i = tr_find(t, e.key, 0);
        if (i >= 0 && t->p[i].count == e.count && e.count) return e;
    }
    return (hent){0, 0};
}

/* Replaces (a, b) by id in every word that holds it, updating the counts. */
static int tr_merge(trainer *t, symtab *T, int32_t a, int32_t b, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    long pi = tr_find(t, key, 0);
    if (pi < 0) return 0;
    uint32_t *list = t->p[pi].words, n_list = t->p[pi].n_words;
    t->p[pi].words = NULL;
    t->p[pi].n_words = t->p[pi].cap_words = 0;
    int rc = 0;
    for (uint32_t li = 0; li < n_list && !rc; li++) {
        uint32_t w = list[li];
        int32_t *s = T->sym + T->off[w];
        size_t n = T->len[w], k;
        for (k = 0; k + 1 < n; k++)
            if (s[k] == a && s[k + 1] == b) break;
        if (k + 1 >= n) continue; /* already merged (duplicate list entry) */
        int64_t c = (int64_t)T->cnt[w];
        for (k = 0; k + 1 < n && !rc; k++) rc = tr_add(t, s[k], s[k + 1], -c, w);
        size_t r = 0, o = 0;
        while (r < n) {
            if (r + 1 < n && s[r] == a && s[r + 1] == b) {
                s[o++] = id;
                r += 2;
            } else {
                s[o++] = s[r++];
            }
        }
        T->len[w] = n = o;
        for (k = 0; k + 1 < n && !rc; k++) rc = tr_add(t, s[k], s[k + 1], c, w);
        if (!rc) rc = tr_flush_touched(t);
    }
    free(list);
    if (!rc) rc = tr_compact(t);
    return rc;
}

static void tr_free(trainer *t) {
    for (size_t i = 0; i < t->n_p; i++) free(t->p[i].words);
    free(t->p);
    free(t->slot);
    free(t->heap);
    free(t->touched);
}

int mu_vocab_gen_build(const mu_vocab_gen_params *p, mu_vocab_gen **out, mu_err *err) {
    int n_vocab = p->n_vocab;
    if (n_vocab < 256 + MU_VOCAB_N_SPECIAL + 1 || n_vocab > (1 << 24))
        return mu_fail(err, MU_E_ARG, "vocab_gen: vocabulary size out of range [%d, %d]: %d",
                       256 + MU_VOCAB_N_SPECIAL + 1, 1 << 24, n_vocab);
    int budget = n_vocab - 256 - MU_VOCAB_N_SPECIAL; /* ids for learned tokens + reserved */
    int max_merges = p->max_merges;
    if (max_merges < 0) max_merges = budget - (budget / 16 > 1 ? budget / 16 : 1);
    if (max_merges > budget) max_merges = budget;
    uint64_t min_count = p->min_pair_count > 0 ? (uint64_t)p->min_pair_count : 2;

    size_t clen;
    const char *corpus = p->corpus;
    if (corpus) clen = p->corpus_len;
    else corpus = mu_vocab_gen_corpus(&clen);

    int rc = 0;
    mu_vocab_gen *v = calloc(1, sizeof *v);
    words W = {0};
    symtab T = {0};
    pairmap pm = {0};
    strmap sm = {0};
    trainer tr = {0};
    if (!v) return mu_fail(err, MU_E_NOMEM, "vocab_gen: out of memory");
    v->n_vocab = n_vocab;
    v->tokens = calloc((size_t)n_vocab, sizeof *v->tokens);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    v->merges = calloc((size_t)max_merges + 1, sizeof *v->merges);
    sm.cap = 1;
    while (sm.cap < (size_t)(256 + max_merges) * 2) sm.cap <<= 1;
    sm.s = calloc(sm.cap, sizeof *sm.s);
    sm.id = calloc(sm.cap, sizeof *sm.id);
    if (!v->tokens || !v->types || !v->merges || !sm.s || !sm.id) goto oom;

    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        char tmp[8];
        byte_map(&byte, 1, tmp);
        if (!(v->tokens[b] = strdup(tmp))) goto oom;
        v->types[b] = MU_VOCAB_TYPE_NORMAL;
        sm_put(&sm, v->tokens[b], b);
    }

    /* distinct pre-split words and their counts */
    if (max_merges > 0) {
        if (presplit((const uint8_t *)corpus, clen, words_add, &W)) goto oom;
        size_t total = 0;
        for (size_t i = 0; i < W.n; i++) total += W.w[i].n;
        T.sym = malloc((total + 1) * sizeof *T.sym);
        T.off = malloc((W.n + 1) * sizeof *T.off);
        T.len = malloc((W.n + 1) * sizeof *T.len);
        T.cnt = malloc((W.n + 1) * sizeof *T.cnt);
        if (!T.sym || !T.off || !T.len || !T.cnt) goto oom;
        size_t o = 0;
        for (size_t i = 0; i < W.n; i++) {
            T.off[i] = o;
            T.len[i] = W.w[i].n;
            T.cnt[i] = W.w[i].count;
            for (size_t k = 0; k < W.w[i].n; k++) T.sym[o++] = W.w[i].bytes[k];
        }
        T.n_words = W.n;
        size_t pcap = 1024;
        while (pcap < total * 2) pcap <<= 1;
        if (p->reference_trainer && pm_init(&pm, pcap)) goto oom;
    }

    int next_id = 256;
    if (!p->reference_trainer && max_merges > 0 && tr_init(&tr, &T)) goto oom;
    while (v->n_merges < max_merges) {
        uint64_t best_k = UINT64_MAX, best_v = 0;
        if (p->reference_trainer) {
            pm_clear(&pm);
            for (size_t i = 0; i < T.n_words; i++) {
                const int32_t *s = T.sym + T.off[i];
                for (size_t k = 0; k + 1 < T.len[i]; k++) pm_add(&pm, (uint64_t)s[k] << 32 | (uint32_t)s[k + 1], T.cnt[i]);
            }
            for (size_t h = 0; h < pm.cap; h++) {
                if (pm.key[h] == UINT64_MAX) continue;
                if (pm.val[h] > best_v || (pm.val[h] == best_v && pm.key[h] < best_k)) {
                    best_v = pm.val[h];
                    best_k = pm.key[h];
                }
            }
        } else {
            hent e = tr_best(&tr);
            best_v = e.count;
            best_k = e.key;
        }
        if (best_v < min_count) break;
        int a = (int)(best_k >> 32), b = (int)(uint32_t)best_k;
        char *merged = str_cat2(v->tokens[a], v->tokens[b]);
        char *pair = str_pair(v->tokens[a], v->tokens[b]);
        if (!merged || !pair) {
            free(merged);
            free(pair);
            goto oom;
        }
        int id = sm_find(&sm, merged);
        if (id < 0) {
            id = next_id++;
            v->tokens[id] = merged;
            v->types[id] = MU_VOCAB_TYPE_NORMAL;
            sm_put(&sm, merged, id);
        } else {
            free(merged);
        }
        v->merges[v->n_merges++] = pair;
        if (!p->reference_trainer) {
            if (tr_merge(&tr, &T, a, b, id)) goto oom;
            continue;
        }
        /* reference: apply the merge to every word, left to right */
        for (size_t i = 0; i < T.n_words; i++) {
            int32_t *s = T.sym + T.off[i];
            size_t r = 0, w = 0, n = T.len[i];
            while (r < n) {
                if (r + 1 < n && s[r] == a && s[r + 1] == b) {
                    s[w++] = id;
                    r += 2;
                } else {
                    s[w++] = s[r++];
                }
            }
            T.len[i] = w;
        }
    }
    v->n_learned = next_id - 256;

    /* reserved control tokens, then the specials */
    for (int id = next_id; id < n_vocab - MU_VOCAB_N_SPECIAL; id++) {
        char tmp[40];
        snprintf(tmp, sizeof tmp, "<|reserved_%d|>", id);
        if (!(v->tokens[id] = strdup(tmp))) goto oom;
        v->types[id] = MU_VOCAB_TYPE_CONTROL;
    }
    for (int k = 0; k < MU_VOCAB_N_SPECIAL; k++) {
        int id = n_vocab - MU_VOCAB_N_SPECIAL + k;
        if (!(v->tokens[id] = strdup(mu_vocab_specials[k]))) goto oom;
        v->types[id] = MU_VOCAB_TYPE_CONTROL;
    }
    int base = n_vocab - MU_VOCAB_N_SPECIAL;
    v->bos = base + 0;
    v->eos = base + 1;
    v->start = base + 2;
    v->message = base + 3;
    v->eot = base + 4;
    v->eom = base + 5;
    goto done;

oom:
    rc = mu_fail(err, MU_E_NOMEM, "vocab_gen: out of memory");
done:
    words_free(&W);
    free(T.sym);
    free(T.off);
    free(T.len);
    free(T.cnt);
    free(pm.key);
    free(pm.val);
    tr_free(&tr);
    free(sm.s);
    free(sm.id);
    if (rc) {
        mu_vocab_gen_free(v);
        return rc;
    }
    *out = v;
    return 0;
}
