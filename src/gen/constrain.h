/* constrain.h: structured output at the token level: which tokens may come
 * next so that the generated text stays a prefix of a JSON value matching a
 * schema (jsonc.h), and picking one (greedy or through the sampler).
 * Owns: the mapping token -> bytes (the token's piece, special = false), the
 * rules for special tokens, the optional Muse answer header before the
 * value (chat), the candidate walk and the logit mask.
 * Does not own: the schema or the byte automaton (jsonc.h), the sampler
 * chain (engine). Used only by the scheduler's engine thread. */
#ifndef MU_GEN_CONSTRAIN_H
#define MU_GEN_CONSTRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "../../include/muser_gen.h"
#include "jsonc.h"

typedef struct mu_constrain mu_constrain;

/* The model and schema must outlive it. chat: the output may begin with the
 * answer header " to=user" + <|message|> (docs/api.md, "Structured output"). */
int mu_constrain_new(const mu_model *m, const mu_jsonc_schema *s, bool chat, mu_constrain **out, mu_err *err);
void mu_constrain_free(mu_constrain *c);

/* Is token id allowed next? */
bool mu_constrain_allowed(mu_constrain *c, int32_t id);
/* Next token from logits under the constraint: the logits pass smp's
 * history stages (logit bias, penalties, DRY), then the most probable
 * allowed token when p->temp <= 0, else the rest of smp's chain over them
 * with disallowed tokens masked (-inf). -1 when no token is allowed. */
int32_t mu_constrain_pick(mu_constrain *c, mu_sampler *smp, const mu_sample_params *p, const float *logits);
/* Advances past token id (which must be allowed). */
void mu_constrain_accept(mu_constrain *c, int32_t id);
/* The value is closed: generation should end now. */
bool mu_constrain_done(const mu_constrain *c);
/* Cost so far: picks, tokens checked, seconds spent in pick() outside the
 * sampler chain. */
void mu_constrain_stats(const mu_constrain *c, uint64_t *n_picks, uint64_t *n_checked, double *seconds);

#endif
