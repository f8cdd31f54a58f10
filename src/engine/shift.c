/* shift.c: the context shift (llama.cpp's server with --context-shift).
 * Owns: mu_session_shift, the cell maps of a shifted session (which cell
 * holds which position, in the full layers' cache and in the sliding ring),
 * placing a chunk's tokens in cells as llama.cpp's allocator does, the K
 * rotation a shift owes, and truncating a shifted session.
 * Does not: attend (attn.c reads the maps) or decide when to shift (the
 * scheduler, src/gen/sched.c).
 *
 * Design: an unshifted session keeps position p in cell p % rows and needs
 * no map. A shift removes positions [n_keep, n_keep + n_discard) and moves
 * the later ones back by n_discard (llama.cpp's seq_rm and seq_add on both
 * caches of its iswa memory): cells and positions part, so from then on the
 * session carries llama.cpp's per-cache state (position of each cell, the
 * search head, the count of used cells) and places new tokens with its
 * find_slot (cells tested one by one from the head; a cell is usable when
 * empty or, in the ring, outside the window of the sequence's last position)
 * and apply_ubatch (positions older than an overwritten one are purged).
 * The K rows of every cell of a cache with a moved cell are rotated at the
 * next forward (over the engine's threads, a whole row per unit), as
 * llama.cpp's K-shift graph does: RoPE of the accumulated
 * shift (0 for the others, which only clears signs of zeros) on every
 * layer, including the full layers that the forward never rotates (the
 * model's rope pattern is all ones in llama.cpp), with the full layers'
 * base there and the sliding base in the ring; F16 in, float FMAs, F16 out.
 * Rows of a shifted session never leave it (kv_read, state_save refuse):
 * packs, the prefix cache and the lane assume cell == position. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/mem.h"
#include "engine.h"

#define ROPE_MAX_HD 512

static int which(const mu_session *s, int il) { return s->e->m->info.swa_layers[il] ? 1 : 0; }

/* Cells of the full layers (0) and of the ring (1); 0 when the model has no
 * such layer. */
static int cache_rows(const mu_session *s, int w) {
    const mu_model_info *I = &s->e->m->info;
    for (int il = 0; il < I->n_layer; il++)
        if (which(s, il) == w) return s->rows[il];
    return 0;
}

void mu_shift_free(mu_session *s) {
    if (!s->cells) return;
    for (int w = 0; w < 2; w++) {
        free(s->cells[w].pos);
        free(s->cells[w].shift);
    }
    free(s->cells);
    s->cells = NULL;
}

bool mu_session_shifted(const mu_session *s) { return s->cells != NULL; }

/* The maps of the unshifted layout: full cell c holds c; ring cell c the
 * last position written there, unless a truncation removed it. */
static int build_maps(mu_session *s, mu_err *err) {
    mu_cells *c = calloc(2, sizeof *c);
    if (!c) return mu_fail(err, MU_E_NOMEM, "session: out of memory for the cell map");
    s->cells = c;
    for (int w = 0; w < 2; w++) {
        const int n = cache_rows(s, w);
        c[w].n = n;
        c[w].pos = malloc((size_t)(n ? n : 1) * sizeof(int));
        c[w].shift = calloc((size_t)(n ? n : 1), sizeof(int));
        if (!c[w].pos || !c[w].shift) {
            mu_shift_free(s);
            return mu_fail(err, MU_E_NOMEM, "session: out of memory for the cell map");
        }
        for (int i = 0; i < n; i++) {
            int p = -1;
            if (i < s->hi) {
                const int q = i + (s->hi - 1 - i) / n * n; /* last position written to cell i */
                p = q < s->n_past ? q : -1;
            }
            c[w].pos[i] = p;
            c[w].used += p >= 0;
        }
        c[w].head = s->n_past % (n ? n : 1);
    }
    return 0;
}

/* llama.cpp's seq_rm over positions [p0, p1) of one cache. */
static void cells_rm(mu_cells *c, int p0, int p1) {
    int new_head = c->n;
    for (int i = 0; i < c->n; i++) {
        if (c->pos[i] < 0 || c->pos[i] < p0 || c->pos[i] >= p1) continue;
        c->pos[i] = -1;
        c->shift[i] = 0;
        c->used--;
        if (new_head == c->n) new_head = i;
    }
    if (new_head != c->n && new_head < c->head) c->head = new_head;
}

