/* lanewire.h: the prefill lane's wire format (docs/lane.md): frames, the
 * handoff manifest and its HMAC-SHA-256 seal, as plain C values with
 * encoders and strict decoders.
 * Owns: byte layouts, limits, the seal, the expected order of a handoff's
 * LAYER frames. Does not own: sockets (conn.c), engines or sessions
 * (src/gen/lane_producer.c, lane_decoder.c), the replay ledger (ledger.c).
 * Errors: every rejection is MU_E_FORMAT (malformed, out of order, over a
 * limit) or MU_E_STATE (well formed but not the handoff asked for, a bad
 * seal or digest), with the message "lane: REASON: detail", REASON one of
 * the words of docs/lane.md ("frame", "limit", "order", "digest", "seal",
 * "identity", "request", "layout", "stale", "abort"). */
#ifndef MU_NET_LANEWIRE_H
#define MU_NET_LANEWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/err.h"

#define LANE_MAGIC "MUL1"
#define LANE_HDR 12u                          /* magic 4, type 1, flags 1, reserved 2, length 4 */
#define LANE_MAX_FRAME (48u * 1024 * 1024)     /* any frame's payload */
#define LANE_MAX_SMALL (64u * 1024)            /* every frame but HELLO and LAYER */
#define LANE_MAX_TOKENS 262144                 /* positions one handoff may ship */
#define LANE_MAX_LAYERS 512
#define LANE_MAX_ROW (64u * 1024)              /* bytes of one position's K (or V) row */
#define LANE_MAX_TOTAL (16ull * 1024 * 1024 * 1024) /* bytes of all LAYER payloads of one handoff */
#define LANE_MAX_CHUNKS 1048576u
#define LANE_VERSION 3u
#define LANE_RUN_SOLO 0x80000000u              /* a held run's flag: its tokens ran as solo rows */
#define LANE_CLASS_LEN 32u                     /* a kernel class's name: ASCII [a-z0-9._-], NUL-padded */

enum {
    LANE_HELLO = 1, /* decoder -> producer: what it asks */
    LANE_BEGIN = 2, /* producer -> decoder: the sealed manifest header */
    LANE_LAYER = 3, /* producer -> decoder: one layer's rows of one step */
    LANE_SEAL = 4,  /* producer -> decoder: the header and every chunk digest, sealed */
    LANE_ABORT = 5, /* either way: code and reason; the handoff is void */
    LANE_ACK = 6,   /* decoder -> producer: committed (or not) */
    LANE_INFO = 7,  /* producer -> decoder: identity and epoch (probe, enroll) */
    LANE_PING = 8,  /* producer -> decoder, empty: still computing (between LAYER frames) */
};
enum { LANE_ASK_HANDOFF = 1, LANE_ASK_ENROLL = 2, LANE_ASK_PROBE = 3 };
enum { LANE_CLASS_FULL = 1, LANE_CLASS_SLIDING = 2 }; /* full = NoPE, sliding = RoPE */
enum { LANE_ABORT_BUSY = 429, LANE_ABORT_IDENTITY = 409, LANE_ABORT_AUTH = 403, LANE_ABORT_BAD = 400,
       LANE_ABORT_INTERNAL = 500 };

/* One frame as read: payload borrowed from the reader's buffer. */
typedef struct {
    unsigned type;
    uint32_t len;
    const uint8_t *p;
} lane_frame;

/* The 12-byte header of a frame of type with len payload bytes. */
void lane_frame_header(uint8_t out[LANE_HDR], unsigned type, uint32_t len);
/* Parses a header; checks magic, flags, reserved, the type and its limit. */
int lane_frame_parse(const uint8_t hdr[LANE_HDR], unsigned *type, uint32_t *len, mu_err *err);

/* ---- HELLO --------------------------------------------------------------- */
typedef struct {
    uint32_t version, ask;
    /* ask HANDOFF */
    uint8_t request_id[16], identity[32]; /* identity: mu_kv_ident_digest (without the kernel class) */
    char kclass[LANE_CLASS_LEN];          /* the kernel class whose rows the decoder accepts */
    uint32_t n_ctx, step;
    uint32_t n_have; /* delta: positions [0, n_have) the decoder holds (< n_ship) */
    uint32_t n_ship;
    const uint32_t *tokens;  /* encode: n_ship ids (borrowed) */
    const uint8_t *token_le; /* decode: n_ship little-endian u32 inside the payload */
    /* a delta: the forwards that made the decoder's rows of [0, n_have), in order, each a run
     * word (length in bits 0..30, LANE_RUN_SOLO when its tokens ran as solo rows); they sum
     * to n_have, and the producer replays them before its own steps from n_have */
    uint32_t n_runs;
    const uint32_t *runs;  /* encode: n_runs words (borrowed) */
    const uint8_t *run_le; /* decode: n_runs little-endian u32 inside the payload */
    /* ask ENROLL */
    uint8_t secret[32];
} lane_hello;
/* *out is malloc'ed (*n bytes), the payload of a HELLO frame. */
int lane_hello_encode(const lane_hello *h, uint8_t **out, size_t *n, mu_err *err);
/* token_le points into p. */
int lane_hello_decode(const uint8_t *p, size_t n, lane_hello *h, mu_err *err);
/* The decoded hello's n_ship token ids into out. */
void lane_hello_tokens(const lane_hello *h, uint32_t *out);
/* The decoded hello's n_runs run words into out. */
void lane_hello_runs(const lane_hello *h, uint32_t *out);

/* ---- the manifest -------------------------------------------------------- */
typedef struct {
    uint8_t cls;    /* LANE_CLASS_* */
    uint32_t lo;    /* first position shipped */
    uint32_t count; /* positions shipped: [lo, lo + count) */
} lane_layer;

