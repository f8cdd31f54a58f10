/* muser.h: the public engine API.
 *
 * Opaque handles, status codes (0 or negative, see src/base/err.h) and an
 * error record last. Lifetimes:
 *   mu_model   owns the GGUF mapping; weights are views into it.
 *   mu_engine  a model bound to the CPU kernels and a thread pool; must
 *              outlive its sessions.
 *   mu_session one sequence's KV state and position; one owner thread.
 * A forward call takes tokens of one or more sessions in a single batch
 * (continuous batching); the engine never learns where tokens came from. */
#ifndef MUSER_H
#define MUSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_model mu_model;
typedef struct mu_engine mu_engine;
typedef struct mu_session mu_session;
typedef struct mu_tok mu_tok; /* src/tok/tokenizer.h */

/* ---- model ------------------------------------------------------------ */

typedef struct {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    int n_ctx_train, n_swa;       /* sliding window (keys p-n_swa+1 .. p) */
    float rope_base, rope_base_swa, eps, logit_scale, softcap;
    const bool *swa_layers;       /* [n_layer]: true = sliding (RoPE), false = full (NoPE) */
    const char *name;             /* general.name or "" */
    int32_t bos, eos, eot, eom;   /* -1 when absent */
    bool add_bos;
} mu_model_info;

int mu_model_open(const char *path, mu_model **out, mu_err *err);
void mu_model_close(mu_model *m);
const mu_model_info *mu_model_get_info(const mu_model *m);
/* True for tokens that end generation (eos, eot; never eom). */
bool mu_model_is_stop(const mu_model *m, int32_t tok);
/* The GGUF's tokenizer (NULL when it has none); lives as long as m. */
const mu_tok *mu_model_tokenizer(const mu_model *m);
/* Text -> ids (malloc'ed), BOS first when add_bos and the model has one;
 * parse_special splits out control-token texts. */
int mu_tokenize(const mu_model *m, const char *text, size_t len, bool add_bos, bool parse_special, int32_t **ids,
                int *n, mu_err *err);

/* The GGUF file behind m: format version, size, and its tensors in file
 * order. */
typedef struct {
    const char *name;
    const char *type;   /* "Q4_K", "F16", ... */
    int n_dims;
    int64_t ne[4];      /* ne[0] is the row length */
    int64_t n_elems;
    uint64_t bytes;
} mu_tensor_info;
uint32_t mu_model_gguf_version(const mu_model *m);
uint64_t mu_model_file_bytes(const mu_model *m);
int mu_model_n_tensors(const mu_model *m);
/* Tensor i (0 .. n_tensors-1); MU_E_ARG for another i. Strings live as
 * long as m. */
int mu_model_tensor(const mu_model *m, int i, mu_tensor_info *out, mu_err *err);
/* A string metadata value (NULL when the key is absent or not a string);
 * not NUL-terminated inside the file: *len is its length. */
const char *mu_model_meta_str(const mu_model *m, const char *key, size_t *len);
/* An integer metadata value (any GGUF integer type) into *out; MU_E_ARG when
 * the key is absent, another code when it is not an integer. */
int mu_model_meta_int(const mu_model *m, const char *key, int64_t *out);

/* Weight validation, as llama.cpp's --check-tensors (ggml_validate_row_data):
 * every F32, F16 and BF16 value finite, every block scale finite (Q8_0 d;
 * Q4_K and Q5_K d and dmin; Q6_K d; NVFP4's scales are finite by
 * construction). Reads every weight byte (a full pass
 * over the file), on n_threads threads (0: one per CPU). fn (may be NULL)
 * is called on the calling thread with the bytes checked so far, now and
 * then and once at the end; a nonzero return stops the check (MU_E_STATE).
 * MU_E_MODEL names the first bad tensor (file order) and block. */
typedef int (*mu_check_progress_fn)(void *user, uint64_t done, uint64_t total);
int mu_model_check(const mu_model *m, int n_threads, mu_check_progress_fn fn, void *user, mu_err *err);

/* ---- tokenizer -------------------------------------------------------- */

/* Token attributes (llama.cpp's llama_token_attr bits, after llama.cpp's
 * load-time fix-ups; see docs/tokenizer.md "Token attributes"). */