/* llama.cpp's seq_add: positions [p0, p1) move by d. */
static void cells_add(mu_cells *c, int p0, int p1, int d) {
    if (d == 0 || p0 == p1) return;
    int new_head = c->n;
    for (int i = 0; i < c->n; i++) {
        if (c->pos[i] < 0 || c->pos[i] < p0 || c->pos[i] >= p1) continue;
        c->pos[i] += d;
        c->shift[i] += d;
        c->pending = true;
        if (c->pos[i] < 0) {
            c->pos[i] = -1;
            c->shift[i] = 0;
            c->used--;
            if (new_head == c->n) new_head = i;
        }
    }
    c->head = new_head != c->n ? new_head : 0;
}

int mu_session_shift(mu_session *s, int n_keep, int n_discard, mu_err *err) {
    if (s->gs)
        return mu_fail(err, MU_E_STATE, "session: the context shift needs the CPU backend (the CUDA engine keeps "
                                        "position p in cell p)");
    if (n_keep < 0 || n_discard <= 0 || n_keep + n_discard > s->n_past)
        return mu_fail(err, MU_E_ARG, "session: cannot shift out positions %d..%d (holds %d)", n_keep,
                       n_keep + n_discard - 1, s->n_past);
    if (s->installed && !s->cells)
        return mu_fail(err, MU_E_STATE, "session: cannot shift a session whose rows were installed (a pack, the "
                                        "prefix cache, a saved state): its ring's other cells are unknown");
    if (!s->cells) {
        int rc = build_maps(s, err);
        if (rc) return rc;
    }
    for (int w = 0; w < 2; w++) {
        cells_rm(&s->cells[w], n_keep, n_keep + n_discard);
        cells_add(&s->cells[w], n_keep + n_discard, s->n_past, -n_discard);
    }
    s->n_past -= n_discard;
    s->hi = s->n_past;
    s->n_logits = 0;
    return 0;
}

/* ---- the K rotation ---------------------------------------------------- */

/* ggml's rope on F16 rows (rotate_pairs, "normal" mode): each pair read as
 * float, the two FMAs of llama.cpp's build, written back rounded to F16. */
static void rotate_row(const mu_kern *k, mu_f16 *row, int n_head_kv, int hd, const float *cs, const float *sn,
                       float *buf) {
    for (int h = 0; h < n_head_kv; h++) {
        mu_f16 *r = row + (size_t)h * hd;
        for (int i = 0; i < hd; i++) buf[i] = mu_f16_to_f32(r[i]);
        for (int i = 0; i < hd; i += 2) {
            const float c = cs[i / 2], sv = sn[i / 2], x0 = buf[i], x1 = buf[i + 1];
            buf[i] = fmaf(x0, c, -(x1 * sv));
            buf[i + 1] = fmaf(x0, sv, x1 * c);
        }
        k->to_f16(hd, buf, r);
    }
}

/* The rotation of cache w over the pool: units are (layer of w, cell),
 * each row rotated whole by one thread, so the split changes nothing. */
typedef struct {
    mu_session *s;
    int w, n_layers;
    const int *layers; /* the layers of cache w */
} rot_job;

static void job_rot(void *arg, int ith, int nth) {
    const rot_job *j = arg;
    mu_session *s = j->s;
    const mu_model_info *I = &s->e->m->info;
    const mu_cells *c = &s->cells[j->w];
    const int hd = I->head_dim;
    const float base = j->w ? I->rope_base_swa : I->rope_base;
    float buf[ROPE_MAX_HD], cs[ROPE_MAX_HD / 2], sn[ROPE_MAX_HD / 2];
    int lo, hi, last = 0;
    mu_rope_angles(cs, sn, hd, 0, base);
    mu_split(j->n_layers * c->n, ith, nth, 1, &lo, &hi);
    for (int u = lo; u < hi; u++) {
        const int il = j->layers[u / c->n], i = u % c->n;
        const int d = c->pos[i] < 0 ? 0 : c->shift[i];
        if (d != last) {
            mu_rope_angles(cs, sn, hd, d, base);
            last = d;
        }
        rotate_row(s->e->kern, s->kc[il] + (size_t)i * s->e->n_kv, I->n_head_kv, hd, cs, sn, buf);
    }
}

void mu_shift_apply(mu_session *s) {
    if (!s->cells) return;
    const mu_model_info *I = &s->e->m->info;
    MU_ASSERT(I->head_dim <= ROPE_MAX_HD);
    int layers[I->n_layer];
    for (int w = 0; w < 2; w++) {
        mu_cells *c = &s->cells[w];
        if (!c->pending) continue;
        rot_job j = {.s = s, .w = w, .layers = layers};
        for (int il = 0; il < I->n_layer; il++)
            if (which(s, il) == w) layers[j.n_layers++] = il;
        mu_pool_run(s->e->pool, job_rot, &j);
        memset(c->shift, 0, (size_t)c->n * sizeof(int));
        c->pending = false;
    }
}

