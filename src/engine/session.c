/* session.c: one sequence's KV cache and position.
 * Owns: the F16 cache (all layers in one lazily committed anonymous
 * mapping), truncation, and the exact state round trip (save/load, raw row
 * access for external installers).
 * Design: the cache has llama.cpp's cells: position p lives in cell
 * p % cells, with cells = n_ctx padded to 256 on full layers and llama.cpp's
 * SWA cache size on sliding ones (window + 513, padded to 256: node-llama-cpp
 * runs llama.cpp with ubatch 513 on sliding-window models), because the
 * attention's rounding depends on the cell index and the cells' order. K is [cell][n_kv];
 * V is stored transposed, [kv head][dim][cell], as llama.cpp's non-flash
 * cache does, so both attention products run along contiguous rows. */
#include "engine.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../base/mem.h"

int mu_session_new(mu_engine *e, int n_ctx, mu_session **out, mu_err *err) {
    const mu_model_info *I = &e->m->info;
    if (n_ctx <= 0) n_ctx = I->n_ctx_train;
    if (n_ctx > I->n_ctx_train)
        return mu_fail(err, MU_E_ARG, "session: context %d exceeds the model's context length %d", n_ctx,
                       I->n_ctx_train);
    mu_session *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "session: out of memory");
    s->e = e;
    s->n_ctx = n_ctx;
    s->rows = calloc((size_t)I->n_layer, sizeof *s->rows);
    s->kc = calloc((size_t)I->n_layer, sizeof *s->kc);
    s->vt = calloc((size_t)I->n_layer, sizeof *s->vt);
    if (!s->rows || !s->kc || !s->vt) {
        mu_session_free(s);
        return mu_fail(err, MU_E_NOMEM, "session: out of memory");
    }
    size_t total = 0, row_bytes = (size_t)e->n_kv * sizeof(mu_f16);
    /* llama.cpp sizes its SWA cache for window + ubatch cells; node-llama-cpp
     * (the pinned reference) asks for ubatch 513 on sliding-window models */
    const int full = (n_ctx + 255) / 256 * 256, want = I->n_swa + MU_UBATCH + 1, ring = want < n_ctx ? want : n_ctx;
    for (int il = 0; il < I->n_layer; il++) {
        s->rows[il] = I->swa_layers[il] ? (ring + 255) / 256 * 256 : full;
        size_t layer = 2 * (size_t)s->rows[il] * row_bytes;
        if (!mu_add_ok(total, layer, &total)) {
            mu_session_free(s);
            return mu_fail(err, MU_E_NOMEM, "session: KV cache size overflows");
        }
    }
    if (e->gpu) {
        int rc = mu_gpu_sess_new(e->gpu, s->rows, &s->gs, err);
        if (rc) {
            mu_session_free(s);
            return rc;
        }
        *out = s;
        return 0;
    }
    void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        mu_session_free(s);
        return mu_fail(err, MU_E_NOMEM, "session: cannot map %zu bytes of KV cache", total);
    }
    s->kv_map = map;
    s->kv_map_bytes = total;
    uint8_t *p = map;
    for (int il = 0; il < I->n_layer; il++) {
        s->kc[il] = (mu_f16 *)p;
        p += (size_t)s->rows[il] * row_bytes;
        s->vt[il] = (mu_f16 *)p;
        p += (size_t)s->rows[il] * row_bytes;
    }
    int rc = mu_engine_reserve_ctx(e, n_ctx, err);
    if (rc) {
        mu_session_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void mu_session_free(mu_session *s) {
    if (!s) return;
    if (s->kv_map) munmap(s->kv_map, s->kv_map_bytes);
    mu_shift_free(s);
    mu_gpu_sess_free(s->gs);
    free(s->rows);
    free(s->kc);
    free(s->vt);
    mu_session_logits_free(s);
    free(s);
}

void mu_session_logits_free(mu_session *s) {
    if (s->logits_pinned) mu_gpu_host_free(s->logits);
    else mu_free(s->logits);
    free(s->logits_best);
    s->logits = NULL;
    s->logits_best = NULL;
    s->logits_pinned = false;
    s->n_logits_cap = 0;
}

int mu_session_n_past(const mu_session *s) { return s->n_past; }
int mu_session_n_ctx(const mu_session *s) { return s->n_ctx; }

void mu_session_kv_bytes(const mu_session *s, int n_past, uint64_t *reserved, uint64_t *used) {
    const uint64_t row = 2 * (uint64_t)s->e->n_kv * sizeof(mu_f16); /* one cell's K and V rows */
    uint64_t r = 0, u = 0;
    for (int il = 0; il < s->e->m->info.n_layer; il++) {
        r += (uint64_t)s->rows[il] * row;
        u += (uint64_t)(n_past < 0 ? 0 : n_past < s->rows[il] ? n_past : s->rows[il]) * row;
    }
    *reserved = r;
    *used = u;
}

void mu_session_reset(mu_session *s) {
    mu_shift_free(s);
    s->hi = 0;
    s->installed = false;
    s->n_past = 0;
    s->n_logits = 0;
}

/* Oldest position layer il still holds. */
static int layer_lo(const mu_session *s, int il) {
    int lo = s->n_past - s->rows[il];
    return lo > 0 ? lo : 0;
}

bool mu_session_can_truncate(const mu_session *s, int n) {
    if (n < 0 || n > s->n_past) return false;
    if (s->cells) return mu_shift_truncate((mu_session *)s, n, true, NULL) == 0;
    int need = n - s->e->m->info.n_swa + 1;
    if (need < 0) need = 0;
    for (int il = 0; il < s->e->m->info.n_layer; il++)
        if (n < s->n_past && need < layer_lo(s, il)) return false;
    return true;
}

int mu_session_truncate(mu_session *s, int n, mu_err *err) {
    if (n < 0 || n > s->n_past)
        return mu_fail(err, MU_E_ARG, "session: cannot truncate to %d (holds %d positions)", n, s->n_past);
    if (s->cells) return mu_shift_truncate(s, n, false, err);
    const mu_model_info *I = &s->e->m->info;
    int need = n - I->n_swa + 1; /* the next position's window starts here */
    if (need < 0) need = 0;
    for (int il = 0; il < I->n_layer; il++)
        if (n < s->n_past && need < layer_lo(s, il))
            return mu_fail(err, MU_E_STATE,
                           "session: cannot truncate to %d: layer %d no longer holds position %d (holds %d..%d)", n,
                           il, need, layer_lo(s, il), s->n_past - 1);
    s->n_past = n;
    s->n_logits = 0;
    return 0;
}

const float *mu_session_logits(const mu_session *s, int i) {
    if (i < 0) i = s->n_logits - 1;
    if (i < 0 || i >= s->n_logits) return NULL;
    return s->logits + (size_t)i * (size_t)s->e->m->info.n_vocab;
}

int32_t mu_session_logits_best(const mu_session *s, int i) {
    if (i < 0) i = s->n_logits - 1;
    if (i < 0 || i >= s->n_logits || s->e->best_off) return -1;
    return s->logits_best[i];
}

/* ---- raw rows ---------------------------------------------------------- */

static int check_rows(const mu_session *s, int il, int pos0, int n, int hi, mu_err *err) {
    const mu_model_info *I = &s->e->m->info;
    if (il < 0 || il >= I->n_layer) return mu_fail(err, MU_E_ARG, "session: layer %d out of range", il);
    if (pos0 < 0 || n < 0 || pos0 + n > hi || n > s->rows[il])
        return mu_fail(err, MU_E_ARG, "session: positions %d..%d out of range for layer %d", pos0, pos0 + n - 1, il);
    return 0;
}

/* One position's K and V from [n_kv] rows into the cache. */
void mu_session_row_put(mu_session *s, int il, int pos, const uint16_t *k, const uint16_t *v) {
    const size_t nkv = (size_t)s->e->n_kv, cells = (size_t)s->rows[il], c = (size_t)(pos % s->rows[il]);
    memcpy(s->kc[il] + c * nkv, k, nkv * sizeof(mu_f16));
    for (size_t i = 0; i < nkv; i++) s->vt[il][i * cells + c] = v[i];
}

/* Positions [pos0, pos0 + n) of layer il between the GPU's cells and host
 * rows, in at most two runs of consecutive cells (the ring wraps once). */
static int gpu_rows(const mu_session *s, int il, int pos0, int n, uint16_t *k, uint16_t *v, bool put, mu_err *err) {
    const int nc = s->rows[il];
    const size_t rb = (size_t)s->e->n_kv;
    for (int done = 0; done < n;) {
        const int c = (pos0 + done) % nc, run = n - done < nc - c ? n - done : nc - c;
        int rc = put ? mu_gpu_kv_put(s->gs, il, c, run, k + done * rb, v + done * rb, err)
                     : mu_gpu_kv_get(s->gs, il, c, run, k + done * rb, v + done * rb, err);
        if (rc) return rc;
        done += run;
    }
    return 0;
}

/* Positions [pos0, pos0 + n) of layer il between the CPU cells and host
 * rows, by runs of consecutive cells: K rows in one copy per run; V, which
 * the cache keeps transposed ([n_kv][cells]), by blocks of TILE_P positions
 * x TILE_I dimensions, both directions walking a cache row's cells
 * innermost, so that both sides of the transpose stay in L1 (one element
 * per position across the whole ring, or a position's whole row at a
 * time, thrash it: the cache's rows are cells * 2 bytes apart; 4x faster
 * than the row-at-a-time order on the 1B shape). */
#define TILE_P 16
#define TILE_I 16
#if defined(__x86_64__)
/* Whole tiles go through an AVX2 transpose on CPUs that have it
 * (rows_avx2.c: 16 elements a load); MUSER_ROWS=ref keeps the scalar loops
 * (tests compare the two). */
static bool tile_avx2(void) {
    static atomic_int have = -1; /* sessions of several threads ask */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        const char *e = getenv("MUSER_ROWS");
        h = __builtin_cpu_supports("avx2") && !(e && !strcmp(e, "ref"));
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
#endif

static void cpu_rows(const mu_session *s, int il, int pos0, int n, uint16_t *k, uint16_t *v, bool put) {
#if defined(__x86_64__)
    const bool fast = tile_avx2();
#endif
    const int nc = s->rows[il];
    const size_t nkv = (size_t)s->e->n_kv, cells = (size_t)nc;
    for (int done = 0; done < n;) {
        const int c0 = (pos0 + done) % nc, run = n - done < nc - c0 ? n - done : nc - c0;
        uint16_t *kr = k + (size_t)done * nkv, *vr = v + (size_t)done * nkv;
        if (put) memcpy(s->kc[il] + (size_t)c0 * nkv, kr, (size_t)run * nkv * sizeof(mu_f16));
        else memcpy(kr, s->kc[il] + (size_t)c0 * nkv, (size_t)run * nkv * sizeof(mu_f16));
        for (int t0 = 0; t0 < run; t0 += TILE_P)
            for (size_t i0 = 0; i0 < nkv; i0 += TILE_I) {
                const int tn = run - t0 < TILE_P ? run - t0 : TILE_P;
                const size_t in = nkv - i0 < TILE_I ? nkv - i0 : TILE_I;
                uint16_t *cell = s->vt[il] + i0 * cells + (size_t)(c0 + t0), *row = vr + (size_t)t0 * nkv + i0;
#if defined(__x86_64__)
                if (fast && tn == TILE_P && in == TILE_I) {
                    if (put) mu_rows_tr16_avx2(row, nkv, cell, cells);
                    else mu_rows_tr16_avx2(cell, cells, row, nkv);
                    continue;
                }
#endif
                if (put)
                    for (size_t i = 0; i < in; i++)
                        for (int p = 0; p < tn; p++) cell[i * cells + (size_t)p] = row[(size_t)p * nkv + i];
                else
                    for (size_t i = 0; i < in; i++)
                        for (int p = 0; p < tn; p++) row[(size_t)p * nkv + i] = cell[i * cells + (size_t)p];
            }
        done += run;
    }
}

/* Rows leave or enter by position only while cell == position. */
static int check_unshifted(const mu_session *s, mu_err *err) {
    if (!s->cells) return 0;
    return mu_fail(err, MU_E_STATE, "session: the context was shifted: its cells no longer follow positions, so "
                                    "its rows cannot be read or installed by position (reset it first)");
}

int mu_session_kv_read(const mu_session *s, int il, int pos0, int n, uint16_t *k, uint16_t *v, mu_err *err) {
    int rc = check_unshifted(s, err);
    if (rc) return rc;
    rc = check_rows(s, il, pos0, n, s->n_past, err);
    if (rc) return rc;
    if (pos0 < layer_lo(s, il))
        return mu_fail(err, MU_E_STATE, "session: layer %d no longer holds position %d", il, pos0);
    if (s->gs) return gpu_rows(s, il, pos0, n, k, v, false, err);
    cpu_rows(s, il, pos0, n, k, v, false);
    return 0;
}

int mu_session_kv_write(mu_session *s, int il, int pos0, int n, const uint16_t *k, const uint16_t *v, mu_err *err) {
    int rc = check_unshifted(s, err);
    if (!rc) rc = check_rows(s, il, pos0, n, s->n_ctx, err);
    if (rc) return rc;
    s->installed = true;
    if (s->gs) return gpu_rows(s, il, pos0, n, (uint16_t *)k, (uint16_t *)v, true, err);
    cpu_rows(s, il, pos0, n, (uint16_t *)k, (uint16_t *)v, true);
    return 0;
}

int mu_session_kv_commit(mu_session *s, int n, mu_err *err) {
    if (n < 0 || n > s->n_ctx) return mu_fail(err, MU_E_ARG, "session: cannot commit %d positions", n);
    int rc = check_unshifted(s, err);
    if (rc) return rc;
    s->n_past = n;
    s->hi = n > s->hi ? n : s->hi;
    s->installed = true;
    s->n_logits = 0;
    return 0;
}

/* ---- state bytes ------------------------------------------------------- */
/* Layout (little-endian): "MUKV" u32 version=1, u32 n_layer, u32 n_kv,
 * u32 n_swa, u32 n_past, then per layer: u32 lo, u32 count, count K rows,
 * count V rows (F16, n_kv each). Normative text: docs/kv-state.md. */

#define STATE_VERSION 1u

size_t mu_session_state_bytes(const mu_session *s) {
    const mu_model_info *I = &s->e->m->info;
    size_t n = 24, rb = (size_t)s->e->n_kv * sizeof(mu_f16);
    for (int il = 0; il < I->n_layer; il++) n += 8 + 2 * (size_t)(s->n_past - layer_lo(s, il)) * rb;
    return n;
}

static void put32(uint8_t **p, uint32_t v) {
    memcpy(*p, &v, 4);
    *p += 4;
}

static uint32_t get32(const uint8_t **p) {
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

int mu_session_state_save(const mu_session *s, void *buf, size_t cap, size_t *written, mu_err *err) {
    const mu_model_info *I = &s->e->m->info;
    int rc0 = check_unshifted(s, err);
    if (rc0) return rc0;
    size_t need = mu_session_state_bytes(s), rb = (size_t)s->e->n_kv;
    if (cap < need) return mu_fail(err, MU_E_ARG, "session: state needs %zu bytes, buffer has %zu", need, cap);
    uint8_t *p = buf;
    memcpy(p, "MUKV", 4);
    p += 4;
    put32(&p, STATE_VERSION);
    put32(&p, (uint32_t)I->n_layer);
    put32(&p, (uint32_t)s->e->n_kv);
    put32(&p, (uint32_t)I->n_swa);
    put32(&p, (uint32_t)s->n_past);
    for (int il = 0; il < I->n_layer; il++) {
        int lo = layer_lo(s, il), cnt = s->n_past - lo;
        put32(&p, (uint32_t)lo);
        put32(&p, (uint32_t)cnt);
        int rc = mu_session_kv_read(s, il, lo, cnt, (uint16_t *)p, (uint16_t *)(p + (size_t)cnt * rb * 2), err);
        if (rc) return rc; /* only a GPU's copy can fail */
        p += 2 * (size_t)cnt * rb * sizeof(mu_f16);
    }
    *written = (size_t)(p - (uint8_t *)buf);
    return 0;
}

int mu_session_copy(mu_session *dst, const mu_session *src, mu_err *err) {
    if (dst == src || dst->e != src->e) return mu_fail(err, MU_E_ARG, "session: a copy needs two sessions of one engine");
    int rc = check_unshifted(src, err);
    if (rc) return rc;
    if (src->n_past > dst->n_ctx)
        return mu_fail(err, MU_E_ARG, "session: copy: %d positions, the session's context is %d", src->n_past, dst->n_ctx);
    const int nl = dst->e->m->info.n_layer;
    for (int il = 0; il < nl; il++)
        if (dst->rows[il] != src->rows[il])
            return mu_fail(err, MU_E_ARG, "session: copy: layer %d has %d cells, the source's %d", il, dst->rows[il],
                           src->rows[il]);
    mu_shift_free(dst); /* every cell is replaced: back to cell == position */
    if (dst->gs) rc = mu_gpu_sess_copy(dst->gs, src->gs, err);
    else
        for (int il = 0; il < nl; il++) {
            const size_t n = (size_t)src->rows[il] * (size_t)src->e->n_kv * sizeof(mu_f16);
            memcpy(dst->kc[il], src->kc[il], n);
            memcpy(dst->vt[il], src->vt[il], n);
        }
    if (rc) {
        mu_session_reset(dst);
        return rc;
    }
    dst->n_past = src->n_past;
    dst->hi = src->n_past;
    dst->installed = true;
    dst->n_logits = 0;
    return 0;
}

int mu_session_state_load(mu_session *s, const void *buf, size_t n, mu_err *err) {
    const mu_model_info *I = &s->e->m->info;
    const uint8_t *p = buf, *end = p + n;
    size_t rb = (size_t)s->e->n_kv;
    if (n < 24 || memcmp(p, "MUKV", 4) != 0) return mu_fail(err, MU_E_FORMAT, "session: state: bad magic");
    p += 4;
    uint32_t ver = get32(&p), nl = get32(&p), nkv = get32(&p), swa = get32(&p), past = get32(&p);
    if (ver != STATE_VERSION) return mu_fail(err, MU_E_FORMAT, "session: state: unsupported version %u", ver);
    if (nl != (uint32_t)I->n_layer || nkv != (uint32_t)s->e->n_kv || swa != (uint32_t)I->n_swa)
        return mu_fail(err, MU_E_FORMAT, "session: state: geometry mismatch (layers %u, kv width %u, window %u)", nl,
                       nkv, swa);
    if (past > (uint32_t)s->n_ctx)
        return mu_fail(err, MU_E_ARG, "session: state holds %u positions, session context is %d", past, s->n_ctx);
    /* validate everything before touching the cache */
    const uint8_t *q = p;
    for (int il = 0; il < I->n_layer; il++) {
        if (end - q < 8) return mu_fail(err, MU_E_FORMAT, "session: state: truncated at layer %d", il);
        uint32_t lo = get32(&q), cnt = get32(&q);
        /* a full layer needs every position; a sliding one the last window */
        uint32_t need = 0;
        if (I->swa_layers[il] && past >= (uint32_t)I->n_swa) need = past - (uint32_t)I->n_swa + 1;
        if ((uint64_t)lo + cnt != past || lo > need)
            return mu_fail(err, MU_E_FORMAT, "session: state: layer %d holds positions %u+%u, needs %u..%u", il, lo,
                           cnt, need, past);
        size_t bytes = 2 * (size_t)cnt * rb * sizeof(mu_f16);
        if ((size_t)(end - q) < bytes) return mu_fail(err, MU_E_FORMAT, "session: state: truncated in layer %d", il);
        q += bytes;
    }
    if (q != end) return mu_fail(err, MU_E_FORMAT, "session: state: %zu trailing bytes", (size_t)(end - q));
    mu_shift_free(s); /* the state replaces every cell: back to cell == position */
    for (int il = 0; il < I->n_layer; il++) {
        uint32_t lo = get32(&p), cnt = get32(&p);
        uint32_t want_lo = past > (uint32_t)s->rows[il] ? past - (uint32_t)s->rows[il] : 0;
        size_t skip = want_lo > lo ? want_lo - lo : 0; /* rows older than this session's ring can hold */
        const uint16_t *k = (const uint16_t *)p, *v = (const uint16_t *)(p + (size_t)cnt * rb * 2);
        int rc = mu_session_kv_write(s, il, (int)(lo + skip), (int)(cnt - skip), k + skip * rb, v + skip * rb, err);
        if (rc) { /* only a GPU's copy can fail: nothing half-installed stays */
            mu_session_reset(s);
            return rc;
        }
        p += 2 * (size_t)cnt * rb * sizeof(mu_f16);
    }
    s->n_past = (int)past;
    s->hi = (int)past;
    s->n_logits = 0;
    return 0;
}
