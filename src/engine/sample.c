/* sample.c: the sampler's parameters, its history of accepted tokens and
 * the stages that read it, as llama.cpp's llama-sampler.cpp does them:
 * logit bias, repetition / frequency / presence penalties over a window,
 * and DRY (with its sequence breakers found in the vocabulary as
 * llama_sampler_init_dry finds them). Also the probabilities reported with
 * each token. The candidate stages and the draw are in sample_chain.c.
 * Design: the history stages touch few tokens, so they edit a copy of the
 * logits sparsely (penalised tokens, DRY's tokens, biased ids) and the
 * candidate stages then see exactly what llama.cpp's chain sees; with none
 * of them on, nothing is copied. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tok/tokenizer.h"
#include "sample_int.h"

mu_sample_params mu_sample_defaults(void) {
    return (mu_sample_params){.temp = 0.8f,
                              .top_k = 40,
                              .top_p = 0.95f,
                              .min_p = 0.05f,
                              .seed = 0xFFFFFFFFu,
                              .typical_p = 1,
                              .top_n_sigma = -1,
                              .xtc_threshold = 0.1f,
                              .dynatemp_exponent = 1,
                              .penalty_last_n = 64,
                              .penalty_repeat = 1,
                              .dry_base = 1.75f,
                              .dry_allowed_length = 2,
                              .dry_penalty_last_n = 64,
                              .mirostat_tau = 5,
                              .mirostat_eta = 0.1f};
}

static bool fin(float x) { return isfinite(x); }

/* Range checks: NaN and infinities are refused everywhere; the rest only
 * where llama.cpp's sampler would misbehave (its front ends clamp more). */
static int check_params(const mu_sample_params *p, int n_vocab, mu_err *err) {
    if (n_vocab <= 0) return mu_fail(err, MU_E_ARG, "sample: bad vocabulary size %d", n_vocab);
#define BAD(f) return mu_fail(err, MU_E_ARG, "sample: %s out of range: %g", #f, (double)p->f)
    if (!fin(p->temp)) BAD(temp);
    if (!(p->top_p >= 0) || !fin(p->top_p)) BAD(top_p);
    if (!(p->min_p >= 0) || p->min_p > 1) BAD(min_p);
    if (p->min_keep < 0) BAD(min_keep);
    if (!fin(p->typical_p)) BAD(typical_p);
    if (!fin(p->top_n_sigma)) BAD(top_n_sigma);
    if (!(p->xtc_probability >= 0) || p->xtc_probability > 1) BAD(xtc_probability);
    if (!(p->xtc_threshold >= 0) || p->xtc_threshold > 1) BAD(xtc_threshold);
    if (!(p->dynatemp_range >= 0) || !fin(p->dynatemp_range)) BAD(dynatemp_range);
    if (!fin(p->dynatemp_exponent)) BAD(dynatemp_exponent);
    if (p->penalty_last_n < -1) BAD(penalty_last_n);
    if (!(p->penalty_repeat >= 0) || !fin(p->penalty_repeat)) BAD(penalty_repeat);
    if (!fin(p->penalty_freq)) BAD(penalty_freq);
    if (!fin(p->penalty_present)) BAD(penalty_present);
    if (!(p->dry_multiplier >= 0) || !fin(p->dry_multiplier)) BAD(dry_multiplier);
    if (!fin(p->dry_base)) BAD(dry_base);
    if (p->dry_allowed_length < 0) BAD(dry_allowed_length);
    if (p->dry_penalty_last_n < -1) BAD(dry_penalty_last_n);
    if (p->mirostat < 0 || p->mirostat > 2) BAD(mirostat);
    if (!fin(p->mirostat_tau)) BAD(mirostat_tau);
    if (!fin(p->mirostat_eta)) BAD(mirostat_eta);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias)) BAD(n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++)
        if (isnan(p->logit_bias[i].bias) || p->logit_bias[i].bias == INFINITY)
            return mu_fail(err, MU_E_ARG, "sample: logit bias of token %d out of range: %g", p->logit_bias[i].id,
                           (double)p->logit_bias[i].bias);
    if (p->n_dry_breakers < 0 || (p->n_dry_breakers > 0 && !p->dry_breakers)) BAD(n_dry_breakers);
