/* tokenizer.h: the byte-level BPE tokenizer of Muse Glimmer (GGUF
 * tokenizer.ggml.model "gpt2", pre-tokenizer "llama4"), token for token
 * identical to llama.cpp, and a streaming detokenizer.
 * Normative description, llama.cpp facts and known limits: docs/tokenizer.md.
 *
 * Owns: reading and validating the tokenizer.ggml.* keys, special-token
 * partitioning, the llama4 (GPT-4o) pre-split, BPE merges, token pieces and
 * UTF-8 safe streaming of pieces. Does not add BOS (callers do, following
 * mu_tok_add_bos) and knows nothing about chat templates.
 *
 * A mu_tok copies everything it needs from the GGUF: it may outlive the
 * mu_gguf it was built from. It is immutable after mu_tok_new, so one
 * tokenizer may be used from several threads at once. */
#ifndef MU_MODEL_TOKENIZER_H
#define MU_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../include/muser.h"
#include "../base/err.h"
#include "../gguf/gguf.h"

/* mu_tok, the MU_TOK_ATTR_* bits and the functions a client needs
 * (mu_tok_open, encode, piece, attr, bos/eos) are declared in
 * include/muser.h; the rest is internal. */

/* Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,
 * add_bos_token}. MU_E_UNSUPPORTED for another tokenizer model or
 * pre-tokenizer, MU_E_MODEL for malformed or inconsistent keys (message names
 * the key and the value). On failure *out is untouched. */
int mu_tok_new(const mu_gguf *g, mu_tok **out, mu_err *err);
void mu_tok_free(mu_tok *t);

/* Encodes len bytes of text (any bytes; invalid UTF-8 is handled as llama.cpp
 * does, see docs/tokenizer.md) into *ids (malloc'ed, free() it; NULL when
 * *n_ids is 0). No BOS is added. parse_special: also split out CONTROL and
 * UNKNOWN token texts (USER_DEFINED ones are always split out). Fails only
 * on MU_E_NOMEM or MU_E_ARG (text NULL with len > 0, or len > 256 MiB). */
int mu_tok_encode(const mu_tok *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                  int *n_ids, mu_err *err);

int mu_tok_n_vocab(const mu_tok *t);
/* Special ids, -1 when the model has none. bos/eos default to 11 when the
 * keys are absent (llama.cpp's "gpt2" default); eot/eom fall back to
 * llama.cpp's detection by token text. */
int32_t mu_tok_bos(const mu_tok *t);
int32_t mu_tok_eos(const mu_tok *t);
int32_t mu_tok_eot(const mu_tok *t);
int32_t mu_tok_eom(const mu_tok *t);
/* tokenizer.ggml.add_bos_token (false when absent, as llama.cpp for llama4). */
bool mu_tok_add_bos(const mu_tok *t);
/* Attribute bits of id (MU_TOK_ATTR_*), 0 for an id out of range. */
int mu_tok_attr(const mu_tok *t, int32_t id);
/* Token text exactly as stored in the GGUF (byte-mapped for normal tokens),
 * NUL-terminated, or NULL for an id out of range. Lives as long as t. */
const char *mu_tok_text(const mu_tok *t, int32_t id, size_t *len);
/* The same text copied into buf (NUL-terminated); "" when id is out of range
 * or the text does not fit in cap bytes. */
void mu_tok_text_copy(const mu_tok *t, int32_t id, char *buf, size_t cap);
/* Exact token text -> id, or -1. NUL-terminated text. */
int32_t mu_tok_find(const mu_tok *t, const char *text);
int32_t mu_tok_find_n(const mu_tok *t, const char *text, size_t len);

/* The bytes a token renders as (llama_token_to_piece, lstrip 0): normal
 * tokens byte-decoded, CONTROL/UNKNOWN tokens as their text only when
 * special is true, USER_DEFINED tokens always as their text, others empty.
 * Returns a view into t (not NUL-terminated) or NULL for an id out of range. */
const char *mu_tok_piece_view(const mu_tok *t, int32_t id, bool special, size_t *len);
/* Copying form: returns the length written, -(needed) when cap is too small,
 * and 0 for an id out of range. */
int mu_tok_piece(const mu_tok *t, int32_t id, bool special, char *buf, size_t cap);
/* Longest piece of any token (bytes). */
size_t mu_tok_max_piece(const mu_tok *t);

/* Streaming detokenizer: pieces in, complete UTF-8 characters out. Bytes of
 * a character split across tokens are held back until the character is
 * complete; bytes that can never become a valid character are emitted at
 * once (verbatim, or as U+FFFD with MU_DETOK_VALID_UTF8). */
typedef struct mu_detok mu_detok;
enum {
    MU_DETOK_SPECIAL = 1 << 0,    /* render CONTROL tokens (special = true) */
    MU_DETOK_VALID_UTF8 = 1 << 1, /* replace invalid sequences with U+FFFD */
};
/* The tokenizer must outlive the detokenizer. */
int mu_detok_new(const mu_tok *t, int flags, mu_detok **out, mu_err *err);
void mu_detok_free(mu_detok *d);
/* Feeds one id; *out and *n_out: bytes ready to emit (possibly 0), valid until
 * the next call on d. Never allocates. MU_E_ARG for an id out of range (the
 * detokenizer is unchanged). */
int mu_detok_push(mu_detok *d, int32_t id, const char **out, size_t *n_out, mu_err *err);
/* mu_detok_push, the token rendered as with MU_DETOK_SPECIAL when special
 * (llama.cpp's preserved tokens) */
int mu_detok_push_ex(mu_detok *d, int32_t id, bool special, const char **out, size_t *n_out, mu_err *err);
/* End of stream: emits the held-back bytes of an unfinished character
 * (verbatim, or one U+FFFD per invalid sequence with MU_DETOK_VALID_UTF8)
 * and resets d for a new stream. */
void mu_detok_flush(mu_detok *d, const char **out, size_t *n_out);
/* Drops any held-back bytes (new stream). */
void mu_detok_reset(mu_detok *d);

/* ---- pre-tokenizer (tok_pretok.c), exposed for tests ---- */

/* Splits text as llama.cpp's unicode_regex_split does for the llama4 /
 * GPT-4o regex: decodes UTF-8 leniently (llama.cpp's rules), collapses code
 * points to categories, and matches the regex. On success *cpts holds the
 * code points (malloc'ed) and *words (malloc'ed) the length of each word in
 * code points; the caller frees both. */
int mu_tok_pretok_split(const char *text, size_t len, uint32_t **cpts, size_t *n_cpts,
                        size_t **words, size_t *n_words, mu_err *err);
/* llama.cpp's lenient UTF-8 decoding of one code point at text[*off]
 * (off < len); advances *off. Invalid input yields U+FFFD and advances by
 * one byte; code points above U+10FFFF (which llama.cpp cannot re-encode)
 * also yield U+FFFD. */
uint32_t mu_tok_utf8_next(const char *text, size_t len, size_t *off);
/* UTF-8 bytes of a code point <= U+10FFFF into out[4]; returns the count. */
int mu_tok_utf8_put(uint32_t cp, char *out);

#endif