enum {
    MU_TOK_ATTR_UNDEFINED = 0,
    MU_TOK_ATTR_UNKNOWN = 1 << 0,
    MU_TOK_ATTR_UNUSED = 1 << 1,
    MU_TOK_ATTR_NORMAL = 1 << 2,
    MU_TOK_ATTR_CONTROL = 1 << 3,
    MU_TOK_ATTR_USER_DEFINED = 1 << 4,
    MU_TOK_ATTR_BYTE = 1 << 5,
};

/* A GGUF's tokenizer alone (vocabulary-only files too), without binding a
 * model; free with mu_tok_free. */
int mu_tok_open(const char *path, mu_tok **out, mu_err *err);
void mu_tok_free(mu_tok *t);
int mu_tok_n_vocab(const mu_tok *t);
/* Text -> ids without BOS; *ids is malloc'ed. */
int mu_tok_encode(const mu_tok *t, const char *text, size_t len, bool parse_special, int32_t **ids, int *n_ids,
                  mu_err *err);
/* Attribute bits of id (MU_TOK_ATTR_*), 0 for an id out of range. */
int mu_tok_attr(const mu_tok *t, int32_t id);
/* The bytes a token renders as (llama_token_to_piece): normal tokens
 * byte-decoded, CONTROL/UNKNOWN tokens as their text only when special is
 * true, USER_DEFINED tokens always as their text. Returns the length
 * written, -(needed) when cap is too small, and 0 for an id out of range.
 * A piece may be part of a UTF-8 character. */
int mu_tok_piece(const mu_tok *t, int32_t id, bool special, char *buf, size_t cap);
/* Special token ids, -1 when absent. */
int32_t mu_tok_bos(const mu_tok *t);
int32_t mu_tok_eos(const mu_tok *t);

/* ---- chat template ---------------------------------------------------- */

/* The GGUF's tokenizer.chat_template (NUL-terminated, lives as long as m),
 * or NULL when it has none (the built-in Muse template is used then). */
const char *mu_model_chat_template(const mu_model *m);
/* Renders a conversation with the model's chat template (docs/chat-format.md).
 * messages_json: a JSON array of {role, content, tool_calls, name,
 * tool_call_id, reasoning_content}; tools_json: a JSON array of tool
 * definitions or NULL; reasoning: "low", "medium", "high", "xhigh" or NULL.
 * *out is malloc'ed. MU_E_ARG for bad messages or a template error. */
int mu_chat_apply(const mu_model *m, const char *messages_json, const char *tools_json, const char *reasoning,
                  bool add_generation_prompt, char **out, mu_err *err);

/* ---- engine ----------------------------------------------------------- */

typedef struct {
    int n_threads;     /* 0 = all online cores */
    const char *kern;  /* NULL = best for this CPU (MUSER_KERN overrides) */
    /* NULL or "cpu": the CPU; "cuda": GPU gpu_device, an error when there
     * is none; "auto": CUDA when a device exists, else the CPU. A failure
     * to set up the chosen backend is an error, never a silent fallback. */
    const char *backend;
    int gpu_device;
    /* Called with bytes uploaded to the GPU so far (may be NULL). */
    mu_check_progress_fn progress;
    void *progress_user;
} mu_engine_opts;

int mu_engine_new(mu_model *m, const mu_engine_opts *opts, mu_engine **out, mu_err *err);
void mu_engine_free(mu_engine *e);
const mu_model *mu_engine_model(const mu_engine *e);
const char *mu_engine_kern_name(const mu_engine *e);
int mu_engine_n_threads(const mu_engine *e);
/* "cpu" or "cuda". */
const char *mu_engine_backend(const mu_engine *e);

/* GPUs this process can use (0 without the CUDA plugin, a driver or a
 * device; mu_gpu_devices_why then says why, else ""). */
typedef struct {
    char name[128];
    int major, minor;       /* compute capability */
    size_t total_bytes, free_bytes;
} mu_gpu_device;
int mu_gpu_devices(mu_gpu_device *out, int cap);
const char *mu_gpu_devices_why(void);

/* Wall-clock time of each phase of the forward passes, split into passes of
 * one token (decode steps) and of more (prefill chunks, batched decoding of
 * several sessions). Off by default; when on, a phase costs a clock read.
 * A matmul phase includes quantizing its input. */
