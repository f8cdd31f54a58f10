/* chat_parse.c: incremental split of the assistant's generated text.
 * Owns: the state machine over what the model writes after the prompt's
 * `<|start|>assistant`:  HEADER (` to=self` | ` to=user` | ` to=<tool>`)
 * `<|message|>` BODY, ended by <|eot|> / <|end_of_text|> (turn over) or
 * <|eom|> (another message follows, opened by `<|start|>assistant`);
 * reasoning and content deltas are streamed as they arrive; a tool message
 * is buffered and its ATEM block parsed into calls when it ends.
 * Does not: render prompts (chat_format.c) or look at token ids.
 * Key choice: never emit text that may be the start of a marker: the longest
 * suffix of the pending text that is a proper prefix of a marker is held
 * back until the next chunk decides it, so any chunking (even byte by byte)
 * yields the same concatenated result. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

enum { ST_HEADER, ST_BODY, ST_AFTER_EOM, ST_DONE };
enum { CH_REASONING, CH_CONTENT, CH_TOOL };

#define MAX_HEADER 256

struct mu_chat_parser {
    int state, channel;
    char *buf; /* pending, not yet processed text */
    size_t n, cap;
    size_t base; /* input bytes before buf[0] (consumed) */
    char *tool; /* body of the current tool message */
    size_t tool_n, tool_cap;
    int n_calls;
};

static const char M_MESSAGE[] = "<|message|>";
static const char M_START_ASSISTANT[] = "<|start|>assistant";
static const char *const BODY_MARKERS[] = {"<|eot|>", "<|eom|>", "<|end_of_text|>", "<|start|>", NULL};

static int grow(char **p, size_t *cap, size_t need, mu_err *err) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) {
        if (nc > ((size_t)1 << 40)) return mu_fail(err, MU_E_NOMEM, "chat: output too large");
        nc *= 2;
    }
    char *np = realloc(*p, nc);
    if (!np) return mu_fail(err, MU_E_NOMEM, "chat: out of memory");
    *p = np;
    *cap = nc;
    return 0;
}

int mu_chat_parser_new(mu_chat_parser **out, mu_err *err) {
    mu_chat_parser *p = calloc(1, sizeof *p);
    if (!p) return mu_fail(err, MU_E_NOMEM, "chat: out of memory");
    p->state = ST_HEADER;
    p->channel = CH_CONTENT;
    *out = p;
    return 0;
}

void mu_chat_parser_free(mu_chat_parser *p) {
    if (!p) return;
    free(p->buf);
    free(p->tool);
    free(p);
}

bool mu_chat_parser_done(const mu_chat_parser *p) { return p->state == ST_DONE; }

static const char *find(const char *s, size_t n, const char *m) { return memmem(s, n, m, strlen(m)); }

static void consume(mu_chat_parser *p, size_t k) {
    memmove(p->buf, p->buf + k, p->n - k);
    p->n -= k;
    p->base += k;
}

/* ---- ATEM tool-call blocks ---- */

/* Parameter value rule: JSON if the text parses as an object, array, number,
 * true, false or null; otherwise the raw text as a string. */
static json_t *param_value(const char *s, size_t n) {
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    if (v && !json_is_string(v)) return v;
    json_decref(v);
    return json_stringn(s, n);
}

static const char *attr_name(const char *s, const char *end, const char *open, size_t *name_len, const char **after) {
    /* s points at `open` (e.g. `<atem:invoke name="`); returns the name and
     * sets *after past `">` */
    size_t ol = strlen(open);
    if ((size_t)(end - s) < ol || memcmp(s, open, ol)) return NULL;
    const char *name = s + ol;
    const char *q = memchr(name, '"', (size_t)(end - name));
    if (!q || q + 1 >= end || q[1] != '>') return NULL;
    *name_len = (size_t)(q - name);
    *after = q + 2;
    return name;
}

typedef struct { int (*fn)(void *, const mu_chat_event *); void *user; } sink;

/* Parses every <atem:invoke> of s[0..n); emits nothing unless all parse.
 * Returns 0 (events emitted), 1 (not a valid block), or the callback's value. */
