/* regex.h: the regular expressions of llama.cpp's lazy-grammar trigger
 * patterns (grammar_triggers of type 2 and 3), matched as llama.cpp's
 * std::regex (ECMAScript grammar) matches them over a byte string.
 * Owns: the pattern parser (literals, `.`, classes with ranges and
 * negation, escapes \d \D \w \W \s \S \b \B \n \r \t \f \v \0 \xHH \uHHHH
 * (up to 0x7F) \cX, groups (capturing, (?:), lookahead (?=) (?!)),
 * alternation, the quantifiers * + ? {n} {n,} {n,m} and their lazy forms,
 * ^ and $ at the ends of the input), a backtracking matcher with
 * ECMAScript's alternative order, and llama.cpp's find rule (where the
 * first non-empty capturing group begins).
 * Refused with a one-line error: backreferences, lookbehind, named groups,
 * \u above 0x7F, \p. Captures inside a lookahead are not kept.
 * Does not own: the trigger buffer (grammar.c). */
#ifndef MU_GEN_REGEX_H
#define MU_GEN_REGEX_H

#include <stddef.h>

#include "../base/err.h"

typedef struct mu_re mu_re;

#define MU_RE_MAX_PATTERN 4096   /* pattern bytes */
#define MU_RE_MAX_PROG 65536     /* instructions after expanding {n,m} */
#define MU_RE_MAX_STEPS (1u << 24) /* matcher steps per mu_re_find */

/* MU_E_ARG "regex: what: at byte N" for a pattern outside the dialect,
 * MU_E_NOMEM. */
int mu_re_new(const char *pat, size_t n, mu_re **out, mu_err *err);
void mu_re_free(mu_re *re);

/* llama_grammar_trigger_pattern::find over s[0, n): the leftmost match
 * (std::regex_search); *pos is where its first capturing group of nonzero
 * length begins, or the match's start when there is none; SIZE_MAX when
 * nothing matches. MU_E_ARG when the match takes more than
 * MU_RE_MAX_STEPS steps (or backtracking state), MU_E_NOMEM. */
int mu_re_find(const mu_re *re, const char *s, size_t n, size_t *pos, mu_err *err);

#endif