enum {
    MU_PH_NORMS,  /* embedding, norms, residuals, SwiGLU */
    MU_PH_QKV,    /* the q, k, v and gate matmuls */
    MU_PH_ROPE,   /* q/k norms, RoPE, cache writes */
    MU_PH_ATTN,   /* attention over the cache */
    MU_PH_WO,     /* attention output matmul */
    MU_PH_FFN_UP, /* FFN gate and up matmuls */
    MU_PH_FFN_DOWN,
    MU_PH_LOGITS, /* final norm, output matmul, softcap */
    MU_PH_COUNT
};
typedef struct {
    double decode_s[MU_PH_COUNT], prefill_s[MU_PH_COUNT];
    long decode_passes, prefill_passes;
} mu_profile;
extern const char *const mu_phase_names[MU_PH_COUNT];
/* Turns the timers on or off; both zero them. */
void mu_engine_profile(mu_engine *e, bool on);
void mu_engine_profile_get(const mu_engine *e, mu_profile *out);

/* ---- sessions --------------------------------------------------------- */

/* n_ctx: the most positions this session may hold (<= the model's context). */
int mu_session_new(mu_engine *e, int n_ctx, mu_session **out, mu_err *err);
void mu_session_free(mu_session *s);
int mu_session_n_past(const mu_session *s);
int mu_session_n_ctx(const mu_session *s);
/* KV cache size: *reserved = the bytes of all the session's K and V cells
 * (fixed when it was made: address space the OS backs as it is written on
 * the CPU, device memory on a GPU); *used = the bytes of the cells that
 * positions [0, n_past) occupy (each layer holds min(n_past, its cells)).
 * Reads only the session's fixed geometry: any thread may call it. */
void mu_session_kv_bytes(const mu_session *s, int n_past, uint64_t *reserved, uint64_t *used);
/* Forget everything after the first n positions. Fails with MU_E_STATE when
 * a sliding layer's ring no longer holds rows that position n would need. */
int mu_session_truncate(mu_session *s, int n, mu_err *err);
/* Whether mu_session_truncate(s, n) would succeed (reads only the position
 * count and the geometry). */
bool mu_session_can_truncate(const mu_session *s, int n);
void mu_session_reset(mu_session *s);
/* Context shift, as llama.cpp's server does it when a generation fills its
 * slot (--context-shift): positions [n_keep, n_keep + n_discard) leave the
 * cache and the later ones move back by n_discard (llama.cpp's seq_rm then
 * seq_add), so n_past drops by n_discard. From then on the session places
 * tokens in cells as llama.cpp's KV cache does (cell != position) and the
 * next forward first rotates the K rows llama.cpp's K-shift rotates: the
 * tokens that follow are llama.cpp's bit for bit. CPU engine only
 * (MU_E_STATE on CUDA, and for a session whose rows were installed by
 * kv_write or state_load). A shifted session refuses kv_read, kv_write,
 * kv_commit, state_save and layer streaming (MU_E_STATE) until
 * mu_session_reset, a truncation to 0 or a state_load. */
int mu_session_shift(mu_session *s, int n_keep, int n_discard, mu_err *err);
bool mu_session_shifted(const mu_session *s);

/* One session's share of a batch. Tokens are appended at n_past. */
typedef struct {
    mu_session *s;
    const int32_t *tokens;
    int n_tokens;
    bool all_logits;   /* logits for every token (speculative verify); else the last only */
    float *embd;       /* embeddings: when set, [n_tokens][n_embd] receives the hidden state of
                          every token after the final norm (llama.cpp's t_embd), and the item
                          gets no logits (all_logits is ignored) */
    bool solo;         /* round every token as a forward of that token alone (a decode step)
                          would: verifying a drafted block then yields, bit for bit, the
                          logits plain decoding yields. The matmuls take the one-row kernel
                          path for these rows (slower than the batched one on long blocks).
                          Items after a solo item in the batch round the same way: put solo
                          items last. */
    /* hidden states for a drafter (mu_drafter): when feat is set, [n_tokens][n_feat_layers]
       [n_embd] receives, per token, the input of each listed layer (the residual stream
       entering layer il; il = 0 is the normed embedding), llama.cpp's layer inputs.
       Reading them changes no result. On CUDA the device copies the rows out with the
       logits, and such a pass never replays a captured graph. */
    float *feat;
    const int *feat_layers;   /* n_feat_layers ids in [0, n_layer) */
    int n_feat_layers;
    /* input rows instead of token embeddings (images): when set, [n_tokens][n_embd] rows
       enter the model where token embeddings would, before the embedding norm (llama.cpp's
       batch.embd); tokens may then be NULL. */
    const float *in_embd;
    /* layer streaming (the prefill lane's producer, docs/lane.md): when set, called on
       the forward's thread as soon as the K and V rows of layer il at positions
       [pos0, pos0 + n) of this item's session are final, so they can be read
       (mu_session_kv_read) and sent while the later layers compute. Layers come in
       order, every position of the item once per layer. Both engines call it per
       chunk: the CPU right after the layer writes its rows, the CUDA engine once the
       device has written them (an event per layer), while the device computes the
       later layers. It must not run a forward nor change any session; reading the
       rows changes no result. */
    void (*on_layer)(void *user, int il, int pos0, int n);
    void *on_layer_user;
} mu_batch_item;

