/* vocab_gen.h: build a byte-level BPE vocabulary for generated models.
 * Owns: the 256 GPT-2 byte-mapped base tokens, BPE merge training over a
 * corpus (an embedded one by default), reserved control tokens that fill the
 * requested size, and the 9 Muse special tokens as the last ids.
 * Id layout (as in the shared fixtures):
 *   0..255                 one token per byte (id = byte value)
 *   256..256+M-1           one token per learned merge that made a new string
 *   ..n_vocab-10           <|reserved_ID|> control tokens
 *   n_vocab-9..n_vocab-1   <|begin_of_text|> <|end_of_text|> <|start|>
 *                          <|message|> <|eot|> <|eom|> <|image_start|>
 *                          <|image_end|> <|patch|> (control)
 * Training uses an approximation of the llama4 / GPT-4o pre-split (words,
 * digit groups of 3, punctuation runs, whitespace runs); the exact
 * pre-tokenizer lives in the tokenizer, and merges learned from an
 * approximate split are still a valid BPE vocabulary. */
#ifndef MU_MODEL_VOCAB_GEN_H
#define MU_MODEL_VOCAB_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

#define MU_VOCAB_N_SPECIAL 9
#define MU_VOCAB_TYPE_NORMAL 1
#define MU_VOCAB_TYPE_CONTROL 3

typedef struct {
    int n_vocab;          /* total ids, >= 256 + 9 */
    int max_merges;       /* cap on learned merges; < 0: default (leave ~1/16 reserved) */
    int min_pair_count;   /* stop when the best pair occurs fewer times (default 2 when <= 0) */
    const char *corpus;   /* NULL: the embedded corpus */
    size_t corpus_len;
    int reference_trainer; /* 1: recount all pairs after every merge (slow; tests compare) */
} mu_vocab_gen_params;

typedef struct {
    int n_vocab;
    char **tokens;        /* GPT-2 byte-mapped UTF-8, NUL-terminated */
    int32_t *types;       /* MU_VOCAB_TYPE_* */
    int n_merges;
    char **merges;        /* "left right", byte-mapped */
    int n_learned;        /* tokens 256..256+n_learned-1 come from merges */
    int bos, eos, eot, eom, start, message;
} mu_vocab_gen;

/* Texts of the 9 specials, in id order. */
extern const char *const mu_vocab_specials[MU_VOCAB_N_SPECIAL];

int mu_vocab_gen_build(const mu_vocab_gen_params *p, mu_vocab_gen **out, mu_err *err);
void mu_vocab_gen_free(mu_vocab_gen *v);

/* The embedded training corpus (English prose, code, chat turns, a little
 * of several other scripts). */
const char *mu_vocab_gen_corpus(size_t *len);

/* GPT-2 byte -> code point mapping used for token texts. */
uint32_t mu_vocab_byte_cp(uint8_t b);

#endif
