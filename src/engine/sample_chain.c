/* sample_chain.c: the candidate stages of llama.cpp's sampler chain and
 * its draw, step for step as llama.cpp's llama-sampler.cpp does them: top-n-sigma,
 * top-k, typical-p, top-p, min-p, XTC, temperature (dynamic or not), the
 * draw, and mirostat 1 and 2. Also llama.cpp's generator: std::mt19937 and
 * libstdc++'s uniform reals and discrete distribution.
 * Owns: the candidate array (id, logit, p; size; sorted flag) and the
 * order of its entries, which decides which token a draw lands on: each
 * stage leaves it as llama.cpp's leaves it (index order until something
 * sorts, descending logit after). Ties between equal logits are ordered by
 * id here; llama.cpp's std::sort leaves their order unspecified.
 * Fast path: with top-k on and no top-n-sigma the full vocabulary is never
 * copied: top-k selects straight from the logits (what llama.cpp's partial
 * sort yields); greedy with no stage that can drop the best token is an
 * argmax. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sample_int.h"

/* ---- std::mt19937 and libstdc++'s distributions ------------------------ */

void mu_mt_seed(mu_mt19937 *m, uint32_t seed) {
    m->mt[0] = seed;
    for (uint32_t i = 1; i < 624; i++) m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) + i;
    m->i = 624;
}

