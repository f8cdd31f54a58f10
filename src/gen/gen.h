/* gen.h: one sequence's way from logits to events.
 * Owns, for one job: picking the next token (forced, constrained or
 * sampled), its probabilities, detokenization, the Muse channel split
 * (reasoning / answer / tool calls), stop tokens, stop strings and the
 * length and context limits, and the events all of that produces.
 * Does not own: sessions, batching, threads or the events' delivery
 * (sched.c drives it from the engine thread and queues what it emits).
 * Design: pick() and accept() are separate so a step may accept several
 * tokens (speculative decoding in sched.c verifies a block and accepts a
 * prefix of it); every decision about a token is made here, once, on one
 * thread. */
#ifndef MU_GEN_GEN_H
#define MU_GEN_GEN_H

#include "../../include/muser_gen.h"

typedef struct mu_gen mu_gen;

/* Receives each event; pointers live until it returns. */
typedef void (*mu_gen_emit_fn)(void *user, const mu_gen_event *ev);

/* r's prompt only starts the sampler's history (penalties, DRY); max_new is the most tokens the job may generate
 * (its n_predict capped by the context), by_ctx whether the context is the
 * cap. The model (and r->schema, referenced) must outlive g. */
int mu_gen_new(const mu_model *m, const mu_gen_req *r, int max_new, bool by_ctx, mu_gen **out, mu_err *err);
void mu_gen_free(mu_gen *g);

/* The next token from the logits: forced, constrained or sampled. -1 when
 * there is none, *why saying why (the job must end with an error): a
 * non-finite logit (broken weights), or structured output allowing no token.
 * best: -1, or mu_session_logits_best of the row logits (finite, and this
 * its argmax): the finiteness scan is skipped, and plain greedy on the
 * unmodified row takes best without its scan. */
int32_t mu_gen_pick(mu_gen *g, const float *logits, int32_t best, const char **why);

/* Accepts id (picked from logits): emits its TOKEN and any TEXT / TOOL_CALL
 * events it releases. Returns MU_FINISH_NONE to go on, or why the job ends
 * (stop token, structured value complete, stop string, length, context). */
mu_finish mu_gen_accept(mu_gen *g, int32_t id, const float *logits, mu_gen_emit_fn emit, void *user);

/* Ends the job: flushes held-back text (unless a stop string already cut
 * it) and emits FINISH with f, why (may be NULL) and st. A stop string that
 * completes only in the flushed text turns f into MU_FINISH_WORD. */
void mu_gen_end(mu_gen *g, mu_finish f, const char *why, const mu_gen_stats *st, mu_gen_emit_fn emit, void *user);

int mu_gen_n_accepted(const mu_gen *g);
/* Seconds spent in structured-output or grammar checks so far. */
double mu_gen_constrain_s(const mu_gen *g);

#endif