/* Runs the model over all items as one batch. Afterwards each session holds
 * its final logits (after logit scale and softcap), except the sessions of
 * items with embd, whose rows went there instead. */
int mu_forward(mu_engine *e, const mu_batch_item *items, int n_items, mu_err *err);

/* Logits of the i-th token of the last forward (i = -1: the last token).
 * Valid until the session's next forward; n_vocab floats. */
const float *mu_session_logits(const mu_session *s, int i);
/* What the pass that wrote row i (indexed as mu_session_logits) knows of
 * it: -1, not known (the CPU backend, $MUSER_LOGITS_BEST=0, or a row with a
 * NaN or an infinity); else every value of the row is finite and this is
 * its mu_logits_argmax (computed on the device with the row). */
int32_t mu_session_logits_best(const mu_session *s, int i);

/* KV state as bytes: exact, position-complete, bound to the model geometry.
 * Layout (docs/kv-state.md): header, then per layer the K and V rows that
 * the layer still holds. save() writes at most mu_session_state_bytes(s). */
size_t mu_session_state_bytes(const mu_session *s);
int mu_session_state_save(const mu_session *s, void *buf, size_t cap, size_t *written, mu_err *err);
int mu_session_state_load(mu_session *s, const void *buf, size_t n, mu_err *err);
/* dst takes src's positions as a state_save and state_load would give them,
 * cell for cell (on the device where the engine has one): two sessions of
 * one engine with the same cells per layer (the same context does it), src
 * not shifted. MU_E_ARG leaves dst alone; a device failure resets it. */
int mu_session_copy(mu_session *dst, const mu_session *src, mu_err *err);

/* Raw per-layer rows for external installers (KV packs, the prefill lane):
 * F16 K and V rows of n_head_kv*head_dim each, for positions [pos0, pos0+n). */
int mu_session_kv_read(const mu_session *s, int il, int pos0, int n, uint16_t *k, uint16_t *v, mu_err *err);
int mu_session_kv_write(mu_session *s, int il, int pos0, int n, const uint16_t *k, const uint16_t *v, mu_err *err);
/* Declare positions [0, n) present after kv_write of every layer. */
int mu_session_kv_commit(mu_session *s, int n, mu_err *err);

/* ---- images: Muse Glimmer's vision projector (mmproj) ---------------- */

/* llama.cpp's default media marker: a prompt's text holds it once per image,
 * in the order of the images. */
#define MU_MEDIA_MARKER "<__media__>"

/* One image as its encoded file bytes (PNG, JPEG or WebP); not owned. */
typedef struct mu_media {
    const void *data;
    size_t size;
} mu_media;

/* A vision projector GGUF (llama.cpp's mmproj layout, clip.projector_type
 * "muse-glimmer"): the ViT, its pixel shuffle and the adapter into the text
 * model's embedding width. Weights are views into the file's mapping. */
typedef struct mu_mmproj mu_mmproj;
typedef struct {
    int n_layer, n_embd, n_ff, n_head, head_dim;
    int patch_size;        /* pixels per patch side (14) */
    int n_merge;           /* pixel shuffle factor (2): a token is n_merge x n_merge patches */
    int pos_side;          /* learned position grid side (32): also the attention window */
    int n_out;             /* output width: the text model's n_embd */
    int min_tokens, max_tokens; /* merged tokens per image (1, 4096) */
    int image_size;        /* clip.vision.image_size (nominal) */
    float eps;             /* layer norm epsilon */
    float mean[3], std[3]; /* pixel normalization */
    char sha256[65];       /* of the whole file, lowercase hex */
} mu_mmproj_info;