uint32_t mu_mt_next(mu_mt19937 *m) {
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->mt[k] & 0x80000000u) | (m->mt[(k + 1) % 624] & 0x7fffffffu);
            m->mt[k] = m->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        m->i = 0;
    }
    uint32_t y = m->mt[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double mu_mt_double(mu_mt19937 *m) {
    double sum = (double)mu_mt_next(m);
    sum += (double)mu_mt_next(m) * 4294967296.0;
    double r = sum / 18446744073709551616.0;
    return r >= 1.0 ? nextafter(1.0, 0.0) : r;
}

float mu_mt_float(mu_mt19937 *m) {
    float r = (float)mu_mt_next(m) / 4294967296.0f;
    return r >= 1.0f ? nextafterf(1.0f, 0.0f) : r;
}

/* ---- the candidate array ----------------------------------------------- */

typedef struct {
    mu_cand *data;
    size_t size;
    bool sorted;
} arr;

/* descending logit; ties by id */
static int cand_desc(const void *a, const void *b) {
    const mu_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool before(const mu_cand *x, const mu_cand *y) {
    return x->logit > y->logit || (x->logit == y->logit && x->id < y->id);
}

/* The k best of d[0..n) into out[0..k), descending (d is not changed). */
static void partial_sort(const mu_cand *d, size_t n, size_t k, mu_cand *out) {
    if (k == 0) return;
    if (k > 256) {
        memcpy(out, d, n * sizeof *d);
        qsort(out, n, sizeof *out, cand_desc);
        return;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m == k && !before(&d[i], &out[k - 1])) continue;
        size_t j = m < k ? m++ : k - 1;
        while (j > 0 && before(&d[i], &out[j - 1])) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = d[i];
    }
}

static void partial_sort_inplace(mu_sampler *s, arr *a, size_t k) {
    partial_sort(a->data, a->size, k, s->tmp);
    memcpy(a->data, s->tmp, k * sizeof *a->data);
    a->size = k;
    a->sorted = true;
}

/* The whole vocabulary in index order. */
static void build_full(mu_sampler *s, const float *l, arr *a) {
    for (int i = 0; i < s->n_vocab; i++) s->cand[i] = (mu_cand){i, l[i], 0};
    *a = (arr){s->cand, (size_t)s->n_vocab, false};
}

/* llama_sampler_softmax_impl */
static void softmax(mu_sampler *s, arr *a, bool do_sort) {
    if (do_sort && !a->sorted) partial_sort_inplace(s, a, a->size);
    float mx = a->data[0].logit;
    if (!a->sorted)
        for (size_t i = 1; i < a->size; i++) mx = mx < a->data[i].logit ? a->data[i].logit : mx;
    float cum = 0;
    for (size_t i = 0; i < a->size; i++) {
        float p = expf(a->data[i].logit - mx);
        a->data[i].p = p;
        cum += p;
    }
    for (size_t i = 0; i < a->size; i++) a->data[i].p /= cum;
}

/* llama_sampler_temp_impl */
static void temp_impl(arr *a, float temp) {
    if (a->size == 0) return;
    if (temp <= 0) {
        size_t mi = 0;
        float ml = a->data[0].logit;
        for (size_t i = 1; i < a->size; i++) {
            if (a->data[i].logit > ml) {
                a->data[mi].logit = -INFINITY;
                mi = i;
                ml = a->data[i].logit;
            } else {
                a->data[i].logit = -INFINITY;
            }
        }
        return;
    }
    for (size_t i = 0; i < a->size; i++) a->data[i].logit /= temp;
}

/* ---- stages ------------------------------------------------------------ */

static void top_n_sigma(arr *a, float n) {
    if (n <= 0 || a->size <= 1) return;
    float mx = a->data[0].logit, sum = 0;
    size_t valid = 0;
    for (size_t i = 0; i < a->size; i++)
        if (a->data[i].logit != -INFINITY) {
            mx = mx < a->data[i].logit ? a->data[i].logit : mx;
            sum += a->data[i].logit;
            valid++;
        }
    float mean = valid > 0 ? sum / (float)valid : 0;
    float acc = 0;
    for (size_t i = 0; i < a->size; i++)
        if (a->data[i].logit != -INFINITY) {
            double d = (double)(a->data[i].logit - mean);
            acc = (float)((double)acc + d * d);
        }
    float sd = valid > 0 ? sqrtf(acc / (float)valid) : 0;
    float thr = mx - n * sd;
    for (size_t i = 0; i < a->size; i++)
        if (a->data[i].logit < thr) a->data[i].logit = -INFINITY;
}

static void top_k(mu_sampler *s, arr *a, int k) {
    if (k <= 0) return;
    size_t kk = (size_t)k < a->size ? (size_t)k : a->size;
    if (!a->sorted) partial_sort_inplace(s, a, kk);
    a->size = kk;
}

static void typical(mu_sampler *s, arr *a, float p, size_t min_keep) {
    if (p >= 1.0f) return;
    softmax(s, a, true);
    float ent = 0;
    for (size_t i = 0; i < a->size; i++) ent += -a->data[i].p * logf(a->data[i].p);
    for (size_t i = 0; i < a->size; i++) {
        s->score[i] = fabsf(-logf(a->data[i].p) - ent);
        s->idx[i] = i;
    }
    /* indices by shifted score, ascending (ties: lower index first) */
    for (size_t w = 1; w < a->size; w *= 2) { /* bottom-up merge sort (stable) */
        size_t *src = s->idx, *dst = s->idx + s->n_vocab;
        for (size_t lo = 0; lo < a->size; lo += 2 * w) {
            size_t mid = lo + w < a->size ? lo + w : a->size, hi = lo + 2 * w < a->size ? lo + 2 * w : a->size;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) dst[o++] = s->score[src[j]] < s->score[src[i]] ? src[j++] : src[i++];
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
        }
        memcpy(s->idx, dst, a->size * sizeof *s->idx);
    }
    float cum = 0;
    size_t last = a->size;
    for (size_t i = 0; i < a->size; i++) {
        cum += a->data[s->idx[i]].p;
        if (cum > p && (min_keep == 0 || i >= min_keep - 1)) {
            last = i + 1;
            break;
        }
    }
    for (size_t i = 0; i < last; i++) s->tmp[i] = a->data[s->idx[i]];
    memcpy(a->data, s->tmp, last * sizeof *a->data);
    a->size = last;
    a->sorted = false;
}

static void top_p(mu_sampler *s, arr *a, float p, size_t min_keep) {
    if (p >= 1.0f) return;
    softmax(s, a, false);
    size_t k = a->size;
    const mu_cand *pd = a->data;
    if (!a->sorted && a->size > 1024) {
        k = 256;
        partial_sort(a->data, a->size, k, s->tmp);
        pd = s->tmp;
    } else if (!a->sorted) {
        partial_sort_inplace(s, a, k);
    }
    float cum = 0;
    size_t last = a->size;
    for (size_t i = 0; i < a->size; i++) {
        cum += pd[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            last = i + 1;
            break;
        }
        if (!a->sorted && i == k - 1) {
            k = a->size;
            partial_sort(a->data, a->size, k, s->tmp);
            pd = s->tmp;
        }
    }
    if (!a->sorted) {
        memcpy(a->data, s->tmp, last * sizeof *a->data);
        a->sorted = true;
    }
    a->size = last;
}

