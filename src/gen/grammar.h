/* grammar.h: GBNF grammars as llama.cpp reads and applies them.
 * Owns: the parser (llama.cpp's GBNF dialect: rules, alternatives, groups,
 * literals, character classes, `.`, `*` `+` `?` `{m,n}`, token references
 * <[id]> and <text>, comments) compiled into llama.cpp's rule elements,
 * and a matcher: llama.cpp's pushdown stacks over code points, the
 * partial-UTF-8 state between tokens, which tokens a state rejects, and
 * accepting a token; lazy grammars' triggers (patterns in regex.h).
 * Does not own: sampling (gen.c runs llama.cpp's rejection-sampling order
 * around it), HTTP. The public handle is mu_grammar (include/muser_gen.h).
 * docs/api.md ("Grammars") is the normative description. */
#ifndef MU_GEN_GRAMMAR_H
#define MU_GEN_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../include/muser_gen.h"

/* llama.cpp's element types (llama_gretype), same values */
enum {
    MU_GE_END = 0,
    MU_GE_ALT = 1,
    MU_GE_RULE_REF = 2,
    MU_GE_CHAR = 3,
    MU_GE_CHAR_NOT = 4,
    MU_GE_CHAR_RNG_UPPER = 5,
    MU_GE_CHAR_ALT = 6,
    MU_GE_CHAR_ANY = 7,
    MU_GE_TOKEN = 8,
    MU_GE_TOKEN_NOT = 9,
};

typedef struct {
    uint32_t type;
    uint32_t value; /* code point, rule id or token id */
} mu_gelem;

#define MU_GRAMMAR_MAX_TEXT MU_GRAMMAR_MAX_TEXT_BYTES
#define MU_GRAMMAR_MAX_ELEMS (1u << 21)  /* rule elements after expansion */
#define MU_GRAMMAR_MAX_NEST 256          /* nested groups */
#define MU_GRAMMAR_MAX_STACKS 65536      /* live parse stacks of a matcher */

/* For tests: the rules as llama.cpp's parser leaves them (rule i is
 * elements [0, *n) ending with MU_GE_END; NULL past the last rule), the
 * symbol count and the id of a symbol (-1 when absent). */
const mu_gelem *mu_grammar_rule(const mu_grammar *g, uint32_t i, size_t *n);
size_t mu_grammar_n_rules(const mu_grammar *g);
size_t mu_grammar_n_symbols(const mu_grammar *g);
int64_t mu_grammar_symbol(const mu_grammar *g, const char *name);

/* One generation's position in the grammar. */
typedef struct mu_gmatch mu_gmatch;

/* tok: token pieces (special tokens as their text, as llama.cpp's grammar
 * sees them) and is_eog: llama.cpp's end-of-generation set; both may be
 * NULL for byte-only use (mu_gmatch_accept_bytes). g must outlive it. */
int mu_gmatch_new(const mu_grammar *g, const mu_tok *tok, const mu_model *m, mu_gmatch **out, mu_err *err);
void mu_gmatch_free(mu_gmatch *mt);

/* llama_grammar_apply_impl on one candidate: may token id come next? */
bool mu_gmatch_allows(mu_gmatch *mt, int32_t id);
/* llama_grammar_apply_impl on the whole vocabulary: logits of rejected
 * tokens become -INFINITY (entries already -INFINITY are left so).
 * Returns the number of tokens left allowed, -1 when out of memory. */
int mu_gmatch_mask(mu_gmatch *mt, float *logits);
/* llama_grammar_accept_impl: advances past token id. MU_E_ARG when the
 * grammar cannot take it (the message says why), MU_E_NOMEM. */
int mu_gmatch_accept(mu_gmatch *mt, int32_t id, mu_err *err);
/* llama_grammar_accept_str: advances past n bytes of text. */
int mu_gmatch_accept_bytes(mu_gmatch *mt, const char *s, size_t n, mu_err *err);
/* Some stack is empty: the text so far is a complete match. */
bool mu_gmatch_complete(const mu_gmatch *mt);
/* Every stack is empty: nothing but the end may follow. */
bool mu_gmatch_finished(const mu_gmatch *mt);
size_t mu_gmatch_n_stacks(const mu_gmatch *mt);
/* A lazy grammar (mu_grammar_set_lazy) before its trigger: every token is
 * allowed, mask() masks nothing, accept() only watches for the trigger. */
bool mu_gmatch_awaiting(const mu_gmatch *mt);

#endif