/* Opens and validates path; with m, its output width must be m's n_embd.
 * MU_E_MODEL names what does not fit (another projector type, a missing
 * tensor, a shape, the width). */
int mu_mmproj_open(const char *path, const mu_model *m, mu_mmproj **out, mu_err *err);
void mu_mmproj_free(mu_mmproj *p);
const mu_mmproj_info *mu_mmproj_get_info(const mu_mmproj *p);

/* One image through the projector: decode, resize and normalize as
 * llama.cpp's mtmd does, run the encoder with e's kernel table on the
 * projector's own threads (as many as e's; one image at a time per
 * projector; any thread may call it, also while e runs a forward). *rows is
 * malloc'ed [*n_rows][n_out]; *nx, *ny (may be NULL) get the merged token
 * grid (n_rows = nx * ny). MU_E_ARG for bytes that are not an image. */
int mu_mmproj_encode(const mu_mmproj *p, mu_engine *e, const mu_media *img, float **rows, int *n_rows, int *nx,
                     int *ny, mu_err *err);

/* A prompt of text and images, laid out as llama.cpp's mtmd lays it out:
 * the text is split at each MU_MEDIA_MARKER, each piece tokenized on its own
 * (special tokens parsed), each image becomes <|image_start|>, its rows,
 * <|image_end|>; BOS first when add_bos and the model adds one. The number
 * of markers must equal n_media (MU_E_ARG otherwise). Encodes every image
 * (mu_mmproj_encode). Immutable once made: any thread may read it. */
typedef struct mu_mprompt mu_mprompt;
int mu_mprompt_new(mu_engine *e, const mu_mmproj *p, const char *text, size_t len, bool add_bos,
                   const mu_media *media, int n_media, mu_mprompt **out, mu_err *err);
/* Drops one owner's hold: the prompt is freed with its last owner. */
void mu_mprompt_free(mu_mprompt *mp);
/* Another owner for mp (each frees it once); returns mp. */
mu_mprompt *mu_mprompt_ref(const mu_mprompt *mp);
/* Positions the prompt takes (text tokens and image rows). */
int mu_mprompt_n(const mu_mprompt *mp);
/* Ids per position (lives as long as mp): text tokens as they are; an image
 * row has a negative id derived from the image's rows and the row index, so
 * equal images give equal ids and prefix matching treats them as text. */
const int32_t *mu_mprompt_tokens(const mu_mprompt *mp);
/* The input row of position i (n_out floats), or NULL for a text token. */
const float *mu_mprompt_embd(const mu_mprompt *mp, int i);

/* ---- DFlash drafter (docs/speculative.md) ---------------------------- */

/* A block-diffusion drafter in llama.cpp's `dflash` GGUF layout, bound to a
 * target engine: it reads the target's hidden states at its target layers
 * (mu_batch_item.feat), keeps them per sequence as its own KV rows, and
 * drafts a block of tokens in one pass over [last token, mask, mask, ...].
 * Runs on the target engine's CPU threads, or on a CUDA target's device
 * (info.on_device; MUSER_DRAFT_DEVICE=0, or a plugin without a drafter,
 * keeps it on a pool of its own of the threads the engine was asked for);
 * lives no longer than it. */
typedef struct mu_drafter mu_drafter;
typedef struct {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim;
    int block_size;            /* trained block: the last token + block_size - 1 drafts */
    int n_target;              /* target layers read */
    const int *target_layers;  /* [n_target]: mu_batch_item.feat_layers */
    int n_feat;                /* n_target * the target's n_embd: floats per token of feat */
    int32_t mask_id;
    bool own_head;             /* the file has its own token embedding / output matrix */
    /* what a drafting pass of n drafts costs, estimated in decode steps of
     * the target: cost_pass + n * cost_row, on the CPU from the
     * multiply-adds of both (one thread) and the multi-row kernels' share
     * per row, on a device provisional constants (docs/speculative.md);
     * $MUSER_DRAFT_COST_PASS and $MUSER_DRAFT_COST_ROW replace them */
    float cost_pass, cost_row;
    int n_scored;              /* token ids a draft row scores: the shortlist's, or the vocabulary */
    bool on_device;            /* it runs on its CUDA target's device (else on the CPU) */
} mu_drafter_info;