static int parse_atem(mu_chat_parser *p, const char *s, size_t n, sink *k) {
    if (!s || n == 0) return 1;
    const char *end = s + n;
    static const char INV[] = "<atem:invoke name=\"", INV_END[] = "</atem:invoke>";
    static const char PAR[] = "<atem:parameter name=\"", PAR_END[] = "</atem:parameter>";
    if (!find(s, n, "<atem:function_calls>")) return 1;
    json_t *calls = json_array();
    if (!calls) return 1;
    const char *at = s;
    while ((at = find(at, (size_t)(end - at), INV))) {
        size_t nl;
        const char *body;
        const char *name = attr_name(at, end, INV, &nl, &body);
        const char *close = name ? find(body, (size_t)(end - body), INV_END) : NULL;
        if (!close || nl == 0) goto bad;
        json_t *args = json_object();
        json_t *call = json_pack("{s:s%,s:o}", "name", name, nl, "arguments", args);
        if (!call || json_array_append_new(calls, call)) goto bad;
        const char *q = body;
        while ((q = find(q, (size_t)(close - q), PAR))) {
            size_t pl;
            const char *val;
            const char *pname = attr_name(q, close, PAR, &pl, &val);
            const char *pend = pname ? find(val, (size_t)(close - val), PAR_END) : NULL;
            if (!pend) goto bad;
            char key[256];
            if (pl == 0 || pl >= sizeof key) goto bad;
            memcpy(key, pname, pl);
            key[pl] = 0;
            json_t *v = param_value(val, (size_t)(pend - val));
            if (!v || json_object_set_new(args, key, v)) goto bad;
            q = pend + sizeof PAR_END - 1;
        }
        at = close + sizeof INV_END - 1;
    }
    if (json_array_size(calls) == 0) goto bad;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        char *args = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!args) goto bad;
        mu_chat_event ev = {.kind = MU_CHAT_TOOL_CALL, .name = json_string_value(json_object_get(c, "name")),
                            .arguments = args, .index = p->n_calls++};
        int rc = k->fn(k->user, &ev);
        free(args);
        if (rc) {
            json_decref(calls);
            return rc;
        }
    }
    json_decref(calls);
    return 0;
bad:
    json_decref(calls);
    return 1;
}

/* s is either in p->buf (its input offset is known) or not (SIZE_MAX). */
static int emit_text(mu_chat_parser *p, int kind, const char *s, size_t n, sink *k) {
    if (n == 0) return 0;
    size_t off = p->buf && s >= p->buf && s < p->buf + p->n ? p->base + (size_t)(s - p->buf) : SIZE_MAX;
    mu_chat_event ev = {.kind = kind, .text = s, .len = n, .offset = off};
    return k->fn(k->user, &ev);
}

static int deliver(mu_chat_parser *p, const char *s, size_t n, sink *k, mu_err *err) {
    if (n == 0) return 0;
    if (p->channel == CH_TOOL) {
        if (grow(&p->tool, &p->tool_cap, p->tool_n + n, err)) return err ? err->code : MU_E_NOMEM;
        memcpy(p->tool + p->tool_n, s, n);
        p->tool_n += n;
        return 0;
    }
    return emit_text(p, p->channel == CH_REASONING ? MU_CHAT_REASONING : MU_CHAT_CONTENT, s, n, k);
}

/* End of one message: a tool message's block becomes tool calls (or, when it
 * does not parse, content, so nothing the model wrote is lost). */