#undef BAD
    return 0;
}

static int sampler_alloc(const mu_sample_params *p, int n_vocab, mu_sampler **out, mu_err *err) {
    int rc = check_params(p, n_vocab, err);
    if (rc) return rc;
    mu_sampler *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "sample: out of memory");
    s->p = *p;
    s->p.logit_bias = NULL;
    s->p.n_logit_bias = 0;
    s->p.dry_breakers = NULL;
    s->p.n_dry_breakers = 0;
    s->n_vocab = n_vocab;
    const float rep = p->penalty_repeat == 0 ? 1 : p->penalty_repeat;
    s->p.penalty_repeat = rep;
    /* llama.cpp: penalties off for last_n 0 or neutral values; DRY off for
     * multiplier 0, base < 1 or last_n 0; neither is in mirostat's chain */
    s->pen_on = !p->mirostat && p->penalty_last_n != 0 &&
                !(rep == 1.0f && p->penalty_freq == 0.0f && p->penalty_present == 0.0f);
    s->dry_on = !p->mirostat && p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
    size_t nv = (size_t)n_vocab;
    bool ok = true;
    if (p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        ok = s->bias != NULL;
        for (int i = 0; ok && i < p->n_logit_bias; i++)
            if (p->logit_bias[i].id >= 0 && p->logit_bias[i].id < n_vocab) s->bias[s->n_bias++] = p->logit_bias[i];
    }
    s->adjusts = s->n_bias > 0 || s->pen_on || s->dry_on;
    if (ok && s->pen_on) ok = (s->cnt = calloc(nv, sizeof *s->cnt)) != NULL;
    if (ok && s->dry_on) ok = (s->dry_max = calloc(nv, sizeof *s->dry_max)) != NULL;
    if (ok) {
        s->adj = malloc(nv * sizeof *s->adj);
        s->cand = malloc(nv * sizeof *s->cand);
        s->tmp = malloc(nv * sizeof *s->tmp);
        s->idx = malloc(2 * nv * sizeof *s->idx);
        s->score = malloc(nv * sizeof *s->score);
        ok = s->adj && s->cand && s->tmp && s->idx && s->score;
    }
    if (!ok) {
        mu_sampler_free(s);
        return mu_fail(err, MU_E_NOMEM, "sample: out of memory");
    }
    mu_mt_seed(&s->rng_dist, (uint32_t)p->seed);
    mu_mt_seed(&s->rng_xtc, (uint32_t)p->seed);
    s->mu = 2.0f * p->mirostat_tau;
    s->post_only = -1;
    *out = s;
    return 0;
}

int mu_sampler_new(const mu_sample_params *p, int n_vocab, mu_sampler **out, mu_err *err) {
    mu_sampler *s;
    int rc = sampler_alloc(p, n_vocab, &s, err);
    if (rc) return rc;
    if (s->dry_on && !(p->dry_breakers && p->n_dry_breakers == 0)) {
        mu_sampler_free(s);
        return mu_fail(err, MU_E_ARG, "sample: DRY sequence breakers need the model's vocabulary");
    }
    *out = s;
    return 0;
}

void mu_sampler_free(mu_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->hist);
    free(s->cnt);
    free(s->brk);
    free(s->brk_tail);
    free(s->dry_rep);
    free(s->dry_max);
    free(s->dry_touched);
    free(s->adj);
    free(s->cand);
    free(s->tmp);
    free(s->idx);
    free(s->score);
    free(s);
}

/* ---- DRY sequence breakers -------------------------------------------- */

