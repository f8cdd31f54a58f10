/* spec_cost.h: how many drafted tokens pay (speculative decoding's cost
 * model, docs/speculative.md "The draft length that pays", "Busy batches").
 * Owns: the acceptance estimate from a job's per-position counts, the draft
 * length it allows at a threshold, and the busy-batch threshold.
 * Does not own: drafting or verification (sched.c), the counts themselves
 * (each job's). Pure functions of counts: no timing. */
#ifndef MU_GEN_SPEC_COST_H
#define MU_GEN_SPEC_COST_H

#include <stdbool.h>

/* A drafted token's verification row, in decode steps of one row on the
 * CPU (0.2 to 0.5 on the bundled model, bench/verifybench.c): a draft
 * position pays alone when accepted (with every draft before it) at least
 * this often. 0.4 beat 0.5 on every prompt and length of bench/spec-ngram
 * on the bundled model (0.3 did as well as 0.4). */
#define MU_SPEC_P_MIN 0.4
/* The same on a GPU target (CUDA): a verification block there costs about
 * a decode step plus 0.03-0.16 a drafted token (bench/verifybench.c on an
 * H100, the bundled model, 1 to 15 drafts: 1.03-2.34 steps, about 0.1 a
 * draft over those lengths; bench/results/cuda-2026-12-05c call 1). */
#define MU_SPEC_P_MIN_DEVICE 0.1

/* The longest draft length, at most k, whose last token is accepted with
 * estimated probability >= p_min: the acceptance rate of each position
 * after an accepted prefix (pos_acc[n] of pos_n[n] checks), multiplied
 * along; a position's rate starts from the one before it (the first from
 * 0.75) as a prior worth two observations, so a new job drafts 3 tokens
 * at MU_SPEC_P_MIN. */
int mu_spec_draft_len(const int *pos_acc, const int *pos_n, int k, double p_min);
/* The expected accepted drafts of a k-token draft by the same rates. */
double mu_spec_draft_expect(const int *pos_acc, const int *pos_n, int k);
/* The draft length by the rates of a block with a fixed cost, or 0 when
 * drafting does not pay: the length draft_len allows at cost_draft (a
 * draft's own rows, in decode steps), kept when its expected accepted
 * drafts also cover cost_fixed (a DFlash pass; a verification block's own
 * forward in a busy batch, mu_spec_solo_fixed) and the drafts' cost, else
 * 0. Every draft position up to that length is accepted (with the drafts
 * before it) at least cost_draft often, so each adds at least what it
 * costs: no shorter draft pays when that length does not. */
int mu_spec_block_len(const int *pos_acc, const int *pos_n, int k, double cost_fixed, double cost_draft);
/* What a verification block costs a forward with other jobs' rows besides
 * its rows, in decode steps: it is a solo item (mu_batch_item.solo). On the
 * CPU its rows round as one-row matmuls, a pass over the weights of their
 * own that shares no work with the batched rows' gemm, so it adds the fixed
 * work of a forward, 1 - p_min (on the bundled model, one thread: 3 plain
 * rows and a solo block of 1 + 3 took 5.17 ms, the 3 rows 2.34 and the
 * block alone 2.81; docs/speculative.md "Busy batches"). On a GPU (device
 * true) they are tokens past n_batch of the batch's own launches: 0. */
double mu_spec_solo_fixed(double p_min, bool device);
/* Tokens per cost unit of a forward of `rows` plain rows (one token each),
 * the cost a decode step of one row, where a row costs p_min: a forward
 * costs about (1 - p_min) + p_min per row (its fixed work, then each row's
 * dot products; a drafted row costs about what another job's decode row
 * does). 1 for one row; at MU_SPEC_P_MIN 1.82 for 4, towards 1 / p_min. A
 * draft in that forward pays when its expected tokens per cost beat this:
 * each position at the threshold of a job alone times this rate (0.73 with
 * 4 rows), and the draft's expected tokens the rate times its cost with the
 * solo block's fixed part (mu_spec_solo_fixed). */
double mu_spec_batch_rate(int rows, double p_min);

#endif