static void min_p(mu_sampler *s, arr *a, float p, size_t min_keep) {
    if (p <= 0 || !a->size) return;
    bool applied = false;
    if (!a->sorted) {
        float mx = -FLT_MAX;
        for (size_t i = 0; i < a->size; i++) mx = mx < a->data[i].logit ? a->data[i].logit : mx;
        const float lo = mx + logf(p);
        size_t m = 0;
        for (size_t i = 0; i < a->size; i++)
            if (a->data[i].logit >= lo) s->tmp[m++] = a->data[i];
        if (m > 0 && m >= min_keep) {
            memcpy(a->data, s->tmp, m * sizeof *a->data);
            a->size = m;
            applied = true;
        }
    }
    if (!applied) {
        if (!a->sorted) partial_sort_inplace(s, a, a->size);
        const float lo = a->data[0].logit + logf(p);
        size_t i = 1;
        for (; i < a->size; i++)
            if (a->data[i].logit < lo && i >= min_keep) break;
        a->size = i;
    }
}

static void xtc(mu_sampler *s, arr *a) {
    const mu_sample_params *p = &s->p;
    if (p->xtc_probability <= 0 || p->xtc_threshold > 0.5f || a->size < 2) return;
    float chance = mu_mt_float(&s->rng_xtc);
    if (chance > p->xtc_probability) return;
    softmax(s, a, true);
    size_t last = 0;
    for (size_t i = 0; i < a->size; i++) {
        if (a->data[i].p >= p->xtc_threshold) last = i;
        else break;
    }
    if (a->size - last >= (size_t)p->min_keep && last > 0) {
        a->data += last;
        a->size -= last;
    }
}

static void temp_ext(mu_sampler *s, arr *a) {
    const mu_sample_params *p = &s->p;
    if (p->dynatemp_range > 0) {
        const float tmin = p->temp - p->dynatemp_range > 0 ? p->temp - p->dynatemp_range : 0;
        const float tmax = p->temp + p->dynatemp_range;
        if (a->size <= 1) return;
        float max_ent = -logf(1.0f / (float)a->size);
        softmax(s, a, true);
        float ent = 0;
        for (size_t i = 0; i < a->size; i++) {
            float pr = a->data[i].p;
            if (pr > 0.0f) ent -= pr * logf(pr);
        }
        float norm = ent / max_ent;
        float t = tmin + (tmax - tmin) * powf(norm, p->dynatemp_exponent);
        temp_impl(a, t);
    } else {
        temp_impl(a, p->temp);
    }
}

/* llama_sampler_dist_apply */
static int32_t dist(mu_sampler *s, arr *a) {
    if (a->size == 0) return -1;
    if (a->size == 1) {
        (void)mu_mt_double(&s->rng_dist);
        a->data[0].p = 1.0f;
        return a->data[0].id;
    }
    float mx = a->data[0].logit;
    if (!a->sorted)
        for (size_t i = 1; i < a->size; i++) mx = mx < a->data[i].logit ? a->data[i].logit : mx;
    double sum = 0;
    for (size_t i = 0; i < a->size; i++) {
        float p = expf(a->data[i].logit - mx);
        a->data[i].p = p;
        sum += p;
    }
    const double tgt = sum * mu_mt_double(&s->rng_dist);
    double run = 0;
    size_t sel = a->size - 1;
    bool found = false;
    for (size_t i = 0; i < a->size; i++) {
        if (!found) {
            run += a->data[i].p;
            if (run >= tgt) {
                sel = i;
                found = true;
            }
        }
        a->data[i].p /= sum; /* normalized in the same pass, as llama.cpp (post-sampling probabilities) */
    }
    return a->data[sel].id;
}

