/* jsonc.h: an incremental JSON recognizer for constrained decoding.
 * Owns: compiling a JSON Schema (the subset used by OpenAI structured
 * outputs) into a node graph, and a byte-level pushdown automaton that
 * answers, after every byte, "can this prefix still be completed to a JSON
 * value that matches the schema" and "is the value complete".
 * Does not own: tokens, sampling, HTTP (constrain.h maps tokens onto it).
 * docs/api.md ("Structured output") is the normative description of the
 * accepted schema keywords and of the text the recognizer lets through. */
#ifndef MU_GEN_JSONC_H
#define MU_GEN_JSONC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

typedef struct mu_schema mu_jsonc_schema; /* public name: mu_schema (include/muser_gen.h) */
typedef struct mu_jsonc mu_jsonc;

#define MU_JSONC_MAX_DEPTH 32   /* open containers + the value being read */
#define MU_JSONC_MAX_ALT 8      /* live anyOf alternatives */
#define MU_JSONC_MAX_PROPS 64   /* declared properties per object schema */

/* Compiles a JSON Schema. schema == NULL: any JSON value; object_only: the
 * value must be an object (OpenAI json_object, Ollama "json"); both may be
 * combined only as (NULL, true). where names the schema in errors
 * ("response_format.json_schema.schema"). MU_E_ARG names the first
 * unsupported keyword or bad value with its path. Reference counted: *out
 * starts with one reference. */
int mu_jsonc_schema_new(const json_t *schema, bool object_only, const char *where, mu_jsonc_schema **out,
                        mu_err *err);
mu_jsonc_schema *mu_jsonc_schema_ref(mu_jsonc_schema *s);
void mu_jsonc_schema_unref(mu_jsonc_schema *s);   /* NULL is fine */

/* A recognizer at the start of a value. The schema must outlive it. */
int mu_jsonc_new(const mu_jsonc_schema *s, mu_jsonc **out, mu_err *err);
void mu_jsonc_free(mu_jsonc *r);
/* dst := src (both from the same schema); copies only the live part. */
void mu_jsonc_copy(mu_jsonc *dst, const mu_jsonc *src);
void mu_jsonc_reset(mu_jsonc *r);

/* Feeds bytes. Returns true while the prefix can still be completed; on
 * false the recognizer is dead (every later feed is false) until reset or
 * copied over. */
bool mu_jsonc_feed(mu_jsonc *r, const char *bytes, size_t n);
/* The bytes so far form a complete value (possibly extendable, e.g. "12"). */
bool mu_jsonc_complete(const mu_jsonc *r);
/* The value is complete and closed: nothing but whitespace may follow
 * (objects, arrays, strings, literals once their text is unambiguous). */
bool mu_jsonc_closed(const mu_jsonc *r);
/* False once a feed was rejected. */
bool mu_jsonc_alive(const mu_jsonc *r);
/* Every live configuration is inside a string value, outside an escape or
 * a multi-byte character: any bytes >= 0x20 other than '"' and '\\' that
 * form complete UTF-8 characters are accepted and keep it so. */
bool mu_jsonc_in_plain_string(const mu_jsonc *r);
/* The set of bytes that can come next: bit b of set[b >> 6]. */
void mu_jsonc_next_bytes(const mu_jsonc *r, mu_jsonc *scratch, uint64_t set[4]);

#endif