/* Opens path and checks it against the target (layers, widths,
 * vocabulary). MU_E_MODEL names what does not fit. */
int mu_drafter_open(const char *path, mu_engine *target, mu_drafter **out, mu_err *err);
void mu_drafter_free(mu_drafter *d);
const mu_drafter_info *mu_drafter_get_info(const mu_drafter *d);
/* The draft head scores only ids[0 .. n) (increasing; n = 0 or n >= the
 * vocabulary: every id): their rows of the output matrix, copied. Drafts
 * are the best of those; the answer never changes (the target verifies).
 * Opening sets the file's muser.dflash.shortlist when it has one
 * (MUSER_DRAFT_SHORTLIST=0: every id; =K: ids 0 .. K - 1; docs/speculative.md
 * "The shortlist head"). Not while drafting. */
int mu_drafter_set_shortlist(mu_drafter *d, const int32_t *ids, int n, mu_err *err);

/* One sequence's drafter state: the injected rows of positions [0, n_ctx). */
typedef struct mu_draft_seq mu_draft_seq;
int mu_draft_seq_new(mu_drafter *d, int n_ctx, mu_draft_seq **out, mu_err *err);
void mu_draft_seq_free(mu_draft_seq *q);
/* Injects the target's features of positions [pos0, pos0 + n) ([n][n_feat],
 * from mu_batch_item.feat): the drafter's K and V rows of those positions. */
int mu_draft_seq_inject(mu_draft_seq *q, int pos0, int n, const float *feat, mu_err *err);
/* Forgets every position >= n (rejected drafts, a new prompt). */
void mu_draft_seq_truncate(mu_draft_seq *q, int n);
/* Drafts n_draft tokens (1 .. block_size - 1) that follow last, which sits
 * at position pos: one pass over the whole block [last, mask x (block_size
 * - 1)] at pos .. (the block the drafter was trained on, whatever n_draft),
 * attending to the injected rows of positions < pos that are present and to
 * the block (both ways unless the file says causal); the drafts are the
 * argmax of rows 1 .. n_draft. Returns the count written to out, or a
 * negative code. */
int mu_draft_seq_draft(mu_draft_seq *q, int32_t last, int pos, int n_draft, int32_t *out, mu_err *err);
/* The same in two halves: the pass, keeping its n_draft draft rows (before
 * the output matrix; returns n_draft or a negative code), and the drafts of
 * kept rows [from, from + n) (0 is the first draft), each row through the
 * output matrix only when asked: returns the count written (0 when from is
 * past the kept rows). */
int mu_draft_seq_pass(mu_draft_seq *q, int32_t last, int pos, int n_draft, mu_err *err);
int mu_draft_seq_tokens(mu_draft_seq *q, int from, int n, int32_t *out);
/* The head's scores of kept row `row` (info.n_scored floats, in the
 * shortlist's order); returns the count, 0 past the kept rows. */
int mu_draft_seq_scores(mu_draft_seq *q, int row, float *out);

/* ---- sampling --------------------------------------------------------- */

/* One logit bias: bias is added to the token's logit (-INFINITY bans it). */
typedef struct {
    int32_t id;
    float bias;
} mu_logit_bias;

/* llama.cpp's sampler chain and its parameters (common_params_sampling),
 * in its order: logit bias -> penalties (repeat, frequency, presence over
 * the last penalty_last_n accepted tokens) -> DRY -> top-n-sigma -> top-k
 * -> typical-p -> top-p -> min-p -> XTC -> temperature (dynamic when
 * dynatemp_range > 0) -> draw. Mirostat 1 or 2 replaces the chain after
 * logit bias with temperature -> mirostat (penalties and DRY are not part
 * of it, as in llama.cpp). Zero is "off" for every field after seed, so a
 * literal that names only the first five is the plain chain. Draws use
 * llama.cpp's generator (std::mt19937 seeded with the low 32 bits of seed,
 * its uniform doubles), so equal logits give llama.cpp's tokens. */
