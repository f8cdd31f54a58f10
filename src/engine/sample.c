/* sample.c: token sampling with llama.cpp's default chain and defaults:
 * top-k -> top-p -> min-p -> temperature -> draw (greedy when temp <= 0).
 * Owns: the candidate buffer and the seeded generator (xoshiro256**, seeded
 * by splitmix64). Random draws do not reproduce llama.cpp's std::mt19937
 * stream: seeded sampling is repeatable within muser, not across engines. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser.h"

/* A candidate: logit and token id. */
typedef struct {
    float v;
    int32_t id;
} cand;

struct mu_sampler {
    mu_sample_params p;
    int n_vocab;
    uint64_t rng[4];
    int32_t *ids;
    float *vals;
    cand *sorted; /* [n_vocab]: scratch for the full sort when top-k is off */
};

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
                              .dry_penalty_last_n = -1,
                              .mirostat_tau = 5,
                              .mirostat_eta = 0.1f};
}

/* True when p asks for a stage of llama.cpp's chain this sampler lacks. */
static bool wants_unbuilt(const mu_sample_params *p) {
    bool pen = p->penalty_last_n != 0 &&
               ((p->penalty_repeat != 0 && p->penalty_repeat != 1) || p->penalty_freq != 0 || p->penalty_present != 0);
    return pen || (p->typical_p > 0 && p->typical_p < 1) || p->top_n_sigma > 0 || p->xtc_probability > 0 ||
           p->dynatemp_range > 0 || p->dry_multiplier > 0 || p->mirostat != 0 || p->n_logit_bias > 0;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

int mu_sampler_new(const mu_sample_params *p, int n_vocab, mu_sampler **out, mu_err *err) {
    if (n_vocab <= 0) return mu_fail(err, MU_E_ARG, "sample: bad vocabulary size %d", n_vocab);
    if (!(p->temp >= 0 || p->temp < 0) || !(p->top_p >= 0) || !(p->min_p >= 0) || p->min_p > 1)
        return mu_fail(err, MU_E_ARG, "sample: parameters out of range");
    if (wants_unbuilt(p))
        return mu_fail(err, MU_E_UNSUPPORTED,
                       "sample: penalties, DRY, typical-p, top-n-sigma, XTC, dynamic temperature, mirostat and "
                       "logit bias are not implemented yet");
    mu_sampler *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "sample: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->ids = malloc((size_t)n_vocab * sizeof *s->ids);
    s->vals = malloc((size_t)n_vocab * sizeof *s->vals);
    s->sorted = malloc((size_t)n_vocab * sizeof *s->sorted);
    if (!s->ids || !s->vals || !s->sorted) {
        mu_sampler_free(s);
        return mu_fail(err, MU_E_NOMEM, "sample: out of memory");
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&x);
    *out = s;
    return 0;
}

void mu_sampler_accept(mu_sampler *s, int32_t tok) {
    (void)s;
    (void)tok;
}

void mu_sampler_free(mu_sampler *s) {
    if (!s) return;
    free(s->ids);
    free(s->vals);
    free(s->sorted);
    free(s);
}

static int argmax(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

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

int32_t mu_sampler_sample(mu_sampler *s, const float *logits) {
    const mu_sample_params *p = &s->p;
    int n = s->n_vocab;
    if (p->temp <= 0) return argmax(logits, n);
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    k = select_top(logits, n, k, s->ids, s->vals, s->sorted);
    /* top-p over the softmax of the remaining candidates */
    double sum = 0;
    float mx = s->vals[0];
    for (int i = 0; i < k; i++) sum += exp((double)s->vals[i] - mx);
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < k; i++) {
            cum += exp((double)s->vals[i] - mx) / sum;
            if (cum >= p->top_p) {
                k = i + 1;
                break;
            }
        }
    }
    /* min-p: keep logits >= max + log(min_p) */
    if (p->min_p > 0) {
        float thr = mx + logf(p->min_p);
        int m = 1;
        while (m < k && s->vals[m] >= thr) m++;
        k = m;
    }
    /* temperature, then draw */
    double tot = 0;
    for (int i = 0; i < k; i++) tot += exp(((double)s->vals[i] - mx) / p->temp);
    double r = (double)(next_u64(s->rng) >> 11) * 0x1.0p-53 * tot, run = 0;
    for (int i = 0; i < k; i++) {
        run += exp(((double)s->vals[i] - mx) / p->temp);
        if (r < run) return s->ids[i];
    }
    return s->ids[k - 1];
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