static int brk_add(mu_sampler *s, int32_t head, const int32_t *tail, int len, mu_err *err) {
    if (len > 0) { /* llama.cpp keeps one copy of each (head, tail) */
        for (int i = 0; i < s->n_brk; i++)
            if (s->brk[i].head == head && s->brk[i].len == len &&
                !memcmp(s->brk_tail + s->brk[i].off, tail, (size_t)len * sizeof *tail))
                return 0;
    }
    int32_t off = s->n_brk ? s->brk[s->n_brk - 1].off + s->brk[s->n_brk - 1].len : 0;
    mu_dry_brk *b = realloc(s->brk, ((size_t)s->n_brk + 1) * sizeof *b);
    if (!b) return mu_fail(err, MU_E_NOMEM, "sample: out of memory");
    s->brk = b;
    int32_t *t = realloc(s->brk_tail, ((size_t)off + (size_t)len + 1) * sizeof *t);
    if (!t) return mu_fail(err, MU_E_NOMEM, "sample: out of memory");
    s->brk_tail = t;
    if (len) memcpy(t + off, tail, (size_t)len * sizeof *tail);
    s->brk[s->n_brk++] = (mu_dry_brk){head, off, len};
    return 0;
}

static int brk_cmp(const void *a, const void *b) {
    const mu_dry_brk *x = a, *y = b;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* get_overlapping_token_sequences: every token whose text contains the
 * breaker is a one-token breaker; a token whose text ends with a proper
 * prefix of it heads a breaker whose tail is the rest, tokenized (at most
 * 20 tokens). */
static int brk_from_text(mu_sampler *s, const mu_tok *tok, const char *str, size_t sl, mu_err *err) {
    for (int32_t id = 0; id < s->n_vocab; id++) {
        size_t wl = 0;
        const char *w = mu_tok_piece_view(tok, id, true, &wl);
        if (!w) continue;
        if (wl >= sl && memmem(w, wl, str, sl)) {
            int rc = brk_add(s, id, NULL, 0, err);
            if (rc) return rc;
            continue;
        }
        for (size_t pos = 0; pos < wl; pos++) {
            if (w[pos] != str[0]) continue;
            size_t i = 1;
            bool match = true;
            for (; i < sl && i + pos < wl; i++)
                if (w[pos + i] != str[i]) {
                    match = false;
                    break;
                }
            if (!match) continue;
            int32_t *ids = NULL;
            int n = 0;
            int rc = mu_tok_encode(tok, str + i, sl - i, false, &ids, &n, err);
            if (!rc) rc = brk_add(s, id, ids, n > 20 ? 20 : n, err);
            free(ids);
            if (rc) return rc;
        }
    }
    return 0;
}

/* Breakers sorted by head (stable: tails in the order found) for lookup. */
static void brk_finish(mu_sampler *s) {
    if (s->n_brk > 1) qsort(s->brk, (size_t)s->n_brk, sizeof *s->brk, brk_cmp);
}

int mu_sampler_new_model(const mu_sample_params *p, const mu_model *m, mu_sampler **out, mu_err *err) {
    mu_sampler *s;
    int rc = sampler_alloc(p, mu_model_get_info(m)->n_vocab, &s, err);
    if (rc) return rc;
    if (s->dry_on) {
        static const char *const defaults[] = {"\n", ":", "\"", "*"};
        const char *const *b = p->dry_breakers ? p->dry_breakers : defaults;
        int nb = p->dry_breakers ? p->n_dry_breakers : 4;
        const mu_tok *tok = mu_model_tokenizer(m);
        if (nb > 0 && !tok) rc = mu_fail(err, MU_E_UNSUPPORTED, "sample: DRY sequence breakers need a tokenizer");
        for (int i = 0; i < nb && !rc; i++) {
            size_t l = b[i] ? strlen(b[i]) : 0;
            if (l == 0) continue; /* llama.cpp skips empty breakers */
            rc = brk_from_text(s, tok, b[i], l > 40 ? 40 : l, err);
        }
        if (!rc) brk_finish(s);
    }
    if (rc) {
        mu_sampler_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int mu_sampler_set_breaker_tokens(mu_sampler *s, const int32_t *const *seqs, const int *lens, int n, mu_err *err) {
    s->n_brk = 0;
    for (int i = 0; i < n; i++) {
        if (lens[i] < 1) continue;
        int rc = brk_add(s, seqs[i][0], seqs[i] + 1, lens[i] - 1, err);
        if (rc) return rc;
    }
    brk_finish(s);
    return 0;
}

/* ---- history ---------------------------------------------------------- */

void mu_sampler_accept(mu_sampler *s, int32_t tok) {
    if (!(s->pen_on || s->dry_on) || tok < 0 || tok >= s->n_vocab) return;
    if (s->n_hist == s->cap_hist) {
        size_t cap = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *h = realloc(s->hist, cap * sizeof *h);
        if (!h) return; /* out of memory: the history stops growing */
        s->hist = h;
        s->cap_hist = cap;
    }
    s->hist[s->n_hist++] = tok;
    if (s->pen_on) {
        s->cnt[tok]++;
        int w = s->p.penalty_last_n;
        if (w > 0 && s->n_hist > (size_t)w) s->cnt[s->hist[s->n_hist - 1 - (size_t)w]]--;
    }
}

/* The i-th token from the end (0: the last). */
static int32_t rat(const mu_sampler *s, size_t i) { return s->hist[s->n_hist - 1 - i]; }

/* llama_sampler_penalties_apply over the tokens of the window. */
static void apply_penalties(mu_sampler *s, float *l) {
    const mu_sample_params *p = &s->p;
    size_t w = p->penalty_last_n < 0 || (size_t)p->penalty_last_n > s->n_hist ? s->n_hist : (size_t)p->penalty_last_n;
    /* each distinct token once: its count is negated while visited */
    for (size_t i = 0; i < w; i++) {
        int32_t t = rat(s, i);
        int c = s->cnt[t];
        if (c <= 0) continue;
        float v = l[t];
        if (v <= 0) v *= p->penalty_repeat;
        else v /= p->penalty_repeat;
        float fp = (float)c * p->penalty_freq;
        float pp = 1.0f * p->penalty_present;
        v -= fp + pp;
        l[t] = v;
        s->cnt[t] = -c;
    }
    for (size_t i = 0; i < w; i++) {
        int32_t t = rat(s, i);
        if (s->cnt[t] < 0) s->cnt[t] = -s->cnt[t];
    }
}

/* First breaker with this head, or -1. */
static int brk_find(const mu_sampler *s, int32_t head) {
    int lo = 0, hi = s->n_brk;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->brk[mid].head < head) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n_brk && s->brk[lo].head == head ? lo : -1;
}

/* llama_sampler_dry_apply (Koboldcpp's DRY): restart sequences bound the
 * repeat length; a reverse Z-algorithm finds, for each earlier position,
 * how long a suffix of the context repeats there; the token that followed
 * each such repeat is penalised by multiplier * base^(length - allowed). */
static void apply_dry(mu_sampler *s, float *l) {
    const mu_sample_params *p = &s->p;
    size_t w = p->dry_penalty_last_n < 0 || (size_t)p->dry_penalty_last_n > s->n_hist ? s->n_hist
                                                                                     : (size_t)p->dry_penalty_last_n;
    const int n = (int)w, allowed = p->dry_allowed_length;
    if (n <= allowed) return;
    if ((size_t)n > s->cap_dry) {
        int *r = realloc(s->dry_rep, (size_t)n * sizeof *r);
        if (r) s->dry_rep = r;
        int32_t *t = realloc(s->dry_touched, (size_t)n * sizeof *t);
        if (t) s->dry_touched = t;
        if (!r || !t) return; /* out of memory: no DRY penalty this step */
        s->cap_dry = (size_t)n;
    }
    int *rep = s->dry_rep;
    memset(rep, 0, (size_t)n * sizeof *rep);
    /* step 1: the nearest restart sequence limits the repeat length */
    int rep_limit = n;
    for (int i = 0; i < n; i++) {
        int b = brk_find(s, rat(s, (size_t)i));
        if (b < 0) continue;
        int longest = -1;
        for (; b < s->n_brk && s->brk[b].head == rat(s, (size_t)i); b++) {
            int len = s->brk[b].len;
            if (len > longest && len <= i) {
                bool match = true;
                for (int o = 0; o < len && match; o++)
                    match = s->brk_tail[s->brk[b].off + o] == rat(s, (size_t)(i - o - 1));
                if (match) longest = len;
            }
        }
        if (longest >= 0) {
            rep_limit = i - longest;
            break;
        }
    }
    if (rep_limit < allowed) return;
    /* step 2: reverse Z-algorithm */
    {
        const int last = n - 1;
        int rt = 0, lt = 0;
        for (int k = 1; k < n; k++) {
            if (k > rt) {
                int m = 0;
                while (m + k < n && rat(s, (size_t)m) == rat(s, (size_t)(m + k))) m++;
                rep[last - k] = m < rep_limit ? m : rep_limit;
                if (m > 0) {
                    lt = k;
                    rt = k + m - 1;
                }
            } else {
                int q = k - lt, right = rt - k + 1;
                if (rep[last - q] < right) {
                    int m = rep[last - q] < rep_limit ? rep[last - q] : rep_limit;
                    rep[last - k] = m;
                } else {
                    int i = rt + 1;
                    while (i < n && rat(s, (size_t)i) == rat(s, (size_t)(i - k))) i++;
                    int m = i - k < rep_limit ? i - k : rep_limit;
                    rep[last - k] = m;
                    lt = k;
                    rt = i - 1;
                }
            }
        }
    }
    /* step 3: the longest repeat each following token would extend */
    int n_touched = 0;
    for (int i = 0; i < n - 1; i++) {
        int len = rep[i];
        if (len < allowed) continue;
        int32_t t = rat(s, (size_t)(n - 2 - i));
        if (s->dry_max[t] == 0) s->dry_touched[n_touched++] = t;
        if (s->dry_max[t] < len + 1) s->dry_max[t] = len + 1;
    }
    /* step 4: penalties, except on single-token breakers */
    const float FLOAT_MAX_LOG = 88.7228391f;
    int max_exp = 0;
    if (p->dry_base > 1.000001f) max_exp = (int)(FLOAT_MAX_LOG / logf(p->dry_base));
    for (int k = 0; k < n_touched; k++) {
        int32_t t = s->dry_touched[k];
        int len = s->dry_max[t] - 1;
        s->dry_max[t] = 0;
        bool single = false;
        for (int b = brk_find(s, t); b >= 0 && b < s->n_brk && s->brk[b].head == t && !single; b++)
            single = s->brk[b].len == 0;
        if (single) continue;
        int e = len - allowed;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        float pen = (float)((double)p->dry_multiplier * pow((double)p->dry_base, (double)e));
        l[t] -= pen;
    }
}

void mu_sampler_adjust(mu_sampler *s, float *l) {
    for (int i = 0; i < s->n_bias; i++) l[s->bias[i].id] += s->bias[i].bias;
    if (s->pen_on) apply_penalties(s, l);
    if (s->dry_on) apply_dry(s, l);
}

/* ---- probabilities reported with each token ---------------------------- */

/* A candidate: logit and token id. */
typedef struct {
    float v;
    int32_t id;
} cand;

/* Sort candidates by value, descending (ties: lower id first). */
static void sort_desc(int32_t *ids, float *vals, int n) {
    /* insertion into a heap would be faster for huge n; n is cut by top-k first */
    for (int i = 1; i < n; i++) {
        float v = vals[i];
        int32_t id = ids[i];
        int j = i - 1;
        while (j >= 0 && (vals[j] < v || (vals[j] == v && ids[j] > id))) {
            vals[j + 1] = vals[j];
            ids[j + 1] = ids[j];
            j--;
        }
        vals[j + 1] = v;
        ids[j + 1] = id;
    }
}


static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Keeps the k largest logits at the front, sorted descending. With
 * scratch (n entries) and a large k, sorts everything once instead. */
static int select_top(const float *l, int n, int k, int32_t *ids, float *vals, cand *scratch) {
    if (k > 256 && scratch) {
        for (int i = 0; i < n; i++) scratch[i] = (cand){l[i], i};
        qsort(scratch, (size_t)n, sizeof *scratch, cand_cmp);
        for (int i = 0; i < k; i++) {
            ids[i] = scratch[i].id;
            vals[i] = scratch[i].v;
        }
        return k;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m < k) {
            ids[m] = i;
            vals[m] = l[i];
            m++;
            if (m == k) sort_desc(ids, vals, m);
            continue;
        }
        if (l[i] <= vals[k - 1]) continue;
        int j = k - 1;
        while (j > 0 && vals[j - 1] < l[i]) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = l[i];
        ids[j] = i;
    }
    if (m < k) sort_desc(ids, vals, m);
    return m;
}

/* Probabilities as llama.cpp's sampler reports them (the reference the
 * tests compare with): candidates sorted by logit, descending; expf(l - max)
 * in float, summed in float in that order; each divided by the sum. */
void mu_top_probs(const float *logits, int n_vocab, int k, int32_t *ids, float *probs) {
    if (k > n_vocab) k = n_vocab;
    cand *c = malloc((size_t)n_vocab * sizeof *c);
    if (!c) { /* fall back to an unsorted float sum: same values within rounding */
        float mx = logits[0];
        for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
        float sum = 0;
        for (int i = 0; i < n_vocab; i++) sum += expf(logits[i] - mx);
        select_top(logits, n_vocab, k, ids, probs, NULL);
        for (int i = 0; i < k; i++) probs[i] = expf(logits[ids[i]] - mx) / sum;
        return;
    }
    for (int i = 0; i < n_vocab; i++) c[i] = (cand){logits[i], i};
    qsort(c, (size_t)n_vocab, sizeof *c, cand_cmp);
    const float mx = c[0].v;
    float sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += expf(c[i].v - mx);
    for (int i = 0; i < k; i++) {
        ids[i] = c[i].id;
        probs[i] = expf(c[i].v - mx) / sum;
    }
    free(c);
}

void mu_token_probs(const float *logits, int n_vocab, int32_t id, int k, float *logprob, int32_t *top_ids,
                    float *top_probs, float *top_logprobs) {
    /* log-softmax in double: lse = max + log(sum exp(l - max)) */
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    if (logprob) *logprob = id >= 0 && id < n_vocab ? (float)(logits[id] - lse) : -INFINITY;
    if (k <= 0) return;
    if (k > n_vocab) k = n_vocab;
    int32_t ids_local[64];
    float probs_local[64];
    int32_t *ids = top_ids ? top_ids : k <= 64 ? ids_local : malloc((size_t)k * sizeof *ids);
    float *probs = top_probs ? top_probs : k <= 64 ? probs_local : malloc((size_t)k * sizeof *probs);
    if (ids && probs) {
        mu_top_probs(logits, n_vocab, k, ids, probs);
        if (top_logprobs)
            for (int i = 0; i < k; i++) top_logprobs[i] = (float)(logits[ids[i]] - lse);
    }
    if (ids != top_ids && ids != ids_local) free(ids);
    if (probs != top_probs && probs != probs_local) free(probs);
}
