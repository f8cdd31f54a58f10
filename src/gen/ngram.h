/* ngram.h: the n-gram drafter of speculative decoding (--spec ngram).
 * Owns: one sequence's token history and the counts of which token
 * followed each 1- to 4-gram of it (llama.cpp's context n-gram cache, as
 * its `ngram-cache` speculative type builds from the prompt and the
 * output), and drafting from those counts.
 * Does not own: verification (sched.c), or llama.cpp's static and dynamic
 * caches loaded from files (muser has no such files).
 * Design: an open-addressing table of n-grams, each with a short list of
 * (follower, count, last seen) records in one pool; pushing a token is O(4),
 * drafting O(4) lookups per drafted token. Memory grows by doubling; when it
 * cannot grow, the drafter stops learning (drafts stay valid, never wrong
 * by construction: the target verifies them). */
#ifndef MU_GEN_NGRAM_H
#define MU_GEN_NGRAM_H

#include <stdint.h>

#define MU_NGRAM_MAX 4 /* llama.cpp's LLAMA_NGRAM_MAX; the smallest n-gram is 1 */

typedef struct mu_ngram mu_ngram;

/* NULL when out of memory. */
mu_ngram *mu_ngram_new(void);
void mu_ngram_free(mu_ngram *d);
/* Forgets every token. */
void mu_ngram_reset(mu_ngram *d);
/* Appends a token to the history and counts it as the follower of the 1-
 * to 4-grams that end before it. */
void mu_ngram_push(mu_ngram *d, int32_t tok);
int mu_ngram_len(const mu_ngram *d);
/* Drafts at most n_max tokens that continue the history: at each step the
 * longest n-gram (4 down to 1) ending at the history plus the tokens
 * drafted so far whose followers pass llama.cpp's lax thresholds (at least
 * 2, 2, 1, 1 observations for n = 1..4, and the most frequent follower at
 * least 66, 50, 50, 50 % of them) gives the most frequent follower (ties:
 * the one seen last). Stops at the first step without one. Returns the
 * number written to out. */
int mu_ngram_draft(const mu_ngram *d, int n_max, int32_t *out);

#endif
