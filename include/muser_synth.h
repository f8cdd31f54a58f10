/* muser_synth.h: synthetic Muse Glimmer models (what `muser gen` writes).
 *
 * A GGUF v3 file of architecture muse-glimmer with seeded random weights, a
 * byte-level BPE vocabulary trained on a small corpus and llama.cpp's
 * quantization mixes; llama.cpp loads it (docs/gen.md). Implemented in
 * src/synth, never on the inference path. The file's bytes depend only on
 * the options (golden tests pin them), never on the thread count.
 *
 * Use: mu_synth_defaults, then mu_synth_preset and field assignments, then
 * mu_synth_write. Errors: 0 or a negative MU_E_* code with err filled;
 * MU_E_ARG for options out of range, MU_E_IO for the file, MU_E_NOMEM.
 * Messages from synth itself carry no module prefix (a caller presents them
 * as its own: "muser gen: <message>"); those of the GGUF writer and the
 * vocabulary builder keep theirs ("gguf_write: cannot create: ..."). */
#ifndef MUSER_SYNTH_H
#define MUSER_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MU_SYNTH_MAX_LAYERS 1024
#define MU_SYNTH_MAX_THREADS 64
#define MU_SYNTH_MIN_VOCAB 266 /* 256 byte tokens, 9 specials, 1 reserved */

/* The file type: one weight type for every matrix (like llama-quantize
 * --pure), or one of llama.cpp's mixes (llama_tensor_get_type). Norm
 * weights are always F32. */
typedef enum {
    MU_SYNTH_F32,
    MU_SYNTH_F16,
    MU_SYNTH_BF16,
    MU_SYNTH_Q8_0,
    MU_SYNTH_Q4_K,
    MU_SYNTH_Q5_K,
    MU_SYNTH_Q6_K,
    MU_SYNTH_Q4_K_M,
    MU_SYNTH_Q4_K_S,
    MU_SYNTH_Q5_K_S,
    MU_SYNTH_Q5_K_M,
    MU_SYNTH_NVFP4,
    MU_SYNTH_N_TYPES
} mu_synth_type;

/* The K-quant search: careful (weighted least squares), fast (one min/max
 * pass, ~10x cheaper), or auto (careful up to 5e8 weights). */
typedef enum { MU_SYNTH_QUANT_AUTO, MU_SYNTH_QUANT_CAREFUL, MU_SYNTH_QUANT_FAST } mu_synth_quant;

typedef struct {
    const char *preset; /* names the file by default; NULL: "custom" */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    int n_swa, n_ctx;   /* sliding window, context length */
    int swa_period;     /* layer il slides iff il % swa_period < swa_period - 1 */
    bool swa_period_key; /* write the period as a scalar u32 (default: a bool array) */
    const bool *swa_layers; /* n_layer flags (true = sliding) instead of the period; borrowed */
    mu_synth_type type;
    uint64_t seed;
    bool has_softcap;   /* false: no final_logit_softcapping key (llama.cpp then uses 30) */
    double softcap, logit_scale, eps;
    double rope_base, rope_base_swa; /* rope_base_swa > 0 adds rope.freq_base_swa */
    const char *name;   /* general.name; NULL: muse-glimmer-<preset>-s<seed>-<TYPE> */
    const char *chat_template; /* chat_template_len bytes; NULL: a minimal built-in one */
    size_t chat_template_len;
    bool no_chat_template; /* no tokenizer.chat_template key */
    const char *corpus; /* BPE training text of corpus_len bytes; NULL: the embedded corpus */
    size_t corpus_len;
    int max_merges;     /* cap on learned merges; < 0: leave 1/16 of the free ids reserved */
    bool eom_key;       /* write tokenizer.ggml.eom_token_id (llama.cpp then stops on <|eom|>) */
    mu_synth_quant quant;
    int n_threads;      /* 0: all online cores (at most MU_SYNTH_MAX_THREADS) */
} mu_synth_opts;

/* The tiny preset and the defaults of docs/gen.md: period 4 as a bool
 * array, Q4_K_M, seed 1, softcap 20, logit scale 0.19611613, rope base
 * 500000, eps 1e-5, the built-in template, the embedded corpus. */
void mu_synth_defaults(mu_synth_opts *o);
/* Sets the geometry of a preset (tiny, fixture, 1b, full) and o->preset;
 * MU_E_ARG for another name (o unchanged). */
int mu_synth_preset(mu_synth_opts *o, const char *name, mu_err *err);
/* "q4_k_m" -> MU_SYNTH_Q4_K_M ...; -1 for an unknown name. */
int mu_synth_type_parse(const char *name);
/* "Q4_K_M" ...; "?" for a value out of range. */
const char *mu_synth_type_label(mu_synth_type t);