static int end_message(mu_chat_parser *p, sink *k) {
    int rc = 0;
    if (p->channel == CH_TOOL) {
        rc = parse_atem(p, p->tool, p->tool_n, k);
        if (rc == 1) rc = emit_text(p, MU_CHAT_CONTENT, p->tool, p->tool_n, k);
        p->tool_n = 0;
    }
    p->channel = CH_CONTENT;
    return rc;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ` to=NAME` -> channel; anything else is an answer */
static void set_channel(mu_chat_parser *p, const char *h, size_t n) {
    size_t i = 0;
    while (i < n && is_space(h[i])) i++;
    p->channel = CH_CONTENT;
    if (n - i < 3 || memcmp(h + i, "to=", 3)) return;
    i += 3;
    size_t j = i;
    while (j < n && !is_space(h[j])) j++;
    if (j - i == 4 && !memcmp(h + i, "self", 4)) p->channel = CH_REASONING;
    else if (j - i == 4 && !memcmp(h + i, "user", 4)) p->channel = CH_CONTENT;
    else if (j > i) p->channel = CH_TOOL;
}

static bool looks_like_header(const char *h, size_t n) {
    size_t i = 0;
    while (i < n && is_space(h[i])) i++;
    return n - i >= 3 && !memcmp(h + i, "to=", 3);
}

/* length of the longest suffix of s[0..n) that is a proper prefix of a marker */
static size_t held_back(const char *s, size_t n) {
    size_t best = 0;
    for (int m = 0; BODY_MARKERS[m]; m++) {
        size_t ml = strlen(BODY_MARKERS[m]);
        for (size_t k = ml - 1; k > best; k--)
            if (k <= n && !memcmp(s + n - k, BODY_MARKERS[m], k)) {
                best = k;
                break;
            }
    }
    return best;
}

static int process(mu_chat_parser *p, sink *k, mu_err *err) {
    for (;;) {
        int rc;
        switch (p->state) {
        case ST_DONE: p->base += p->n; p->n = 0; return 0;
        case ST_AFTER_EOM: {
            size_t ml = sizeof M_START_ASSISTANT - 1;
            if (p->n >= ml && !memcmp(p->buf, M_START_ASSISTANT, ml)) {
                consume(p, ml);
                p->state = ST_HEADER;
                continue;
            }
            if (p->n < ml && !memcmp(p->buf, M_START_ASSISTANT, p->n)) return 0; /* wait */
            if (p->n >= 9 && !memcmp(p->buf, "<|start|>", 9)) consume(p, 9); /* another role: header text */
            p->state = ST_HEADER; /* tolerate a missing <|start|>assistant */
            continue;
        }
        case ST_HEADER: {
            /* only the first MAX_HEADER bytes can hold a header, so the
             * outcome does not depend on how the text was chunked */
            size_t scan = p->n < MAX_HEADER + 32 ? p->n : MAX_HEADER + 32;
            const char *msg = find(p->buf, scan, M_MESSAGE);
            if (msg && (size_t)(msg - p->buf) > MAX_HEADER) msg = NULL;
            const char *stop = NULL;
            size_t stop_len = 0;
            for (int m = 0; BODY_MARKERS[m]; m++) {
                if (m == 3) break; /* <|start|> is not an end inside a header */
                const char *x = find(p->buf, scan, BODY_MARKERS[m]);
                if (x && (size_t)(x - p->buf) > MAX_HEADER) x = NULL;
                if (x && (!stop || x < stop)) {
                    stop = x;
                    stop_len = strlen(BODY_MARKERS[m]);
                }
            }
            if (msg && (!stop || msg < stop)) {
                set_channel(p, p->buf, (size_t)(msg - p->buf));
                consume(p, (size_t)(msg - p->buf) + sizeof M_MESSAGE - 1);
                p->state = ST_BODY;
                continue;
            }
            if (stop) { /* a message without header: an answer */
                size_t hl = (size_t)(stop - p->buf);
                if (!looks_like_header(p->buf, hl) && (rc = emit_text(p, MU_CHAT_CONTENT, p->buf, hl, k))) return rc;
                bool eom = stop_len == 7 && !memcmp(stop, "<|eom|>", 7);
                consume(p, hl + stop_len);
                p->state = eom ? ST_AFTER_EOM : ST_DONE;
                continue;
            }
            if (p->n > MAX_HEADER + 16) { /* no header at all (every marker that could start
                                          * within MAX_HEADER is complete by now): plain text */
                p->channel = CH_CONTENT;
                p->state = ST_BODY;
                continue;
            }
            return 0;
        }
        case ST_BODY: {
            const char *hit = NULL;
            int which = -1;
            for (int m = 0; BODY_MARKERS[m]; m++) {
                const char *x = find(p->buf, p->n, BODY_MARKERS[m]);
                if (x && (!hit || x < hit)) {
                    hit = x;
                    which = m;
                }
            }
            if (hit) {
                size_t before = (size_t)(hit - p->buf);
                if ((rc = deliver(p, p->buf, before, k, err))) return rc;
                if ((rc = end_message(p, k))) return rc;
                if (which == 3) { /* <|start|> without <|eom|>: next message, keep the marker */
                    consume(p, before);
                    p->state = ST_AFTER_EOM;
                } else {
                    consume(p, before + strlen(BODY_MARKERS[which]));
                    p->state = which == 1 ? ST_AFTER_EOM : ST_DONE;
                }
                continue;
            }
            size_t hold = held_back(p->buf, p->n);
            if ((rc = deliver(p, p->buf, p->n - hold, k, err))) return rc;
            consume(p, p->n - hold);
            return 0;
        }
        }
    }
}

int mu_chat_parser_feed(mu_chat_parser *p, const char *text, size_t n, mu_chat_event_fn fn, void *user, mu_err *err) {
    if (p->state == ST_DONE || n == 0) return 0;
    if (grow(&p->buf, &p->cap, p->n + n, err)) return err ? err->code : MU_E_NOMEM;
    memcpy(p->buf + p->n, text, n);
    p->n += n;
    sink k = {fn, user};
    return process(p, &k, err);
}

int mu_chat_parser_finish(mu_chat_parser *p, mu_chat_event_fn fn, void *user, mu_err *err) {
    sink k = {fn, user};
    int rc = 0;
    if (p->state == ST_HEADER && p->n && !looks_like_header(p->buf, p->n))
        rc = emit_text(p, MU_CHAT_CONTENT, p->buf, p->n, &k);
    else if (p->state == ST_BODY) {
        rc = deliver(p, p->buf, p->n, &k, err);
        if (!rc) rc = end_message(p, &k);
    }
    p->n = 0;
    p->state = ST_DONE;
    return rc;
}
