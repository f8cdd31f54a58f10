/* ngram.c: the n-gram drafter (ngram.h).
 * Owns: the history, the n-gram table and the drafting rule.
 * Does not: decide whether a draft is used or right (sched.c verifies).
 * Design: see ngram.h. The counting and thresholds are llama.cpp's
 * context cache (common/ngram-cache: n-grams of 1..4 tokens, lax
 * thresholds); its first-found tie among equally frequent followers is an
 * unordered_map's iteration order, so muser breaks ties by recency, the
 * choice prompt lookup makes. */
#include "ngram.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t tok[MU_NGRAM_MAX];
    int32_t n;    /* 0: empty slot */
    int32_t head; /* first follower record, -1 for none */
} key;

typedef struct {
    int32_t tok, count, last, next;
} follower;

struct mu_ngram {
    int32_t *hist;
    int n_hist, cap_hist;
    key *keys;
    int n_keys, cap_keys; /* cap a power of two, at most half full */
    follower *fol;
    int n_fol, cap_fol;
    bool full;            /* out of memory: stop learning */
};

static const int MIN_SAMPLES[MU_NGRAM_MAX] = {2, 2, 1, 1};
static const int MIN_PERCENT[MU_NGRAM_MAX] = {66, 50, 50, 50};

mu_ngram *mu_ngram_new(void) {
    mu_ngram *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->cap_keys = 1024;
    d->keys = calloc((size_t)d->cap_keys, sizeof *d->keys);
    if (!d->keys) {
        free(d);
        return NULL;
    }
    return d;
}

void mu_ngram_free(mu_ngram *d) {
    if (!d) return;
    free(d->hist);
    free(d->keys);
    free(d->fol);
    free(d);
}

void mu_ngram_reset(mu_ngram *d) {
    d->n_hist = 0;
    d->n_fol = 0;
    d->n_keys = 0;
    d->full = false;
    memset(d->keys, 0, (size_t)d->cap_keys * sizeof *d->keys);
}

int mu_ngram_len(const mu_ngram *d) { return d->n_hist; }

static uint32_t hash(const int32_t *t, int n) {
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)t[i]) * 0x100000001B3ull + 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 29);
}

/* The slot of n-gram t[0..n) in the table: its key, or the empty slot
 * where it would go. */
static key *lookup(key *keys, int cap, const int32_t *t, int n) {
    uint32_t i = hash(t, n) & (uint32_t)(cap - 1);
    for (;;) {
        key *k = &keys[i];
        if (k->n == 0 || (k->n == n && !memcmp(k->tok, t, (size_t)n * sizeof *t))) return k;
        i = (i + 1) & (uint32_t)(cap - 1);
    }
}

static bool grow_keys(mu_ngram *d) {
    int cap = d->cap_keys * 2;
    key *nk = calloc((size_t)cap, sizeof *nk);
    if (!nk) return false;
    for (int i = 0; i < d->cap_keys; i++)
        if (d->keys[i].n) *lookup(nk, cap, d->keys[i].tok, d->keys[i].n) = d->keys[i];
    free(d->keys);
    d->keys = nk;
    d->cap_keys = cap;
    return true;
}

/* Counts tok as a follower of the n-gram t[0..n) seen at history index at. */
static void count(mu_ngram *d, const int32_t *t, int n, int32_t tok, int at) {
    if (2 * (d->n_keys + 1) > d->cap_keys && !grow_keys(d)) {
        d->full = true;
        return;
    }
    key *k = lookup(d->keys, d->cap_keys, t, n);
    if (k->n == 0) {
        memcpy(k->tok, t, (size_t)n * sizeof *t);
        k->n = n;
        k->head = -1;
        d->n_keys++;
    }
    for (int f = k->head; f >= 0; f = d->fol[f].next)
        if (d->fol[f].tok == tok) {
            d->fol[f].count++;
            d->fol[f].last = at;
            return;
        }
    if (d->n_fol == d->cap_fol) {
        int cap = d->cap_fol ? d->cap_fol * 2 : 1024;
        follower *nf = realloc(d->fol, (size_t)cap * sizeof *nf);
        if (!nf) {
            d->full = true;
            return;
        }
        d->fol = nf;
        d->cap_fol = cap;
    }
    d->fol[d->n_fol] = (follower){tok, 1, at, k->head};
    k->head = d->n_fol++;
}

void mu_ngram_push(mu_ngram *d, int32_t tok) {
    if (d->full) return;
    if (d->n_hist == d->cap_hist) {
        int cap = d->cap_hist ? d->cap_hist * 2 : 1024;
        int32_t *h = realloc(d->hist, (size_t)cap * sizeof *h);
        if (!h) {
            d->full = true;
            return;
        }
        d->hist = h;
        d->cap_hist = cap;
    }
    const int i = d->n_hist;
    for (int n = 1; n <= MU_NGRAM_MAX && n <= i; n++) count(d, d->hist + i - n, n, tok, i);
    if (d->full) return; /* the history stays consistent with the counts */
    d->hist[d->n_hist++] = tok;
}

int mu_ngram_draft(const mu_ngram *d, int n_max, int32_t *out) {
    int n_out = 0;
    if (d->n_hist < 2) return 0; /* llama.cpp drafts from 2 tokens on */
    while (n_out < n_max) {
        /* the last n tokens of history + draft */
        int32_t tail[MU_NGRAM_MAX];
        int32_t pick = -1;
        for (int n = MU_NGRAM_MAX; n >= 1 && pick < 0; n--) {
            if (d->n_hist + n_out < n) continue;
            for (int i = 0; i < n; i++) {
                int at = d->n_hist + n_out - n + i;
                tail[i] = at < d->n_hist ? d->hist[at] : out[at - d->n_hist];
            }
            const key *k = lookup(d->keys, d->cap_keys, tail, n);
            if (k->n == 0) continue;
            int sum = 0, best = -1;
            for (int f = k->head; f >= 0; f = d->fol[f].next) {
                const follower *r = &d->fol[f];
                sum += r->count;
                if (best < 0 || r->count > d->fol[best].count ||
                    (r->count == d->fol[best].count && r->last > d->fol[best].last))
                    best = f;
            }
            if (best < 0 || sum < MIN_SAMPLES[n - 1]) continue;
            if (100 * d->fol[best].count < MIN_PERCENT[n - 1] * sum) continue;
            pick = d->fol[best].tok;
        }
        if (pick < 0) break;
        out[n_out++] = pick;
    }
    return n_out;
}
