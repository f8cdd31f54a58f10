/* kvsha_avx512.c: SHA-256 (FIPS 180-4) of up to 16 messages at once, one
 * message per 32-bit lane of AVX-512 registers: pack chunks hash their
 * content ids and digests this way, twice as fast per core as one message
 * at a time through the SHA extensions.
 * Owns: the lane layout (head blocks copied, body blocks read in place,
 * the padded tail copied), the 16x16 word transpose, the compression.
 * Does not own: when to use it (kvsha.c checks the CPU and falls back to
 * OpenSSL; test_kvpack compares the two). */
#include "kvpack.h"

#include <immintrin.h>
#include <string.h>

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
static const uint32_t IV[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

/* One lane's message as blocks: n_pre from pre (the head and the body's
 * first bytes up to a block boundary), n_body read where the body lies,
 * n_tail from tail (the rest and the padding). */
typedef struct {
    uint8_t pre[KV_SHA_HEAD + 64], tail[128];
    const uint8_t *body;
    size_t n_pre, n_body, n_tail;
} lane;

static void lane_plan(lane *l, const kv_sha_job *j) {
    size_t fill = (64 - j->head_n % 64) % 64, k = j->body_n < fill ? j->body_n : fill;
    if (j->head_n) memcpy(l->pre, j->head, j->head_n); /* head and body may be NULL when empty */
    if (k) memcpy(l->pre + j->head_n, j->body, k);
    size_t pre = j->head_n + k, rest = j->body_n - k;
    l->n_pre = pre / 64;
    l->body = j->body_n ? j->body + k : NULL;
    l->n_body = pre % 64 ? 0 : rest / 64;
    /* the bytes no block took: the pre's partial block (then the body is
     * used up) or the body's last partial block */
    size_t nl = pre % 64 ? pre % 64 : rest % 64;
    const uint8_t *left = pre % 64 ? l->pre + l->n_pre * 64 : nl ? l->body + l->n_body * 64 : NULL;
    memset(l->tail, 0, sizeof l->tail);
    if (nl) memcpy(l->tail, left, nl);
    l->tail[nl] = 0x80;
    l->n_tail = nl + 9 <= 64 ? 1 : 2;
    uint64_t bits = (uint64_t)(j->head_n + j->body_n) * 8;
    for (int i = 0; i < 8; i++) l->tail[l->n_tail * 64 - 1 - i] = (uint8_t)(bits >> (8 * i));
}

static const uint8_t *lane_block(const lane *l, size_t b) {
    if (b < l->n_pre) return l->pre + 64 * b;
    b -= l->n_pre;
    if (b < l->n_body) return l->body + 64 * b;
    b -= l->n_body;
    return b < l->n_tail ? l->tail + 64 * b : NULL;
}

#define ROR(x, n) _mm512_ror_epi32(x, n)
#define XOR3(a, b, c) _mm512_ternarylogic_epi32(a, b, c, 0x96)

/* W[t], lane j = big-endian word t of rows[j] */
static inline void load_words(__m512i W[16], const uint8_t *rows[16]) {
    const __m512i bs = _mm512_broadcast_i32x4(_mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL));
    __m512i r[16], t[16];
    for (int j = 0; j < 16; j++) r[j] = _mm512_shuffle_epi8(_mm512_loadu_si512(rows[j]), bs);
    for (int j = 0; j < 16; j += 2) {
        t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) {
        r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
        r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
        r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
        r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0x88);
        t[j + 4] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0xDD);
        t[j + 8] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0x88);
        t[j + 12] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0xDD);
    }
    for (int j = 0; j < 4; j++) {
        W[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        W[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xDD);
        W[j + 4] = _mm512_shuffle_i32x4(t[j + 4], t[j + 12], 0x88);
        W[j + 12] = _mm512_shuffle_i32x4(t[j + 4], t[j + 12], 0xDD);
    }
}

/* one block of every lane; lanes outside live keep their state */
static inline void compress(__m512i h[8], const uint8_t *rows[16], __mmask16 live) {
    __m512i W[16];
    load_words(W, rows);
    __m512i a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
#pragma GCC unroll 64
    for (int i = 0; i < 64; i++) {
        __m512i w;
        if (i < 16) {
            w = W[i];
        } else {
            __m512i w15 = W[(i - 15) & 15], w2 = W[(i - 2) & 15];
            __m512i s0 = XOR3(ROR(w15, 7), ROR(w15, 18), _mm512_srli_epi32(w15, 3));
            __m512i s1 = XOR3(ROR(w2, 17), ROR(w2, 19), _mm512_srli_epi32(w2, 10));
            w = _mm512_add_epi32(_mm512_add_epi32(W[i & 15], s0), _mm512_add_epi32(W[(i - 7) & 15], s1));
            W[i & 15] = w;
        }
        __m512i S1 = XOR3(ROR(e, 6), ROR(e, 11), ROR(e, 25));
        __m512i ch = _mm512_ternarylogic_epi32(e, f, g, 0xCA); /* e ? f : g */
        __m512i t1 = _mm512_add_epi32(_mm512_add_epi32(hh, S1),
                                      _mm512_add_epi32(ch, _mm512_add_epi32(w, _mm512_set1_epi32((int)K256[i]))));
        __m512i S0 = XOR3(ROR(a, 2), ROR(a, 13), ROR(a, 22));
        __m512i mj = _mm512_ternarylogic_epi32(a, b, c, 0xE8); /* majority */
        hh = g;
        g = f;
        f = e;
        e = _mm512_add_epi32(d, t1);
        d = c;
        c = b;
        b = a;
        a = _mm512_add_epi32(t1, _mm512_add_epi32(S0, mj));
    }
    __m512i v[8] = {a, b, c, d, e, f, g, hh};
    for (int k = 0; k < 8; k++) h[k] = _mm512_mask_add_epi32(h[k], live, h[k], v[k]);
}

void kv_sha256_x16(const kv_sha_job *jobs, int n) {
    static const uint8_t zero[64];
    lane L[16];
    size_t nb = 0;
    for (int j = 0; j < n; j++) {
        lane_plan(&L[j], &jobs[j]);
        size_t t = L[j].n_pre + L[j].n_body + L[j].n_tail;
        if (t > nb) nb = t;
    }
    __m512i h[8];
    for (int k = 0; k < 8; k++) h[k] = _mm512_set1_epi32((int)IV[k]);
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *rows[16];
        __mmask16 live = 0;
        for (int j = 0; j < 16; j++) {
            const uint8_t *r = j < n ? lane_block(&L[j], b) : NULL;
            rows[j] = r ? r : zero;
            if (r) live |= (__mmask16)(1u << j);
        }
        compress(h, rows, live);
    }
    uint32_t st[8][16];
    for (int k = 0; k < 8; k++) _mm512_storeu_si512(st[k], h[k]);
    for (int j = 0; j < n; j++)
        for (int k = 0; k < 8; k++) {
            uint32_t x = st[k][j];
            uint8_t *o = jobs[j].out + 4 * k;
            o[0] = (uint8_t)(x >> 24), o[1] = (uint8_t)(x >> 16), o[2] = (uint8_t)(x >> 8), o[3] = (uint8_t)x;
        }
}