typedef struct {
    float temp;        /* <= 0: greedy */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;     /* low 32 bits used; 0xFFFFFFFF is an ordinary seed here
                          (llama.cpp draws a random one; callers choose) */
    int min_keep;              /* 0 */
    float typical_p;           /* <= 0 or >= 1: off */
    float top_n_sigma;         /* <= 0: off (llama.cpp's -1) */
    float xtc_probability;     /* 0: off */
    float xtc_threshold;       /* 0.1; > 0.5: off */
    float dynatemp_range;      /* 0: off */
    float dynatemp_exponent;   /* 1 */
    int penalty_last_n;        /* 64; 0: off; -1: every accepted token */
    float penalty_repeat;      /* 0 or 1: off */
    float penalty_freq;        /* 0: off */
    float penalty_present;     /* 0: off */
    float dry_multiplier;      /* 0: off */
    float dry_base;            /* 1.75; < 1: DRY off (as llama.cpp's sampler) */
    int dry_allowed_length;    /* 2 */
    int dry_penalty_last_n;    /* 64 (llama.cpp's); 0: off; -1: every accepted token */
    const char *const *dry_breakers; /* NULL: llama.cpp's "\n", ":", "\"", "*";
                                        non-NULL with n_dry_breakers 0: none.
                                        Not owned; read by mu_sampler_new_model */
    int n_dry_breakers;
    int mirostat;              /* 0 off, 1, 2 */
    float mirostat_tau;        /* 5 */
    float mirostat_eta;        /* 0.1 */
    const mu_logit_bias *logit_bias; /* not owned; copied by mu_sampler_new */
    int n_logit_bias;          /* ids outside the vocabulary are ignored */
} mu_sample_params;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, and the
 * rest as commented above. */
mu_sample_params mu_sample_defaults(void);

typedef struct mu_sampler mu_sampler;
/* MU_E_ARG for parameters out of range (message names the field). DRY
 * needs the model's vocabulary for its sequence breakers: with
 * dry_multiplier on, mu_sampler_new accepts only "no breakers". */
int mu_sampler_new(const mu_sample_params *p, int n_vocab, mu_sampler **out, mu_err *err);
int mu_sampler_new_model(const mu_sample_params *p, const mu_model *m, mu_sampler **out, mu_err *err);
void mu_sampler_free(mu_sampler *s);
/* The whole chain over n_vocab logits (not modified). */
int32_t mu_sampler_sample(mu_sampler *s, const float *logits);
/* The same, given best: -1, or the argmax of the finite row logits
 * (mu_session_logits_best); plain greedy on the unmodified row takes it
 * without a scan, any other chain ignores it. */
int32_t mu_sampler_sample_best(mu_sampler *s, const float *logits, int32_t best);
/* Every one of the n logits finite (no NaN, no infinity). */
bool mu_logits_finite(const float *logits, int n);
/* The chain split in two, for callers that mask logits in between
 * (structured output): adjust applies the history stages (logit bias,
 * penalties, DRY) in place; sample_adjusted runs the rest. */
void mu_sampler_adjust(mu_sampler *s, float *logits);
int32_t mu_sampler_sample_adjusted(mu_sampler *s, const float *logits);
/* After a draw: the candidates the chain left and their probabilities, as
 * llama.cpp's server reports post_sampling_probs (the final candidate
 * array, by probability descending, zeros left out; greedy: the argmax with
 * 1). Writes up to k (id, prob) pairs, returns how many; *p_id is id's
 * probability there (0 when it is not among them). */
int mu_sampler_final_probs(const mu_sampler *s, int32_t id, int k, int32_t *ids, float *probs, float *p_id);
/* Feeds a token into the sampler's history (penalties, DRY): every prompt
 * token and every generated one, in order, as llama.cpp's server does. */
void mu_sampler_accept(mu_sampler *s, int32_t tok);

/* Softmax of logits; writes the k most probable (id, prob) pairs, descending. */
void mu_top_probs(const float *logits, int n_vocab, int k, int32_t *ids, float *probs);

/* Probabilities of one sampled token from the logits it was sampled from:
 * *logprob = log-softmax of id (in double), and the k most probable tokens
 * (descending) with their softmax probabilities (llama.cpp's sampler
 * softmax, what `muser run --json` prints) and log-probabilities. Any of
 * the output arrays may be NULL. k <= n_vocab. */
void mu_token_probs(const float *logits, int n_vocab, int32_t id, int k, float *logprob, int32_t *top_ids,
                    float *top_probs, float *top_logprobs);

#ifdef __cplusplus
}
#endif
#endif
