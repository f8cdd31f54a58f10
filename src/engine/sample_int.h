/* sample_int.h: the sampler's state, shared by sample.c (parameters,
 * history and the history stages: logit bias, penalties, DRY) and
 * sample_chain.c (the candidate stages, llama.cpp's generator, the draw).
 * Internal to the engine (and its unit tests). */
#ifndef MU_ENGINE_SAMPLE_INT_H
#define MU_ENGINE_SAMPLE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../include/muser.h"

/* std::mt19937 */
typedef struct {
    uint32_t mt[624];
    int i;
} mu_mt19937;

void mu_mt_seed(mu_mt19937 *m, uint32_t seed);
uint32_t mu_mt_next(mu_mt19937 *m);
/* std::uniform_real_distribution<double>(0, 1) and <float>(0, 1) as
 * libstdc++ draws them (generate_canonical: two words for a double, one
 * for a float). */
double mu_mt_double(mu_mt19937 *m);
float mu_mt_float(mu_mt19937 *m);

/* The scans of mu_logits_argmax and mu_logits_finite: the plain loops
 * (the contract) and their AVX2 forms (logits_avx2.c, x86-64 CPUs with
 * AVX2; sample_chain.c picks). argmax: the first index i with no l[j] >
 * l[i] before the first larger value, exactly the loop `best = 0; for i:
 * if (l[i] > l[best]) best = i` (a NaN in l[0] keeps 0; others never win). */
int mu_logits_argmax_ref(const float *l, int n);
bool mu_logits_finite_ref(const float *l, int n);
int mu_logits_argmax_avx2(const float *l, int n);
bool mu_logits_finite_avx2(const float *l, int n);
/* greedy's pick over n logits (the best of the scans the CPU has) */
int mu_logits_argmax(const float *l, int n);
/* next_above: the first index >= i with l[index] > thr, or n (top-k's
 * skip over the logits that cannot enter its list) */
int mu_logits_next_above_ref(const float *l, int n, int i, float thr);
int mu_logits_next_above_avx2(const float *l, int n, int i, float thr);
int mu_logits_next_above(const float *l, int n, int i, float thr);

/* One candidate, as llama_token_data. */
typedef struct {
    int32_t id;
    float logit;
    float p;
} mu_cand;

/* One DRY sequence breaker: head token, then tail tokens. */
typedef struct {
    int32_t head;
    int32_t off, len; /* tail = brk_tail[off .. off+len) */
} mu_dry_brk;

struct mu_sampler {
    mu_sample_params p; /* logit_bias and dry_breakers cleared */
    int n_vocab;
    mu_logit_bias *bias; /* ids inside the vocabulary only */
    int n_bias;
    bool pen_on, dry_on, adjusts; /* adjusts: some history stage is on */
    /* accepted tokens, oldest first (kept only when pen_on or dry_on) */
    int32_t *hist;
    size_t n_hist, cap_hist;
    int32_t *cnt; /* [n_vocab] occurrences in the penalty window */
    /* DRY: breakers sorted by head */
    mu_dry_brk *brk;
    int n_brk;
    int32_t *brk_tail;
    int *dry_rep;          /* [cap_dry] repeat counts */
    size_t cap_dry;
    int32_t *dry_max;      /* [n_vocab] longest repeat a token extends, + 1 (0: none) */
    int32_t *dry_touched;  /* [cap_dry] tokens with dry_max set */
    /* scratch */
    float *adj;    /* [n_vocab] adjusted logits */
    mu_cand *cand; /* [n_vocab] */
    mu_cand *tmp;  /* [n_vocab] */
    size_t *idx;   /* [2 * n_vocab] */
    float *score;  /* [n_vocab] */
    mu_mt19937 rng_dist, rng_xtc;
    float mu; /* mirostat */
    /* the last draw's final candidates (into cand/tmp; valid until the next
     * draw), or post_only >= 0: greedy's argmax, the one candidate */
    const mu_cand *post;
    size_t n_post;
    bool post_sorted;
    int32_t post_only;
};

/* Breakers given as token sequences (head first), replacing any others:
 * what llama.cpp's DRY tests use. 0 or MU_E_NOMEM. */
int mu_sampler_set_breaker_tokens(mu_sampler *s, const int32_t *const *seqs, const int *lens, int n, mu_err *err);

#endif