/* llama_sample_dist: std::discrete_distribution over the probabilities. */
static size_t discrete(mu_sampler *s, const arr *a) {
    if (a->size < 2) return 0;
    double sum = 0;
    for (size_t i = 0; i < a->size; i++) sum += (double)a->data[i].p;
    const double u = mu_mt_double(&s->rng_dist);
    double cp = 0;
    for (size_t i = 0; i + 1 < a->size; i++) {
        cp += (double)a->data[i].p / sum;
        if (!(cp < u)) return i;
    }
    return a->size - 1; /* the last cumulative probability is 1 */
}

/* float -> int as x86's cvttss2si does it: out of range (or NaN) gives
 * INT_MIN, what llama.cpp's int(k) yields on x86-64 */
static int f2i(float k) { return k >= -2147483648.0f && k < 2147483648.0f ? (int)k : INT_MIN; }

static int32_t mirostat(mu_sampler *s, arr *a) {
    const mu_sample_params *p = &s->p;
    softmax(s, a, true);
    size_t idx;
    if (p->mirostat == 1) {
        const size_t m = 100;
        float sum_tb = 0, sum_tt = 0;
        for (size_t i = 0; i < m - 1 && i < a->size - 1; i++) {
            float t = logf((float)(i + 2) / (float)(i + 1));
            float b = logf(a->data[i].p / a->data[i + 1].p);
            sum_tb += t * b;
            sum_tt += t * t;
        }
        float s_hat = sum_tb / sum_tt, eps = s_hat - 1;
        float k = powf((eps * powf(2, s->mu)) / (1 - powf((float)s->n_vocab, -eps)), 1 / s_hat);
        int ik = f2i(k);
        top_k(s, a, ik > 1 ? ik : 1);
    } else {
        size_t n = 0;
        while (n < a->size && !(-log2f(a->data[n].p) > s->mu)) n++;
        a->size = n ? n : 1;
    }
    softmax(s, a, true);
    idx = discrete(s, a);
    float e = -log2f(a->data[idx].p) - p->mirostat_tau;
    s->mu = s->mu - p->mirostat_eta * e;
    return a->data[idx].id;
}

/* ---- the chain --------------------------------------------------------- */

int mu_logits_argmax_ref(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

bool mu_logits_finite_ref(const float *l, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(l[i])) return false;
    return true;
}

