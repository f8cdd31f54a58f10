/* kvcache.c: the resident prefix cache and the reuse ladder below the live
 * slot (include/muser_kv.h): a token radix tree of KV checkpoints, its byte
 * budget and LRU eviction, and the search of the pack store behind it.
 * Owns: tree nodes (one block of tokens and the rows of its positions),
 * sessions' lineages, eviction, pins, the counters.
 * Does not own: sessions (the scheduler's), the pack format (kvengine.c and
 * below), when to look up or capture (the scheduler decides).
 * Design: the tree's edges are fixed blocks of B tokens, so a node at depth
 * d covers positions [(d-1)B, dB) and a checkpoint is a path from the root.
 * Rows are copied out of a live session as it completes blocks (capture),
 * and only where the session's lineage matches the tree: a node is added
 * under a parent whose rows the session itself holds (it restored them from
 * that node or inserted them), never under a node another session computed
 * (two sessions that prefilled the same tokens with different ubatch splits
 * hold rows that differ in the last bits). So every path's rows are the rows
 * of one live session, and a restore continues that session bit for bit.
 * A sliding layer's rows are kept only while the capturing session's ring
 * still held them; a checkpoint is restorable when every node inside its
 * window has them. Eviction drops the least recently used unpinned leaf, so
 * a node's ancestors are always present. */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "../../include/muser_kv.h"
#include "../engine/engine.h"
#include "../model/model.h"
#include "kvpack.h"

typedef struct node node;
struct node {
    node *parent, *child, *next; /* the tree: first child, next sibling */
    node *prev_all, *next_all;   /* every node, for eviction */
    uint64_t id, stamp;
    int depth;                   /* positions [(depth-1)*B, depth*B) */
    int pins;
    bool has_swa;                /* the sliding layers' rows are here too */
    size_t bytes;
    int32_t *tok;                /* [B] */
    uint16_t *rows;              /* per layer held: K [B][n_kv] then V [B][n_kv] */
};

struct mu_kv_cache {
    const mu_engine *e;
    int L, nkv, n_swa, B;
    bool *swa;                   /* [L] sliding layers */
    size_t max_bytes;
    pthread_mutex_t mu;
    node root;                   /* depth 0, no rows */
    node *all;                   /* every node but the root */
    uint64_t next_id, clock;
    char *pack_dir;
    uint8_t key[32];
    const mu_kv_ident *id;
    void (*log)(void *user, const char *line);
    void *log_user;
    mu_kv_cache_stats st;
};

struct mu_kv_lineage {
    int B, cap, n_swa;
    int n_blk;                   /* blocks [0, n_blk) of the session are the rows of nodes ids[0..n_blk) */
    int swa_lo;                  /* the sliding layers' rows are the session's own from this position on
                                    (rows installed from elsewhere cover only the window) */
    uint64_t ids[];
};

const char *mu_kv_src_name(int src) {
    static const char *const names[MU_KV_SRC_COUNT] = {"none", "slot", "cache", "pack"};
    return src >= 0 && src < MU_KV_SRC_COUNT ? names[src] : "?";
}

