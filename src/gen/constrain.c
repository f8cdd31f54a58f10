/* constrain.c: token-level structured output over the jsonc recognizer.
 * Owns: which tokens are allowed (a token's bytes are its piece with
 * special = false; control tokens are refused, except <|message|> to end
 * the answer header and the stop tokens once the value is complete; tokens
 * with no bytes are refused so generation always advances), the answer
 * header rule for chat, and the candidate walk.
 * Does not own: the byte automaton (jsonc.c) or the sampler chain (engine).
 * Design: each step first computes the set of bytes the recognizer accepts
 * next (256 probes) and masks every token whose first byte is not in it
 * (a table of first bytes is built once per job), which removes most of the
 * vocabulary in structural positions for the price of one pass. Greedy then
 * takes the argmax of what is left and checks it fully (copy the state,
 * feed the piece), repeating on rejection: exactly the argmax of the masked
 * logits. Sampling checks the remaining tokens in strata of descending
 * logits (within 2, 4, 8, ... of the best) and stops once top_k allowed
 * tokens are known (exact: the sampler keeps only the top_k) or once the
 * unvisited tokens together could carry at most 1e-4 of the probability
 * (bounded by n_unvisited * exp((threshold - best_allowed) / max(temp, 1)));
 * unvisited tokens are masked (-inf) as well, then the sampler chain runs
 * on the masked logits. */
#include "constrain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tok/tokenizer.h"

static const char HDR[] = " to=user";
#define HDR_LEN 8
#define TAIL_EPS 1e-4

enum { H_START = 0, H_MSG = HDR_LEN + 1, H_OFF = HDR_LEN + 2 }; /* 1..HDR_LEN: bytes of HDR matched */

enum { F_NONE = -1, F_STOP = -2, F_MSG = -3 }; /* first[] for tokens without bytes */