/* ---- placing tokens ---------------------------------------------------- */

static int cells_pos_max(const mu_cells *c) {
    int m = -1;
    for (int i = 0; i < c->n; i++) m = c->pos[i] > m ? c->pos[i] : m;
    return m;
}

static int cells_pos_min(const mu_cells *c) {
    int m = -1;
    for (int i = 0; i < c->n; i++)
        if (c->pos[i] >= 0 && (m < 0 || c->pos[i] < m)) m = c->pos[i];
    return m;
}

/* llama.cpp's find_slot (cells tested one at a time) then apply_ubatch for
 * n tokens at positions pos0.., into out[2 * t]. */
static void cells_place(mu_cells *c, int n_swa, int pos0, int n, int *out) {
    MU_ASSERT(n <= c->n);
    const int pmax = cells_pos_max(c);
    int head = c->head, tested = 0, got = 0;
    if (head > c->used + 2 * n) head = 0;
    int *idx = out;
    while (got < n) {
        if (head + 1 > c->n) {
            tested += c->n - head;
            head = 0;
            continue;
        }
        const int i = head++;
        tested++;
        bool ok = c->pos[i] < 0;
        if (!ok && n_swa > 0 && pmax + 1 - c->pos[i] >= n_swa) ok = true; /* outside the window */
        if (ok) idx[2 * got++] = i;
        MU_ASSERT(got == n || tested < c->n); /* the cache always has room: positions <= cells */
    }
    int max_rm = -1;
    for (int t = 0; t < n; t++) {
        const int i = idx[2 * t];
        if (c->pos[i] >= 0) {
            max_rm = c->pos[i] > max_rm ? c->pos[i] : max_rm;
            c->used--;
        }
        c->pos[i] = pos0 + t;
        c->shift[i] = 0;
        c->used++;
    }
    if (max_rm >= 0) {
        const int lo = cells_pos_min(c);
        if (lo <= max_rm) cells_rm(c, lo, max_rm + 1);
    }
    c->head = idx[2 * (n - 1)] + 1;
}

void mu_shift_place(mu_engine *e, mu_session *s, int t0, int n) {
    const int pos0 = e->s.tok_pos[t0];
    if (pos0 + n > s->hi) s->hi = pos0 + n;
    if (!s->cells) {
        const int r0 = cache_rows(s, 0), r1 = cache_rows(s, 1);
        for (int t = 0; t < n; t++) {
            e->s.tok_cell[2 * (t0 + t)] = r0 ? (pos0 + t) % r0 : 0;
            e->s.tok_cell[2 * (t0 + t) + 1] = r1 ? (pos0 + t) % r1 : 0;
        }
        return;
    }
    if (s->cells[0].n) cells_place(&s->cells[0], 0, pos0, n, e->s.tok_cell + 2 * t0);
    if (s->cells[1].n) cells_place(&s->cells[1], e->m->info.n_swa, pos0, n, e->s.tok_cell + 2 * t0 + 1);
}

int mu_shift_used_end(const mu_session *s, int il) {
    const mu_cells *c = &s->cells[which(s, il)];
    int hi = 0;
    for (int i = 0; i < c->n; i++)
        if (c->pos[i] >= 0) hi = i + 1;
    return hi;
}

/* ---- truncation --------------------------------------------------------- */

/* Whether the ring still holds every position the window of position n
 * needs ([n - n_swa + 1, n)). */
static bool ring_holds(const mu_session *s, int n) {
    const mu_cells *c = &s->cells[1];
    if (!c->n || n == 0) return true;
    int lo = n - s->e->m->info.n_swa + 1, cnt = 0;
    if (lo < 0) lo = 0;
    for (int i = 0; i < c->n; i++) cnt += c->pos[i] >= lo && c->pos[i] < n;
    return cnt == n - lo;
}

int mu_shift_truncate(mu_session *s, int n, bool dry, mu_err *err) {
    if (n < s->n_past && !ring_holds(s, n)) {
        if (!dry)
            mu_fail(err, MU_E_STATE, "session: cannot truncate the shifted session to %d: the ring no longer holds "
                                     "the window before it", n);
        return MU_E_STATE;
    }
    if (dry) return 0;
    if (n == 0) { /* empty: llama.cpp's cells are all free again, head 0, which is the plain layout */
        mu_shift_free(s);
        s->n_past = s->hi = 0;
        s->n_logits = 0;
        return 0;
    }
    for (int w = 0; w < 2; w++) cells_rm(&s->cells[w], n, INT32_MAX);
    s->n_past = n;
    s->n_logits = 0;
    return 0;
}