int mu_kv_cache_new(const mu_engine *e, const mu_kv_cache_opts *o, mu_kv_cache **out, mu_err *err) {
    int B = o->block ? o->block : MU_KV_CACHE_DEFAULT_BLOCK;
    if (B < 1 || B > 4096) return mu_fail(err, MU_E_ARG, "kvcache: block must be 1..4096 tokens: %d", B);
    if (o->pack_dir && (!o->key || !o->id))
        return mu_fail(err, MU_E_ARG, "kvcache: a pack store needs the root key and the identity");
    const mu_model_info *I = mu_model_get_info(e->m);
    mu_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return mu_fail(err, MU_E_NOMEM, "kvcache: out of memory");
    c->swa = calloc((size_t)I->n_layer, sizeof *c->swa);
    c->pack_dir = o->pack_dir ? strdup(o->pack_dir) : NULL;
    if (!c->swa || (o->pack_dir && !c->pack_dir)) {
        free(c->swa);
        free(c);
        return mu_fail(err, MU_E_NOMEM, "kvcache: out of memory");
    }
    c->e = e;
    c->L = I->n_layer;
    c->nkv = e->n_kv;
    c->n_swa = I->n_swa;
    for (int il = 0; il < c->L; il++) c->swa[il] = I->swa_layers[il];
    c->B = B;
    c->max_bytes = o->max_bytes ? o->max_bytes : MU_KV_CACHE_DEFAULT_BYTES;
    if (o->pack_dir) memcpy(c->key, o->key, 32);
    c->id = o->id;
    c->log = o->log;
    c->log_user = o->log_user;
    c->next_id = 1;
    c->st.max_bytes = c->max_bytes;
    c->st.block = (uint64_t)B;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

static void node_free(node *n) {
    if (!n) return;
    free(n->tok);
    free(n->rows);
    free(n);
}

void mu_kv_cache_free(mu_kv_cache *c) {
    if (!c) return;
    for (node *n = c->all, *nx; n; n = nx) {
        nx = n->next_all;
        node_free(n);
    }
    pthread_mutex_destroy(&c->mu);
    mu_kv_key_wipe(c->key);
    free(c->pack_dir);
    free(c->swa);
    free(c);
}

/* ---- lineage -------------------------------------------------------------- */

int mu_kv_lineage_new(const mu_kv_cache *c, int n_ctx, mu_kv_lineage **out, mu_err *err) {
    int cap = n_ctx / c->B + 1;
    mu_kv_lineage *l = calloc(1, sizeof *l + (size_t)cap * sizeof l->ids[0]);
    if (!l) return mu_fail(err, MU_E_NOMEM, "kvcache: out of memory");
    l->B = c->B;
    l->cap = cap;
    l->n_swa = c->n_swa;
    *out = l;
    return 0;
}

void mu_kv_lineage_free(mu_kv_lineage *l) { free(l); }

void mu_kv_lineage_cut(mu_kv_lineage *l, int n) {
    if (!l) return;
    if (l->n_blk > n / l->B) l->n_blk = n / l->B;
    if (n == 0) l->swa_lo = 0;
}

void mu_kv_lineage_foreign(mu_kv_lineage *l, int swa_lo) {
    if (!l) return;
    l->n_blk = 0;
    l->swa_lo = swa_lo;
}

int mu_kv_lineage_swa_lo(const mu_kv_lineage *l) { return l ? l->swa_lo : 0; }

/* ---- the tree ------------------------------------------------------------- */

static bool layer_held(const mu_kv_cache *c, const node *n, int il) { return !c->swa[il] || n->has_swa; }

/* K rows of layer il in node n ([B][n_kv]; V follows); NULL when not held. */
static uint16_t *layer_rows(const mu_kv_cache *c, const node *n, int il) {
    if (!layer_held(c, n, il)) return NULL;
    size_t off = 0, per = 2 * (size_t)c->B * (size_t)c->nkv;
    for (int k = 0; k < il; k++) off += layer_held(c, n, k) ? per : 0;
    return n->rows + off;
}

static size_t node_bytes(const mu_kv_cache *c, bool has_swa) {
    size_t per = 2 * (size_t)c->B * (size_t)c->nkv * sizeof(uint16_t), n = 0;
    for (int il = 0; il < c->L; il++) n += !c->swa[il] || has_swa ? per : 0;
    return n + (size_t)c->B * sizeof(int32_t) + sizeof(node);
}

static node *find_child(const mu_kv_cache *c, const node *p, const int32_t *tok) {
    for (node *n = p->child; n; n = n->next)
        if (n->tok[0] == tok[0] && !memcmp(n->tok, tok, (size_t)c->B * sizeof *tok)) return n;
    return NULL;
}

static void unlink_node(mu_kv_cache *c, node *n) {
    node **pp = &n->parent->child;
    while (*pp != n) pp = &(*pp)->next;
    *pp = n->next;
    if (n->prev_all) n->prev_all->next_all = n->next_all;
    else c->all = n->next_all;
    if (n->next_all) n->next_all->prev_all = n->prev_all;
    c->st.bytes -= n->bytes;
    c->st.n_nodes--;
    c->st.n_evicted++;
    node_free(n);
}

/* Evicts least recently used unpinned leaves until `want` more bytes fit. */
static bool make_room(mu_kv_cache *c, size_t want) {
    if (want > c->max_bytes) return false;
    while (c->st.bytes + want > c->max_bytes) {
        node *lru = NULL;
        for (node *n = c->all; n; n = n->next_all)
            if (!n->child && n->pins == 0 && (!lru || n->stamp < lru->stamp)) lru = n;
        if (!lru) return false;
        unlink_node(c, lru);
    }
    return true;
}

/* A new child of p for block k of a session holding positions [0, n_past):
 * the rows come from s; the sliding layers' too when its ring still has them. */
static node *insert(mu_kv_cache *c, node *p, const mu_session *s, const mu_kv_lineage *l, const int32_t *tok,
                    int k) {
    int pos0 = k * c->B;
    bool has_swa = pos0 >= l->swa_lo;
    for (int il = 0; il < c->L; il++)
        if (c->swa[il] && pos0 < s->n_past - s->rows[il]) has_swa = false;
    size_t bytes = node_bytes(c, has_swa);
    p->pins++; /* the parent may be a leaf: keep it */
    bool room = make_room(c, bytes);
    p->pins--;
    if (!room) return NULL;
    node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->has_swa = has_swa;
    n->tok = malloc((size_t)c->B * sizeof *n->tok);
    n->rows = malloc(bytes - (size_t)c->B * sizeof(int32_t) - sizeof(node));
    if (!n->tok || !n->rows) {
        node_free(n);
        return NULL;
    }
    memcpy(n->tok, tok, (size_t)c->B * sizeof *tok);
    size_t rb = (size_t)c->B * (size_t)c->nkv;
    for (int il = 0; il < c->L; il++) {
        uint16_t *r = layer_rows(c, n, il);
        mu_err err;
        if (r && mu_session_kv_read(s, il, pos0, c->B, r, r + rb, &err)) { /* only a GPU copy fails */
            node_free(n);
            return NULL;
        }
    }
    n->bytes = bytes;
    n->depth = k + 1;
    n->id = c->next_id++;
    n->stamp = ++c->clock;
    n->parent = p;
    n->next = p->child;
    p->child = n;
    n->next_all = c->all;
    if (c->all) c->all->prev_all = n;
    c->all = n;
    c->st.bytes += bytes;
    c->st.n_nodes++;
    c->st.n_inserted++;
    return n;
}

void mu_kv_cache_capture(mu_kv_cache *c, const mu_session *s, mu_kv_lineage *l, const int32_t *tokens, int n) {
    if (!c || !l || n != s->n_past) return;
    int nb = n / c->B;
    if (nb > l->cap) nb = l->cap;
    if (nb <= l->n_blk) return;
    pthread_mutex_lock(&c->mu);
    node *p = &c->root;
    for (int k = 0; k < nb; k++) {
        const int32_t *tok = tokens + (size_t)k * (size_t)c->B;
        node *ch = find_child(c, p, tok);
        if (ch && k < l->n_blk && ch->id == l->ids[k]) {
            p = ch;
            continue;
        }
        if (ch) { /* another session's rows: ours may differ, so nothing of ours goes below */
            if (l->n_blk > k) l->n_blk = k;
            break;
        }
        /* absent (never there, or evicted): this session's own rows */
        ch = insert(c, p, s, l, tok, k);
        if (!ch) {
            if (l->n_blk > k) l->n_blk = k;
            break;
        }
        l->ids[k] = ch->id;
        if (l->n_blk < k + 1) l->n_blk = k + 1;
        p = ch;
    }
    for (node *q = p; q != &c->root; q = q->parent) q->stamp = ++c->clock;
    pthread_mutex_unlock(&c->mu);
}

/* ---- restore: the tree, then the store -------------------------------------- */

static void logf_(mu_kv_cache *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(mu_kv_cache *c, const char *fmt, ...) {
    if (!c->log) return;
    char line[PATH_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    c->log(c->log_user, line);
}

/* The deepest restorable checkpoint of the path[0, d): every node inside
 * the sliding window of its end holds the sliding layers' rows. */
static int restorable(const mu_kv_cache *c, node *const *path, int d) {
    bool any_swa = false;
    for (int il = 0; il < c->L; il++) any_swa |= c->swa[il];
    for (; d > 0; d--) {
        if (!any_swa) return d;
        int end = d * c->B, lo = end - c->n_swa;
        bool ok = true;
        for (int k = d - 1; k >= 0 && (k + 1) * c->B > lo && ok; k--) ok = path[k]->has_swa;
        if (ok) return d;
    }
    return 0;
}

static int tree_install(mu_kv_cache *c, mu_session *s, node *const *path, int d) {
    mu_err err;
    int end = d * c->B, lo = end - c->n_swa;
    size_t rb = (size_t)c->B * (size_t)c->nkv;
    mu_session_reset(s);
    for (int k = 0; k < d; k++) {
        for (int il = 0; il < c->L; il++) {
            const uint16_t *r = layer_rows(c, path[k], il);
            int a = k * c->B, b = a + c->B;
            if (c->swa[il] && a < lo) a = lo < b ? lo : b; /* a sliding layer: its window only */
            if (a >= b) continue;
            size_t off = (size_t)(a - k * c->B) * (size_t)c->nkv;
            if (mu_session_kv_write(s, il, a, b - a, r + off, r + rb + off, &err)) goto fail;
        }
    }
    if (mu_session_kv_commit(s, end, &err)) goto fail;
    return 0;
fail:
    mu_session_reset(s);
    logf_(c, "kvcache: restore from the tree failed: %s", err.msg);
    return -1;
}

/* The store's longest pack that holds a prefix of tokens[0, n_max) longer
 * than `better`: its name in best (empty: none). */
static int store_best(mu_kv_cache *c, const mu_session *s, const int32_t *tokens, int n_max, int better, char *best,
                      size_t cap) {
    best[0] = 0;
    DIR *d = opendir(c->pack_dir);
    if (!d) return better;
    struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue; /* ., .., partial directories */
        if (snprintf(path, sizeof path, "%s/%s", c->pack_dir, de->d_name) >= (int)sizeof path) continue;
        struct stat st;
        if (stat(path, &st) || !S_ISDIR(st.st_mode)) continue;
        mu_err err = {0};
        int np = 0;
        if (kv_pack_prefix_of(path, c->key, c->id, s, tokens, n_max, &np, &err)) {
            const char *v = mu_kv_verdict(&err);
            if (v && !strcmp(v, "identity")) continue; /* another model's or engine's pack: not ours */
            pthread_mutex_lock(&c->mu);
            c->st.n_store_errors++;
            pthread_mutex_unlock(&c->mu);
            logf_(c, "kvcache: store pack %s skipped: %s", de->d_name, err.msg);
            continue;
        }
        if (np > better && np <= n_max && strlen(de->d_name) < cap) {
            better = np;
            strcpy(best, de->d_name);
        }
    }
    closedir(d);
    return better;
}

int mu_kv_cache_restore(mu_kv_cache *c, mu_session *s, mu_kv_lineage *l, const int32_t *tokens, int n_max, int have,
                        int *src) {
    *src = MU_KV_SRC_NONE;
    if (!c || n_max <= have) return 0;
    pthread_mutex_lock(&c->mu);
    c->st.n_lookups++;
    int cap = n_max / c->B, d = 0;
    node **path = cap > 0 ? malloc((size_t)cap * sizeof *path) : NULL;
    for (node *p = &c->root; path && d < cap; d++) {
        node *ch = find_child(c, p, tokens + (size_t)d * (size_t)c->B);
        if (!ch) break;
        path[d] = p = ch;
    }
    d = path ? restorable(c, path, d) : 0;
    int n_tree = d * c->B;
    pthread_mutex_unlock(&c->mu);

    int best = n_tree > have ? n_tree : have;
    char name[256] = "";
    if (c->pack_dir) best = store_best(c, s, tokens, n_max, best, name, sizeof name);
    if (name[0]) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", c->pack_dir, name);
        mu_err err = {0};
        int n = 0;
        mu_session_reset(s);
        mu_kv_lineage_cut(l, 0);
        int lo = 0;
        if (!mu_kv_pack_restore_ex(s, c->id, dir, c->key, &n, &lo, &err)) {
            mu_kv_lineage_foreign(l, lo);
            utimensat(AT_FDCWD, dir, NULL, 0); /* its last use, for the store's LRU (mu_kv_store_gc) */
            pthread_mutex_lock(&c->mu);
            c->st.n_hits[MU_KV_SRC_PACK]++;
            c->st.n_tokens[MU_KV_SRC_PACK] += (uint64_t)n;
            pthread_mutex_unlock(&c->mu);
            free(path);
            *src = MU_KV_SRC_PACK;
            return n;
        }
        pthread_mutex_lock(&c->mu);
        c->st.n_store_errors++;
        pthread_mutex_unlock(&c->mu);
        logf_(c, "kvcache: store pack %s failed to restore (a miss): %s", name, err.msg);
        have = 0; /* s is empty now */
    }
    int rc = 0;
    if (n_tree > have) {
        pthread_mutex_lock(&c->mu);
        /* the path cannot have changed: only this thread inserts or evicts */
        if (!tree_install(c, s, path, d)) {
            for (int k = 0; k < d; k++) {
                l->ids[k] = path[k]->id;
                path[k]->stamp = ++c->clock;
            }
            l->n_blk = d;
            l->swa_lo = n_tree > c->n_swa ? n_tree - c->n_swa : 0; /* the window was installed */
            c->st.n_hits[MU_KV_SRC_CACHE]++;
            c->st.n_tokens[MU_KV_SRC_CACHE] += (uint64_t)n_tree;
            *src = MU_KV_SRC_CACHE;
            rc = n_tree;
        } else {
            mu_kv_lineage_cut(l, 0);
        }
        pthread_mutex_unlock(&c->mu);
    }
    free(path);
    return rc;
}

/* ---- pins and counters ------------------------------------------------------ */

int mu_kv_cache_pin(mu_kv_cache *c, const int32_t *tokens, int n, bool pin) {
    pthread_mutex_lock(&c->mu);
    node *p = &c->root;
    int d = 0;
    for (; (d + 1) * c->B <= n; d++) {
        node *ch = find_child(c, p, tokens + (size_t)d * (size_t)c->B);
        if (!ch) break;
        if (pin) ch->pins++;
        else if (ch->pins > 0) ch->pins--;
        p = ch;
    }
    pthread_mutex_unlock(&c->mu);
    return d * c->B;
}

int mu_kv_cache_hold(mu_kv_cache *c, const int32_t *tokens, int n_max, int align) {
    if (!c || align < 1) return 0;
    pthread_mutex_lock(&c->mu);
    int cap = n_max / c->B, d = 0;
    node **path = cap > 0 ? malloc((size_t)cap * sizeof *path) : NULL;
    for (node *p = &c->root; path && d < cap; d++) {
        node *ch = find_child(c, p, tokens + (size_t)d * (size_t)c->B);
        if (!ch) break;
        path[d] = p = ch;
    }
    for (d = path ? restorable(c, path, d) : 0; d > 0; d = restorable(c, path, d - 1))
        if (d * c->B % align == 0) break;
    for (int k = 0; k < d; k++) path[k]->pins++;
    pthread_mutex_unlock(&c->mu);
    free(path);
    return d * c->B;
}

void mu_kv_cache_get_stats(mu_kv_cache *c, mu_kv_cache_stats *st) {
    pthread_mutex_lock(&c->mu);
    *st = c->st;
    st->n_pinned = 0;
    for (node *n = c->all; n; n = n->next_all) st->n_pinned += n->pins > 0;
    pthread_mutex_unlock(&c->mu);
}