#if defined(__x86_64__)
/* the AVX2 scans on CPUs that have AVX2 (logits_avx2.c) */
static bool scan_avx2(void) {
    static atomic_int have = -1; /* samplers of several threads ask */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        h = __builtin_cpu_supports("avx2");
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
#endif

int mu_logits_argmax(const float *l, int n) {
#if defined(__x86_64__)
    if (scan_avx2()) return mu_logits_argmax_avx2(l, n);
#endif
    return mu_logits_argmax_ref(l, n);
}

bool mu_logits_finite(const float *l, int n) {
#if defined(__x86_64__)
    if (scan_avx2()) return mu_logits_finite_avx2(l, n);
#endif
    return mu_logits_finite_ref(l, n);
}

int mu_logits_next_above_ref(const float *l, int n, int i, float thr) {
    while (i < n && !(l[i] > thr)) i++;
    return i;
}

int mu_logits_next_above(const float *l, int n, int i, float thr) {
#if defined(__x86_64__)
    if (scan_avx2()) return mu_logits_next_above_avx2(l, n, i, thr);
#endif
    return mu_logits_next_above_ref(l, n, i, thr);
}

/* top-k straight from the logits: the k best, descending */
static void select_top(mu_sampler *s, const float *l, size_t k, arr *a) {
    if (k > 256) {
        build_full(s, l, a);
        partial_sort_inplace(s, a, k);
        return;
    }
    size_t m = 0;
    mu_cand *out = s->cand;
    for (int i = 0; i < s->n_vocab; i++) {
        if (m == k && (i = mu_logits_next_above(l, s->n_vocab, i, out[k - 1].logit)) == s->n_vocab) break;
        size_t j = m < k ? m++ : k - 1;
        while (j > 0 && l[i] > out[j - 1].logit) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = (mu_cand){i, l[i], 0};
    }
    *a = (arr){out, m, true};
}

static int32_t keep_post(mu_sampler *s, const arr *a, int32_t id) {
    s->post = a->data;
    s->n_post = a->size;
    s->post_sorted = a->sorted;
    s->post_only = -1;
    return id;
}

/* Greedy with nothing after it that can drop the best token: the chain is
 * the argmax (mu_sampler_sample_adjusted's first case). */
static bool plain_greedy(const mu_sample_params *p) {
    const bool can_drop = (p->typical_p > 0 && p->typical_p < 1) || p->xtc_probability > 0 || p->dynatemp_range > 0;
    return !p->mirostat && p->temp <= 0 && !can_drop;
}

int32_t mu_sampler_sample_adjusted(mu_sampler *s, const float *l) {
    const mu_sample_params *p = &s->p;
    const size_t min_keep = (size_t)p->min_keep;
    arr a;
    if (p->mirostat) {
        build_full(s, l, &a);
        temp_impl(&a, p->temp);
        int32_t id = mirostat(s, &a);
        return keep_post(s, &a, id);
    }
    /* greedy, and nothing after it can drop the best token */
    if (plain_greedy(p)) {
        s->n_post = 0;
        s->post_only = mu_logits_argmax(l, s->n_vocab); /* llama.cpp: the others end at probability 0 */
        return s->post_only;
    }
    bool built = false;
    if (p->top_n_sigma > 0) {
        build_full(s, l, &a);
        built = true;
        top_n_sigma(&a, p->top_n_sigma);
    }
    if (p->top_k > 0) {
        size_t k = (size_t)p->top_k < (size_t)s->n_vocab ? (size_t)p->top_k : (size_t)s->n_vocab;
        if (built) top_k(s, &a, p->top_k);
        else select_top(s, l, k, &a);
    } else if (!built) {
        build_full(s, l, &a);
    }
    if (p->typical_p > 0) typical(s, &a, p->typical_p, min_keep);
    top_p(s, &a, p->top_p, min_keep);
    min_p(s, &a, p->min_p, min_keep);
    xtc(s, &a);
    temp_ext(s, &a);
    int32_t id = dist(s, &a);
    return keep_post(s, &a, id);
}

int mu_sampler_final_probs(const mu_sampler *s, int32_t id, int k, int32_t *ids, float *probs, float *p_id) {
    *p_id = 0;
    if (s->post_only >= 0 || !s->post) {
        if (s->post_only < 0) return 0;
        if (id == s->post_only) *p_id = 1;
        if (k < 1) return 0;
        ids[0] = s->post_only;
        probs[0] = 1;
        return 1;
    }
    for (size_t i = 0; i < s->n_post; i++)
        if (s->post[i].id == id) {
            *p_id = s->post[i].p;
            break;
        }
    /* llama.cpp sorts the array by probability, descending, unless it is
     * sorted already (then by logit: the same order); zeros are left out */
    int m = 0;
    for (size_t i = 0; i < s->n_post && k > 0; i++) {
        float v = s->post[i].p;
        if (v == 0.0f) {
            if (s->post_sorted) break;
            continue;
        }
        if (s->post_sorted) {
            if (m == k) break;
            ids[m] = s->post[i].id;
            probs[m++] = v;
            continue;
        }
        if (m == k && !(v > probs[k - 1])) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && probs[j - 1] < v) {
            probs[j] = probs[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        probs[j] = v;
        ids[j] = s->post[i].id;
    }
    return m;
}

int32_t mu_sampler_sample_best(mu_sampler *s, const float *logits, int32_t best) {
    if (best < 0 || s->adjusts || !plain_greedy(&s->p)) return mu_sampler_sample(s, logits);
    MU_ASSERT(best < s->n_vocab);
    s->n_post = 0;
    s->post_only = best;
    return best;
}

int32_t mu_sampler_sample(mu_sampler *s, const float *logits) {
    if (!s->adjusts) return mu_sampler_sample_adjusted(s, logits);
    memcpy(s->adj, logits, (size_t)s->n_vocab * sizeof *s->adj);
    mu_sampler_adjust(s, s->adj);
    return mu_sampler_sample_adjusted(s, s->adj);
}