typedef struct {
    uint8_t request_id[16], identity[32], token_digest[32];
    uint8_t runs_digest[32]; /* lane_runs_digest of the held prefix's forwards (a delta's split) */
    char kclass[LANE_CLASS_LEN]; /* the producer's kernel class: whose numerics made the rows */
    uint32_t n_ctx, step;
    uint32_t n_have; /* rows of positions below it are not shipped (delta) */
    uint32_t n_ship;
    uint64_t generation;
    uint32_t key_epoch;
    uint32_t row_bytes; /* bytes of one position's K row (= V row) */
    uint32_t n_layer;
    lane_layer layers[LANE_MAX_LAYERS];
    uint32_t n_chunks; /* LAYER frames that follow */
} lane_manifest;

/* The layer table of a model: class from swa, and what a handoff of n_ship
 * positions ships beyond the n_have the decoder holds: full layers
 * [n_have, n_ship), sliding layers the last min(n_ship, n_swa) positions
 * at or above n_have. */
void lane_layers_plan(lane_manifest *m, int n_layer, const bool *swa, int n_swa);
/* The number of LAYER frames of m and the i-th one's (il, pos0, n): step
 * by step from n_have (the producer's forwards after the held prefix),
 * layer by layer, skipping empty ranges. Returns false past the end. */
uint32_t lane_chunk_count(const lane_manifest *m);
bool lane_chunk_at(const lane_manifest *m, uint32_t i, uint32_t *il, uint32_t *pos0, uint32_t *n);

/* Header bytes (BEGIN) and the sealed SEAL: kind "BEGIN" or "SEAL". */
int lane_manifest_encode(const lane_manifest *m, uint8_t **out, size_t *n, mu_err *err);
int lane_manifest_decode(const uint8_t *p, size_t n, lane_manifest *m, mu_err *err);
/* BEGIN payload: header || HMAC(key, "muser/lane/v1/begin" || header). */
int lane_begin_encode(const lane_manifest *m, const uint8_t key[32], uint8_t **out, size_t *n, mu_err *err);
int lane_begin_open(const uint8_t *p, size_t n, const uint8_t key[32], lane_manifest *m, mu_err *err);
/* SEAL payload: header || n_chunks digests || HMAC(key, "muser/lane/v1/seal" || all before). */
int lane_seal_encode(const lane_manifest *m, const uint8_t (*digests)[32], const uint8_t key[32], uint8_t **out,
                     size_t *n, mu_err *err);
/* Checks the tag, then that the header equals begin's and the digests
 * equal want (n_chunks of them). */
int lane_seal_open(const uint8_t *p, size_t n, const uint8_t key[32], const lane_manifest *begin,
                   const uint8_t (*want)[32], mu_err *err);

/* ---- LAYER ----------------------------------------------------------------- */
/* payload: seq u32, il u32, pos0 u32, n u32, then K rows, then V rows. */
#define LANE_LAYER_HDR 16u
void lane_layer_header(uint8_t out[LANE_LAYER_HDR], uint32_t seq, uint32_t il, uint32_t pos0, uint32_t n);
/* Checks a LAYER payload against the i-th chunk m expects: seq, layer,
 * positions and size; *rows points at K then V (n * row_bytes each). */
int lane_layer_check(const uint8_t *p, size_t n, const lane_manifest *m, uint32_t i, const uint8_t **rows,
                     mu_err *err);

/* ---- ABORT, ACK, INFO -------------------------------------------------------- */
int lane_abort_encode(uint32_t code, const char *reason, uint8_t **out, size_t *n, mu_err *err);
/* reason is copied (NUL-terminated, printable ASCII) into cap bytes. */
int lane_abort_decode(const uint8_t *p, size_t n, uint32_t *code, char *reason, size_t cap, mu_err *err);

typedef struct {
    uint32_t version, key_epoch;
    uint8_t identity[32];
    char kclass[LANE_CLASS_LEN];
    uint32_t n_ctx_max;
    char name[128];
} lane_info;
int lane_info_encode(const lane_info *i, uint8_t **out, size_t *n, mu_err *err);
int lane_info_decode(const uint8_t *p, size_t n, lane_info *i, mu_err *err);

/* ACK: request id, committed (1) or not (0). */
void lane_ack_encode(const uint8_t request_id[16], bool ok, uint8_t out[20]);
int lane_ack_decode(const uint8_t *p, size_t n, uint8_t request_id[16], bool *ok, mu_err *err);

/* ---- crypto helpers (OpenSSL) -------------------------------------------------- */
void lane_sha256(const void *p, size_t n, uint8_t out[32]);
void lane_hmac(const uint8_t key[32], const char *label, const void *p, size_t n, uint8_t out[32]);
/* The SHA-256 of the token ids, little-endian u32 each. */
void lane_token_digest(const uint32_t *tokens, uint32_t n, uint8_t out[32]);
/* The SHA-256 of a delta's run words ("muser/lane/v3/runs" 0, then each u32). */
void lane_runs_digest(const uint32_t *runs, uint32_t n, uint8_t out[32]);
/* A kernel class name into its wire field (NUL-padded; false when it is
 * empty, too long or holds other characters than [a-z0-9._-]), and the
 * check of a decoded field. */
bool lane_class_put(char out[LANE_CLASS_LEN], const char *name);
bool lane_class_ok(const char f[LANE_CLASS_LEN]);
/* Constant-time equality. */
bool lane_eq(const void *a, const void *b, size_t n);
/* The reason word of a lane error message ("order", "digest", ...), or NULL. */
const char *lane_reason(const mu_err *err);

#endif
