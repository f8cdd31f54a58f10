/* constrain.c: token-level structured output over the jsonc recognizer.
 * Owns: which tokens are allowed (a token's bytes are its piece with
 * special = false; control tokens are refused, except <|message|> to end
 * the answer header and the stop tokens once the value is complete; tokens
 * with no bytes are refused so generation always advances), the answer
 * header rule for chat, and the candidate walk.
 * Does not own: the byte automaton (jsonc.c) or the sampler chain (engine).
 * Design: candidates are visited in descending logit order, in strata
 * (logits within 2, 4, 8, ... of the maximum, each stratum sorted), so the
 * common case touches a few dozen tokens. Greedy stops at the first allowed
 * token: exactly the argmax of the masked logits. Sampling masks the
 * disallowed tokens (-inf) and stops walking once top_k allowed tokens are
 * found (exact: the sampler keeps only the top_k) or once the unvisited
 * tokens together could carry at most 1e-4 of the probability (bounded by
 * n_unvisited * exp((threshold - best_allowed) / max(temp, 1))); those
 * unvisited tokens are masked too. A per-step table of the bytes the
 * recognizer accepts next rejects most tokens on their first byte without
 * copying the state. */
#include "constrain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../model/tokenizer.h"

static const char HDR[] = " to=user";
#define HDR_LEN 8
#define TAIL_EPS 1e-4

enum { H_START = 0, H_MSG = HDR_LEN + 1, H_OFF = HDR_LEN + 2 }; /* 1..HDR_LEN: bytes of HDR matched */

typedef struct {
    float v;
    int32_t id;
} cand;

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
    cand *cands;         /* [n_vocab] stratum scratch */
    float *masked;       /* [n_vocab] */
    uint64_t n_picks, n_checked;
    double seconds;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
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
    c->cands = malloc((size_t)c->n_vocab * sizeof *c->cands);
    c->masked = malloc((size_t)c->n_vocab * sizeof *c->masked);
    if (!c->cands || !c->masked || mu_jsonc_new(s, &c->st, err) || mu_jsonc_new(s, &c->tmp, err)) {
        mu_constrain_free(c);
        return mu_fail(err, MU_E_NOMEM, "structured output: out of memory");
    }
    *out = c;
    return 0;
}

void mu_constrain_free(mu_constrain *c) {
    if (!c) return;
    mu_jsonc_free(c->st);
    mu_jsonc_free(c->tmp);
    free(c->cands);
    free(c->masked);
    free(c);
}

static bool is_control(const mu_constrain *c, int32_t id) {
    return (mu_tok_attr(c->tok, id) & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_UNKNOWN)) != 0;
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

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t mu_constrain_pick(mu_constrain *c, mu_sampler *smp, const mu_sample_params *p, const float *lg) {
    double t0 = now_s();
    int nv = c->n_vocab;
    bool greedy = p->temp <= 0;
    float gmax = -INFINITY;
    for (int i = 0; i < nv; i++)
        if (lg[i] > gmax) gmax = lg[i];
    if (!greedy)
        for (int i = 0; i < nv; i++) c->masked[i] = -INFINITY;
    double tscale = p->temp > 1 ? p->temp : 1;
    int32_t best = -1;
    float amax = -INFINITY;
    int n_allowed = 0, n_seen = 0;
    float hi = INFINITY;
    static const float steps[] = {2, 4, 8, 16, 32, 64, INFINITY};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        float lo = gmax - steps[s];
        int k = 0;
        for (int i = 0; i < nv; i++)
            if (lg[i] < hi && (lg[i] >= lo || s + 1 == sizeof steps / sizeof steps[0]))
                c->cands[k++] = (cand){lg[i], i};
        qsort(c->cands, (size_t)k, sizeof *c->cands, cand_cmp);
        bool stop = false;
        for (int q = 0; q < k && !stop; q++) {
            int32_t id = c->cands[q].id;
            if (!mu_constrain_allowed(c, id)) continue;
            if (best < 0) {
                best = id;
                amax = lg[id];
            }
            if (greedy) {
                stop = true;
                break;
            }
            c->masked[id] = lg[id];
            n_allowed++;
            if (p->top_k > 0 && n_allowed >= p->top_k) stop = true;
        }
        n_seen += k;
        hi = lo;
        if (stop) break;
        /* what is left lies below lo: at most (nv - n_seen) tokens there */
        if (!greedy && best >= 0 && (double)(nv - n_seen) * exp((lo - amax) / tscale) <= TAIL_EPS) break;
    }
    int32_t id = best;
    if (!greedy && best >= 0) {
        id = mu_sampler_sample(smp, c->masked);
        if (id < 0 || id >= nv || c->masked[id] == -INFINITY) id = best; /* rounding at the edge of the draw */
    }
    c->n_picks++;
    c->seconds += now_s() - t0;
    return id;
}