/* What mu_synth_write reports, in this order. */
typedef enum {
    MU_SYNTH_EV_VOCAB, /* the vocabulary is trained: n_merges, n_learned */
    MU_SYNTH_EV_OPEN,  /* <path>.tmp holds the header: file_bytes, n_weights, n_threads, fast */
    MU_SYNTH_EV_DATA,  /* bytes_done grew (every batch but the last; DONE follows that one) */
    MU_SYNTH_EV_DONE,  /* the file is complete and renamed to path */
} mu_synth_event;

typedef struct {
    mu_synth_event event;
    int n_merges, n_learned; /* from VOCAB on */
    uint64_t n_weights;      /* from OPEN on: elements of all tensors */
    uint64_t file_bytes;     /* the complete file */
    uint64_t bytes_done;     /* tensor data written so far */
    int n_threads;           /* resolved worker count */
    bool fast;               /* the fast K-quant search is in use */
} mu_synth_progress;

/* Called on the caller's thread; p lives for the call only. */
typedef void (*mu_synth_progress_fn)(const mu_synth_progress *p, void *user);

/* Writes the model o describes to path: first to "<path>.tmp", renamed to
 * path only on success; every failure removes the temporary file (a caller
 * that catches signals should remove it too). fn may be NULL. */
int mu_synth_write(const mu_synth_opts *o, const char *path, mu_synth_progress_fn fn, void *user, mu_err *err);

/* ---- DFlash drafters (`muser gen --dflash`, docs/speculative.md) ------- */

/* A drafter with seeded random weights in llama.cpp's `dflash` layout for
 * a target model: the target's width, tokenizer (copied) and mask token;
 * zero fields take the target's value (heads, head dim, ff) or the default
 * below. */
typedef struct {
    const char *target;     /* the target GGUF (required) */
    int n_layer;            /* 1 */
    int n_ff, n_head, n_head_kv, head_dim; /* 0: the target's */
    int block_size;         /* 16: the last token + 15 drafts per pass */
    const int *target_layers; /* n_target_layers ids (inputs of those target layers); */
    int n_target_layers;    /* 0: three spread over layers 1 .. n_layer - 1 */
    mu_synth_type type;     /* F32, F16 (default), BF16 or Q8_0 for the matrices */
    uint64_t seed;          /* 1 */
    bool own_head;          /* also write token_embd and output (else the target's are used) */
    int32_t mask_id;        /* -1: <|mask|>, else the last <|reserved_N|>, else the last token */
    const char *name;       /* general.name; NULL: muser-dflash-random */
} mu_synth_dflash_opts;

void mu_synth_dflash_defaults(mu_synth_dflash_opts *o);
/* Writes the drafter to path (through <path>.tmp, as mu_synth_write). */
int mu_synth_dflash_write(const mu_synth_dflash_opts *o, const char *path, mu_err *err);

/* ---- vision projectors (`muser gen --mmproj`) --------------------------- */

/* A Muse Glimmer vision projector with seeded random weights in llama.cpp's
 * mmproj layout (clip.projector_type "muse-glimmer"); llama.cpp's mtmd loads
 * it. Presets: "full", the release's geometry (50 layers, width 1536, 16
 * heads, ff 8960, a 32x32 position grid, adapter 6144 -> 4096 -> 4096 ->
 * 6656); "tiny", the same structure at width 64 (4 layers: three windowed,
 * one global; a 4x4 grid, so images of a few hundred pixels span several
 * windows; output 256, the tiny model's width). Patch 14, merge 2, layer
 * norm eps 1e-6, mean = std = 0.5. */
typedef struct {
    const char *preset;     /* set by mu_synth_mmproj_preset */
    int n_layer, n_embd, n_ff, n_head;
    int pos_side;           /* learned position grid side (the attention window) */
    int mm_hidden;          /* adapter width (mm.0 and mm.1 outputs) */
    int n_out;              /* output width: the text model's n_embd */
    mu_synth_type type;     /* matrices: F32, F16 (default), BF16 or Q8_0 */
    uint64_t seed;          /* 1 */
    const char *name;       /* general.name; NULL: muse-glimmer-mmproj-random */
} mu_synth_mmproj_opts;

void mu_synth_mmproj_defaults(mu_synth_mmproj_opts *o);
/* Sets the geometry of "tiny" or "full" (n_out included); MU_E_ARG for
 * another name. */
int mu_synth_mmproj_preset(mu_synth_mmproj_opts *o, const char *name, mu_err *err);
/* Writes the projector to path (through <path>.tmp, as mu_synth_write). */
int mu_synth_mmproj_write(const mu_synth_mmproj_opts *o, const char *path, mu_err *err);

#ifdef __cplusplus
}
#endif
#endif