struct mu_constrain {
    const mu_model *m;
    const mu_tok *tok;
    int n_vocab;
    int32_t msg_id;      /* <|message|> or -1 */
    bool chat;
    int hdr;             /* H_START, 1..HDR_LEN, H_MSG, H_OFF */
    mu_jsonc *st, *tmp;
    uint64_t next[4];    /* bytes the recognizer accepts next (valid when next_ok) */
    bool next_ok;
    int16_t *first;      /* [n_vocab] first byte of the piece, or F_* */
    uint16_t *len;       /* [n_vocab] piece length (capped) */
    uint8_t *plain;      /* [n_vocab] piece is plain string text (see mu_jsonc_in_plain_string) */
    bool in_plain;       /* this step: inside a string, plain tokens need no check */
    float *masked;       /* [n_vocab] */
    uint64_t n_picks, n_checked;
    double seconds;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Bytes >= 0x20 except '"' and '\\', complete well-formed UTF-8. */
static bool plain_text(const char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)p[i];
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\') return false;
            i++;
            continue;
        }
        size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || i + len > n) return false;
        uint8_t c1 = (uint8_t)p[i + 1];
        uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (c1 < lo || c1 > hi) return false;
        for (size_t k = 2; k < len; k++)
            if (((uint8_t)p[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

static bool is_control(const mu_constrain *c, int32_t id) {
    return (mu_tok_attr(c->tok, id) & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_UNKNOWN)) != 0;
}

int mu_constrain_new(const mu_model *m, const mu_jsonc_schema *s, bool chat, mu_constrain **out, mu_err *err) {
    const mu_tok *tok = mu_model_tokenizer(m);
    if (!tok) return mu_fail(err, MU_E_ARG, "structured output: the model has no tokenizer");
    mu_constrain *c = calloc(1, sizeof *c);
    if (!c) return mu_fail(err, MU_E_NOMEM, "structured output: out of memory");
    c->m = m;
    c->tok = tok;
    c->n_vocab = mu_model_get_info(m)->n_vocab;
    c->msg_id = mu_tok_find(tok, "<|message|>");
    c->chat = chat && c->msg_id >= 0;
    c->hdr = c->chat ? H_START : H_OFF;
    c->first = malloc((size_t)c->n_vocab * sizeof *c->first);
    c->len = malloc((size_t)c->n_vocab * sizeof *c->len);
    c->masked = malloc((size_t)c->n_vocab * sizeof *c->masked);
    c->plain = malloc((size_t)c->n_vocab);
    if (!c->first || !c->len || !c->masked || !c->plain || mu_jsonc_new(s, &c->st, err) || mu_jsonc_new(s, &c->tmp, err)) {
        mu_constrain_free(c);
        return mu_fail(err, MU_E_NOMEM, "structured output: out of memory");
    }
    for (int32_t i = 0; i < c->n_vocab; i++) {
        size_t n = 0;
        const char *p = mu_tok_piece_view(tok, i, false, &n);
        c->len[i] = n > 0xFFFF ? 0xFFFF : (uint16_t)n;
        if (i == c->msg_id) c->first[i] = F_MSG;
        else if (mu_model_is_stop(m, i)) c->first[i] = F_STOP;
        else if (is_control(c, i) || !p || !n) c->first[i] = F_NONE;
        else c->first[i] = (uint8_t)p[0];
        c->plain[i] = c->first[i] >= 0 && plain_text(p, n);
    }
    *out = c;
    return 0;
}

void mu_constrain_free(mu_constrain *c) {
    if (!c) return;
    mu_jsonc_free(c->st);
    mu_jsonc_free(c->tmp);
    free(c->first);
    free(c->plain);
    free(c->len);
    free(c->masked);
    free(c);
}


bool mu_constrain_allowed(mu_constrain *c, int32_t id) {
    if (id < 0 || id >= c->n_vocab) return false;
    c->n_checked++;
    if (id == c->msg_id) return c->hdr == H_MSG;
    if (mu_model_is_stop(c->m, id)) return c->hdr == H_OFF && mu_jsonc_complete(c->st);
    if (is_control(c, id)) return false;
    size_t n = 0;
    const char *p = mu_tok_piece_view(c->tok, id, false, &n);
    if (!p || !n) return false;
    if (c->hdr == H_MSG) return false;
    if (c->hdr != H_OFF && (c->hdr > H_START || p[0] == ' ')) {
        size_t k = c->hdr == H_START ? 0 : (size_t)c->hdr;
        return k + n <= HDR_LEN && !memcmp(p, HDR + k, n);
    }
    if (!c->next_ok) {
        mu_jsonc_next_bytes(c->st, c->tmp, c->next);
        c->next_ok = true;
    }
    uint8_t b = (uint8_t)p[0];
    if (!(c->next[b >> 6] >> (b & 63) & 1)) return false;
    if (n == 1) return true;
    mu_jsonc_copy(c->tmp, c->st);
    return mu_jsonc_feed(c->tmp, p, n);
}

void mu_constrain_accept(mu_constrain *c, int32_t id) {
    c->next_ok = false;
    if (id == c->msg_id && c->hdr == H_MSG) {
        c->hdr = H_OFF;
        return;
    }
    if (id < 0 || id >= c->n_vocab || mu_model_is_stop(c->m, id) || is_control(c, id)) return;
    size_t n = 0;
    const char *p = mu_tok_piece_view(c->tok, id, false, &n);
    if (!p || !n) return;
    if (c->hdr != H_OFF && (c->hdr > H_START || p[0] == ' ')) {
        c->hdr = (c->hdr == H_START ? 0 : c->hdr) + (int)n;
        if (c->hdr >= HDR_LEN) c->hdr = H_MSG;
        return;
    }
    c->hdr = H_OFF;
    mu_jsonc_feed(c->st, p, n);
}

bool mu_constrain_done(const mu_constrain *c) { return c->hdr == H_OFF && mu_jsonc_closed(c->st); }

void mu_constrain_stats(const mu_constrain *c, uint64_t *n_picks, uint64_t *n_checked, double *seconds) {
    *n_picks = c->n_picks;
    *n_checked = c->n_checked;
    *seconds = c->seconds;
}

/* The bytes a token may start with now (header phase included). */
static void byte_filter(mu_constrain *c, uint64_t ok[4]) {
    ok[0] = ok[1] = ok[2] = ok[3] = 0;
    if (c->hdr == H_MSG) return;
    if (c->hdr != H_OFF && c->hdr > H_START) {
        uint8_t b = (uint8_t)HDR[c->hdr];
        ok[b >> 6] |= 1ull << (b & 63);
        return;
    }
    if (!c->next_ok) {
        mu_jsonc_next_bytes(c->st, c->tmp, c->next);
        c->next_ok = true;
    }
    memcpy(ok, c->next, sizeof c->next);
    if (c->hdr == H_START) {
        ok[0] &= ~(1ull << ' '); /* a leading space starts the header, never the value */
        ok[' ' >> 6] |= 1ull << (' ' & 63);
    }
}

/* masked[i] = logit of i when its class and first byte allow it, else -inf. */
static void prefilter(mu_constrain *c, const float *lg) {
    uint64_t ok[4];
    byte_filter(c, ok);
    bool stop_ok = c->hdr == H_OFF && mu_jsonc_complete(c->st);
    for (int i = 0; i < c->n_vocab; i++) {
        int16_t f = c->first[i];
        bool pass;
        if (f >= 0) pass = ok[f >> 6] >> (f & 63) & 1;
        else if (f == F_STOP) pass = stop_ok;
        else if (f == F_MSG) pass = c->hdr == H_MSG;
        else pass = false;
        c->masked[i] = pass ? lg[i] : -INFINITY;
    }
}

/* Full check of a token that passed the prefilter. */
static bool full_check(mu_constrain *c, int32_t id) {
    if (c->first[id] < 0 || c->len[id] == 1) return true;
    if (c->in_plain && c->plain[id]) return true;
    return mu_constrain_allowed(c, id);
}

int32_t mu_constrain_pick(mu_constrain *c, mu_sampler *smp, const mu_sample_params *p, const float *lg) {
    double t0 = now_s();
    int nv = c->n_vocab;
    float *m = c->masked;
    prefilter(c, lg);
    mu_sampler_adjust(smp, m); /* logit bias, penalties, DRY: before the walk */
    c->in_plain = c->hdr == H_OFF && mu_jsonc_in_plain_string(c->st);
    int32_t id = -1;
    if (p->temp <= 0) {
        /* the argmax of the masked logits: the best 32 candidates of one
         * pass in descending order (ties: lower id), each checked fully */
        for (bool more = true; more && id < 0;) {
            enum { K = 32 };
            int32_t top[K];
            int k = 0;
            for (int i = 0; i < nv; i++) {
                if (m[i] == -INFINITY || (k == K && m[i] <= m[top[K - 1]])) continue;
                int j = k < K ? k++ : K - 1;
                while (j > 0 && m[top[j - 1]] < m[i]) {
                    top[j] = top[j - 1];
                    j--;
                }
                top[j] = i;
            }
            more = k == K;
            for (int q = 0; q < k && id < 0; q++) {
                if (full_check(c, top[q])) id = top[q];
                else m[top[q]] = -INFINITY;
            }
        }
    } else {
        float gmax = -INFINITY;
        int n_cand = 0;
        for (int i = 0; i < nv; i++)
            if (m[i] != -INFINITY) {
                n_cand++;
                if (m[i] > gmax) gmax = m[i];
            }
        double tscale = p->temp > 1 ? p->temp : 1;
        static const float steps[] = {2, 4, 8, 16, 32, 64, INFINITY};
        float hi = INFINITY, amax = -INFINITY;
        int n_allowed = 0, n_seen = 0;
        int32_t best = -1;
        for (size_t s = 0; s < sizeof steps / sizeof steps[0] && n_cand; s++) {
            float lo = gmax - steps[s];
            bool last = s + 1 == sizeof steps / sizeof steps[0];
            for (int i = 0; i < nv; i++) {
                if (m[i] == -INFINITY || m[i] >= hi || (m[i] < lo && !last)) continue;
                n_seen++;
                if (!full_check(c, i)) {
                    m[i] = -INFINITY;
                    continue;
                }
                n_allowed++;
                if (m[i] > amax || (m[i] == amax && i < best)) amax = m[i], best = i;
            }
            hi = lo;
            /* the sampler keeps the top_k: every allowed token above lo is
             * known, so if there are top_k of them the rest cannot matter */
            bool done = last || (p->top_k > 0 && n_allowed >= p->top_k) ||
                        (best >= 0 && (double)(n_cand - n_seen) * exp((lo - amax) / tscale) <= TAIL_EPS);
            if (done) {
                for (int i = 0; i < nv; i++)
                    if (m[i] < lo) m[i] = -INFINITY;
                break;
            }
        }
        id = best;
        if (best >= 0) {
            double ts = now_s();
            id = mu_sampler_sample_adjusted(smp, m);
            t0 += now_s() - ts; /* the sampler chain itself is not the constraint's cost */
            if (id < 0 || id >= nv || m[id] == -INFINITY) id = best; /* rounding at the edge of the draw */
        }
    }
    c->n_picks++;
    c->seconds += now_s() - t0;
    return id;
}
