/* test_kvcache.c: the resident prefix cache (include/muser_kv.h) on a small
 * generated model: a restored prefix continues bit for bit like the live
 * session its rows came from; the longest cached prefix at block
 * boundaries is found, and never one the prompt does not share; the byte
 * budget holds by evicting least recently used leaves, never pinned ones;
 * a session's blocks go only below nodes whose rows it holds (two cold
 * prefills of the same tokens with other ubatch splits differ in the last
 * bits, so they must not be mixed); behind the tree, the pack store serves
 * a pack holding a prefix of the prompt, and a corrupt pack there is a
 * miss with a log line. The token sidecar of a pack (tokens.kvtok) gives
 * back the ids, and every bit flip, truncation, swap or other key is
 * refused with a verdict category. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser.h"
#include "../../include/muser_kv.h"
#include "mini_model.h"

#define B 16
#define CTX 1024

static char dir[] = "/tmp/mutest_kvcache_XXXXXX";
static mu_model *M;
static mu_engine *E;
static mu_kv_ident *ID;
static int V;
static uint8_t KEY[32];

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    mini_cfg c = mini_default();
    c.n_ctx = CTX;
    if (mini_open(dir, &c, 2, &M, &E)) return -1;
    mu_err err;
    if (mu_kv_ident_new(E, NULL, &ID, &err)) return -1;
    V = mu_model_get_info(M)->n_vocab;
    for (int i = 0; i < 32; i++) KEY[i] = (uint8_t)(i * 5 + 2);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mu_kv_ident_free(ID);
    mu_engine_free(E);
    mu_model_close(M);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) ? -1 : 0;
}

static void ids(int32_t *p, int n, int seed) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)((i * 37 + seed * 11 + 3) % 70);
}

static mu_session *sess(void) {
    mu_err err = {0};
    mu_session *s;
    if (mu_session_new(E, CTX, &s, &err)) fail_msg("session: %s", err.msg);
    return s;
}

static void feed(mu_session *s, const int32_t *t, int n) {
    mu_err err = {0};
    mu_batch_item it = {.s = s, .tokens = t, .n_tokens = n};
    if (mu_forward(E, &it, 1, &err)) fail_msg("forward: %s", err.msg);
}

static mu_kv_cache *cache_new(size_t max_bytes, const char *pack_dir, void (*log)(void *, const char *), void *user) {
    mu_err err = {0};
    mu_kv_cache_opts o = {.max_bytes = max_bytes, .block = B, .pack_dir = pack_dir, .key = pack_dir ? KEY : NULL,
                          .id = pack_dir ? ID : NULL, .log = log, .log_user = user};
    mu_kv_cache *c;
    if (mu_kv_cache_new(E, &o, &c, &err)) fail_msg("cache: %s", err.msg);
    return c;
}

static mu_kv_lineage *lin(mu_kv_cache *c) {
    mu_err err = {0};
    mu_kv_lineage *l;
    if (mu_kv_lineage_new(c, CTX, &l, &err)) fail_msg("lineage: %s", err.msg);
    return l;
}

/* feeds t[0, n) in steps of `step` tokens, capturing after each forward as the scheduler does */
static void prefill(mu_kv_cache *c, mu_session *s, mu_kv_lineage *l, const int32_t *t, int n, int step) {
    for (int p = mu_session_n_past(s); p < n; p += step) {
        int k = n - p < step ? n - p : step;
        feed(s, t + p, k);
        mu_kv_cache_capture(c, s, l, t, p + k);
    }
}

/* a and b continue with t[at, at+5) as one chunk and then two decode steps: bitwise equal logits */
static void same_future(mu_session *a, mu_session *b, const int32_t *t, int at) {
    feed(a, t + at, 5);
    feed(b, t + at, 5);
    assert_memory_equal(mu_session_logits(a, -1), mu_session_logits(b, -1), (size_t)V * sizeof(float));
    for (int k = 0; k < 2; k++) {
        feed(a, t + at + 5 + k, 1);
        feed(b, t + at + 5 + k, 1);
        assert_memory_equal(mu_session_logits(a, -1), mu_session_logits(b, -1), (size_t)V * sizeof(float));
    }
}

static void test_restore_exact(void **state) {
    (void)state;
    mu_kv_cache *c = cache_new(64 << 20, NULL, NULL, NULL);
    mu_kv_lineage *la = lin(c), *lb = lin(c);
    int32_t t[400];
    ids(t, 400, 1);
    mu_session *a = sess(), *b = sess();
    prefill(c, a, la, t, 300, 100); /* splits at 100, 200: blocks 6 and 12 straddle them */
    mu_kv_cache_stats st;
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_nodes, 300 / B);
    int src = -1;
    /* a prompt of 300 tokens + more: the longest checkpoint below n_max = 299 is 288 */
    int n = mu_kv_cache_restore(c, b, lb, t, 299, 0, &src);
    assert_int_equal(n, 288);
    assert_int_equal(src, MU_KV_SRC_CACHE);
    assert_int_equal(mu_session_n_past(b), 288);
    /* the live session the rows came from, back at 288, and the restored one */
    mu_err err = {0};
    assert_int_equal(mu_session_truncate(a, 288, &err), 0);
    same_future(a, b, t, 288);
    /* a shorter n_max stops at its block; have >= what the tree holds: nothing, b untouched */
    mu_session *d = sess();
    mu_kv_lineage *ld = lin(c);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, t, 47, 0, &src), 32);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, t, 47, 32, &src), 0);
    assert_int_equal(src, MU_KV_SRC_NONE);
    assert_int_equal(mu_session_n_past(d), 32);
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_hits[MU_KV_SRC_CACHE], 2);
    assert_int_equal(st.n_tokens[MU_KV_SRC_CACHE], 288 + 32);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(d);
    mu_kv_lineage_free(la);
    mu_kv_lineage_free(lb);
    mu_kv_lineage_free(ld);
    mu_kv_cache_free(c);
}

static void test_longest_prefix(void **state) {
    (void)state;
    mu_kv_cache *c = cache_new(64 << 20, NULL, NULL, NULL);
    mu_kv_lineage *l = lin(c);
    int32_t x[64], y[64], q[64];
    ids(x, 64, 2);
    memcpy(y, x, sizeof y);
    for (int i = 32; i < 64; i++) y[i] = (x[i] + 1) % 70; /* shares blocks 0, 1 with x */
    mu_session *s = sess();
    prefill(c, s, l, x, 64, 64);
    mu_session_reset(s);
    mu_kv_lineage_cut(l, 0);
    /* y restores x's first two blocks and adds its own two below them */
    int src, n = mu_kv_cache_restore(c, s, l, y, 63, 0, &src);
    assert_int_equal(n, 32);
    prefill(c, s, l, y, 64, 64);
    mu_kv_cache_stats st;
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_nodes, 6); /* x: 4 blocks, y: 2 more below x's first two */
    /* a prompt that shares 40 tokens with y: 32 (blocks end at 16, 32, 48) */
    memcpy(q, y, sizeof q);
    q[40] = (q[40] + 5) % 70;
    mu_session *d = sess();
    mu_kv_lineage *ld = lin(c);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, q, 63, 0, &src), 32);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, y, 63, 0, &src), 48);
    /* nothing shared from token 0 */
    mu_session_reset(d);
    mu_kv_lineage_cut(ld, 0);
    q[0] = (x[0] + 1) % 70;
    assert_int_equal(mu_kv_cache_restore(c, d, ld, q, 63, 0, &src), 0);
    assert_int_equal(mu_session_n_past(d), 0);
    /* the pin covers what is cached of the prompt */
    assert_int_equal(mu_kv_cache_pin(c, y, 64, true), 64);
    assert_int_equal(mu_kv_cache_pin(c, y, 40, true), 32);
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_pinned, 4);
    mu_session_free(s);
    mu_session_free(d);
    mu_kv_lineage_free(l);
    mu_kv_lineage_free(ld);
    mu_kv_cache_free(c);
}

/* mu_kv_cache_hold: the deepest restorable checkpoint at a multiple of
 * align, pinned until released; a restore of it installs exactly that many
 * positions (the prefill lane's delta handoff). */
static void test_hold(void **state) {
    (void)state;
    mu_kv_cache *c = cache_new(64 << 20, NULL, NULL, NULL);
    mu_kv_lineage *l = lin(c);
    int32_t x[64], z[64];
    ids(x, 64, 7);
    ids(z, 64, 8);
    mu_session *s = sess();
    prefill(c, s, l, x, 64, 64);
    mu_kv_cache_stats st;
    assert_int_equal(mu_kv_cache_hold(c, x, 63, 32), 32); /* 48 is not a multiple of 32 */
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_pinned, 2);
    assert_int_equal(mu_kv_cache_hold(c, x, 64, 16), 64);
    assert_int_equal(mu_kv_cache_hold(c, x, 64, 100), 0); /* none: nothing more pinned */
    assert_int_equal(mu_kv_cache_hold(c, z, 64, 16), 0);
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_pinned, 4);
    mu_session *d = sess();
    mu_kv_lineage *ld = lin(c);
    int src;
    assert_int_equal(mu_kv_cache_restore(c, d, ld, x, 32, 0, &src), 32);
    assert_int_equal(src, MU_KV_SRC_CACHE);
    mu_kv_cache_pin(c, x, 32, false);
    mu_kv_cache_pin(c, x, 64, false);
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_pinned, 0);
    mu_session_free(s);
    mu_session_free(d);
    mu_kv_lineage_free(l);
    mu_kv_lineage_free(ld);
    mu_kv_cache_free(c);
}

static void test_eviction(void **state) {
    (void)state;
    /* the size of one node: measured on a cache that holds one */
    mu_kv_cache *c0 = cache_new(64 << 20, NULL, NULL, NULL);
    mu_kv_lineage *l0 = lin(c0);
    int32_t p1[32], p2[32], p3[32];
    ids(p1, 32, 3);
    ids(p2, 32, 4);
    ids(p3, 32, 5);
    mu_session *s = sess();
    prefill(c0, s, l0, p1, 16, 16);
    mu_kv_cache_stats st;
    mu_kv_cache_get_stats(c0, &st);
    size_t nb = st.bytes;
    mu_kv_lineage_free(l0);
    mu_kv_cache_free(c0);

    mu_kv_cache *c = cache_new(3 * nb + nb / 2, NULL, NULL, NULL);
    mu_kv_lineage *l = lin(c);
    int src;
    mu_session_reset(s);
    prefill(c, s, l, p1, 32, 32); /* A1, A2 */
    mu_session_reset(s);
    mu_kv_lineage_cut(l, 0);
    prefill(c, s, l, p2, 32, 32); /* B1, then B2 evicts the LRU leaf A2 */
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_nodes, 3);
    assert_int_equal(st.n_evicted, 1);
    assert_true(st.bytes <= st.max_bytes);
    mu_session *d = sess();
    mu_kv_lineage *ld = lin(c);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, p1, 31, 0, &src), 16); /* A1 stayed (not a leaf then) */
    mu_session_reset(d);
    mu_kv_lineage_cut(ld, 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, p2, 31, 0, &src), 16);
    /* pinned B1, B2; A1 is used last now, yet it is the only unpinned leaf: C1 evicts it,
     * and C2 finds no room (B2 pinned, C1 its own parent) */
    assert_int_equal(mu_kv_cache_pin(c, p2, 32, true), 32);
    mu_session_reset(s);
    mu_kv_lineage_cut(l, 0);
    prefill(c, s, l, p3, 32, 32);
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_nodes, 3);
    assert_int_equal(st.n_evicted, 2);
    assert_int_equal(st.n_pinned, 2);
    mu_session_reset(d);
    mu_kv_lineage_cut(ld, 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, p2, 32, 0, &src), 32);
    mu_session_reset(d);
    mu_kv_lineage_cut(ld, 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, p1, 32, 0, &src), 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, p3, 32, 0, &src), 16);
    /* unpinned, B2 is the least recently used leaf again */
    mu_kv_cache_pin(c, p2, 32, false);
    mu_session_reset(s);
    mu_kv_lineage_cut(l, 0);
    prefill(c, s, l, p1, 32, 32); /* A1 evicts B2, A2 evicts B1 (C1 was used later) */
    mu_kv_cache_get_stats(c, &st);
    assert_true(st.bytes <= st.max_bytes);
    assert_int_equal(st.n_pinned, 0);
    mu_session_reset(d);
    mu_kv_lineage_cut(ld, 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, p1, 32, 0, &src), 32);
    mu_session_free(s);
    mu_session_free(d);
    mu_kv_lineage_free(l);
    mu_kv_lineage_free(ld);
    mu_kv_cache_free(c);
}

/* Two cold prefills of the same tokens with other ubatch splits: the second
 * session's blocks never go below the first's nodes. A session restored
 * from the tree extends the path it restored. */
static void test_lineage(void **state) {
    (void)state;
    mu_kv_cache *c = cache_new(64 << 20, NULL, NULL, NULL);
    mu_kv_lineage *la = lin(c), *lb = lin(c), *lc = lin(c);
    int32_t t[120];
    ids(t, 120, 6);
    mu_session *a = sess(), *b = sess(), *d = sess();
    prefill(c, a, la, t, 64, 64);
    prefill(c, b, lb, t, 96, 40); /* its rows of 0..63 are its own: block 4, 5 must not hang below a's */
    mu_kv_cache_stats st;
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_nodes, 4);
    int src;
    assert_int_equal(mu_kv_cache_restore(c, d, lc, t, 100, 0, &src), 64);
    prefill(c, d, lc, t, 96, 32);
    mu_kv_cache_get_stats(c, &st);
    assert_int_equal(st.n_nodes, 6);
    /* and what d added continues like d */
    mu_session *e = sess();
    mu_kv_lineage *le = lin(c);
    assert_int_equal(mu_kv_cache_restore(c, e, le, t, 100, 0, &src), 96);
    same_future(d, e, t, 96);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(d);
    mu_session_free(e);
    mu_kv_lineage_free(la);
    mu_kv_lineage_free(lb);
    mu_kv_lineage_free(lc);
    mu_kv_lineage_free(le);
    mu_kv_cache_free(c);
}

static int n_logged;
static char last_log[512];
static void log_line(void *user, const char *line) {
    (void)user;
    n_logged++;
    snprintf(last_log, sizeof last_log, "%s", line);
}

static void test_store(void **state) {
    (void)state;
    mu_err err = {0};
    char store[600], pack[700], bad[700], path[800];
    snprintf(store, sizeof store, "%s/store", dir);
    mkdir(store, 0700);
    snprintf(pack, sizeof pack, "%s/p100", store);
    int32_t t[200];
    ids(t, 200, 7);
    mu_session *a = sess(), *b = sess();
    feed(a, t, 100);
    if (mu_kv_pack_save(a, ID, t, 100, KEY, NULL, pack, &err)) fail_msg("save: %s", err.msg);
    /* a corrupt pack next to it: a miss with a log line */
    snprintf(bad, sizeof bad, "%s/broken", store);
    mkdir(bad, 0700);
    snprintf(path, sizeof path, "%s/manifest.kvpk", bad);
    FILE *f = fopen(path, "w");
    fputs("not a pack", f);
    fclose(f);
    mu_kv_cache *c = cache_new(64 << 20, store, log_line, NULL);
    mu_kv_lineage *l = lin(c);
    int src = -1;
    int n = mu_kv_cache_restore(c, b, l, t, 150, 0, &src);
    assert_int_equal(n, 100);
    assert_int_equal(src, MU_KV_SRC_PACK);
    same_future(a, b, t, 100);
    assert_int_equal(n_logged, 1);
    assert_non_null(strstr(last_log, "broken"));
    /* b goes on to 140 and its blocks enter the tree: the sliding layers'
     * rows of the restored positions were never in b (a pack holds their
     * window only), so the tree's checkpoints start where b's own rows
     * cover the window: 112 and 128 */
    feed(b, t + 107, 33);
    mu_kv_cache_capture(c, b, l, t, 140);
    mu_session *d = sess();
    mu_kv_lineage *ld = lin(c);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, t, 150, 0, &src), 128);
    assert_int_equal(src, MU_KV_SRC_CACHE);
    assert_int_equal(mu_session_truncate(b, 128, &err), 0);
    same_future(b, d, t, 128);
    /* below 112 only the pack serves; a prompt it is no prefix of: nothing */
    mu_session_reset(d);
    mu_kv_lineage_cut(ld, 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, t, 111, 0, &src), 100);
    assert_int_equal(src, MU_KV_SRC_PACK);
    int32_t u[200];
    memcpy(u, t, sizeof u);
    u[50] = (u[50] + 1) % 70;
    mu_session_reset(d);
    mu_kv_lineage_cut(ld, 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, u, 150, 0, &src), 0);
    assert_int_equal(mu_kv_cache_restore(c, d, ld, t, 99, 0, &src), 0);
    assert_int_equal(src, MU_KV_SRC_NONE);
    mu_kv_cache_stats st;
    mu_kv_cache_get_stats(c, &st);
    assert_true(st.n_store_errors >= 1);
    assert_int_equal(st.n_hits[MU_KV_SRC_PACK], 2);
    assert_int_equal(st.n_hits[MU_KV_SRC_CACHE], 1);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(d);
    mu_kv_lineage_free(l);
    mu_kv_lineage_free(ld);
    mu_kv_cache_free(c);
}

static void write_all(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void test_sidecar(void **state) {
    (void)state;
    mu_err err = {0};
    char pa[600], pb[600], pc[600], path[700];
    snprintf(pa, sizeof pa, "%s/side-a", dir);
    snprintf(pb, sizeof pb, "%s/side-b", dir);
    snprintf(pc, sizeof pc, "%s/side-c", dir);
    int32_t t[40], u[40];
    ids(t, 40, 9);
    ids(u, 40, 10);
    mu_session *a = sess(), *b = sess();
    feed(a, t, 20);
    feed(b, u, 20);
    mu_kv_save_opts wt = {.with_tokens = true};
    if (mu_kv_pack_save(a, ID, t, 20, KEY, &wt, pa, &err)) fail_msg("save: %s", err.msg);
    if (mu_kv_pack_save(b, ID, u, 20, KEY, &wt, pb, &err)) fail_msg("save: %s", err.msg);
    if (mu_kv_pack_save(a, ID, t, 20, KEY, NULL, pc, &err)) fail_msg("save: %s", err.msg);
    int32_t *got = NULL;
    int n = 0;
    if (mu_kv_pack_tokens(pa, KEY, &got, &n, &err)) fail_msg("tokens: %s", err.msg);
    assert_int_equal(n, 20);
    assert_memory_equal(got, t, 20 * sizeof *t);
    free(got);
    assert_int_equal(mu_kv_pack_tokens(pc, KEY, &got, &n, &err), MU_E_UNSUPPORTED);
    uint8_t other[32];
    memcpy(other, KEY, 32);
    other[0] ^= 1;
    assert_int_not_equal(mu_kv_pack_tokens(pa, other, &got, &n, &err), 0);
    /* b's sidecar in a's pack: same size, another cut */
    snprintf(path, sizeof path, "%s/tokens.kvtok", pa);
    FILE *f = fopen(path, "rb");
    uint8_t orig[256], side_b[256];
    size_t len = fread(orig, 1, sizeof orig, f);
    fclose(f);
    assert_int_equal(len, 44 + 4 * 20);
    char pbs[700];
    snprintf(pbs, sizeof pbs, "%s/tokens.kvtok", pb);
    f = fopen(pbs, "rb");
    assert_int_equal(fread(side_b, 1, sizeof side_b, f), len);
    fclose(f);
    write_all(path, side_b, len);
    assert_int_not_equal(mu_kv_pack_tokens(pa, KEY, &got, &n, &err), 0);
    assert_string_equal(mu_kv_verdict(&err), "authentication");
    /* every bit flip and every truncation */
    uint8_t m[256];
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(m, orig, len);
            m[i] ^= (uint8_t)(1 << bit);
            write_all(path, m, len);
            got = NULL;
            if (!mu_kv_pack_tokens(pa, KEY, &got, &n, &err)) fail_msg("flip of byte %zu bit %d accepted", i, bit);
            if (!mu_kv_verdict(&err)) fail_msg("flip %zu/%d: no verdict: %s", i, bit, err.msg);
        }
    for (size_t k = 0; k < len; k++) {
        write_all(path, orig, k);
        if (!mu_kv_pack_tokens(pa, KEY, &got, &n, &err)) fail_msg("truncation to %zu accepted", k);
        if (!mu_kv_verdict(&err)) fail_msg("truncation %zu: no verdict: %s", k, err.msg);
    }
    write_all(path, orig, len);
    if (mu_kv_pack_tokens(pa, KEY, &got, &n, &err)) fail_msg("restored sidecar: %s", err.msg);
    free(got);
    mu_session_free(a);
    mu_session_free(b);
}

/* A sidecar with a tail (a server session's last token, sampled, not
 * evaluated): the ids after the positions come back, bound by the tag;
 * every bit flip and truncation is refused; a pack with a sidecar may be
 * saved over (a session's next turn). */
static void test_sidecar_tail(void **state) {
    (void)state;
    mu_err err = {0};
    char pd[600], path[700];
    snprintf(pd, sizeof pd, "%s/side-d", dir);
    int32_t t[40];
    ids(t, 40, 11);
    mu_session *a = sess();
    feed(a, t, 20);
    mu_kv_save_opts wt = {.with_tokens = true, .tail = &t[20], .n_tail = 1};
    if (mu_kv_pack_save(a, ID, t, 20, KEY, &wt, pd, &err)) fail_msg("save: %s", err.msg);
    if (mu_kv_pack_save(a, ID, t, 20, KEY, &wt, pd, &err)) fail_msg("save over a pack with a sidecar: %s", err.msg);
    int32_t *got = NULL;
    int n = 0, n_pos = 0;
    if (mu_kv_pack_tokens_ex(pd, KEY, &got, &n, &n_pos, &err)) fail_msg("tokens: %s", err.msg);
    assert_int_equal(n, 21);
    assert_int_equal(n_pos, 20);
    assert_memory_equal(got, t, 21 * sizeof *t);
    free(got);
    if (mu_kv_pack_tokens(pd, KEY, &got, &n, &err)) fail_msg("tokens: %s", err.msg);
    assert_int_equal(n, 20);
    free(got);
    int nr = 0;
    mu_session *b = sess();
    if (mu_kv_pack_restore(b, ID, pd, KEY, &nr, &err)) fail_msg("restore: %s", err.msg);
    assert_int_equal(nr, 20);
    mu_session_free(b);
    snprintf(path, sizeof path, "%s/tokens.kvtok", pd);
    FILE *f = fopen(path, "rb");
    uint8_t orig[256], m[256];
    size_t len = fread(orig, 1, sizeof orig, f);
    fclose(f);
    assert_int_equal(len, 44 + 4 * 21);
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(m, orig, len);
            m[i] ^= (uint8_t)(1 << bit);
            write_all(path, m, len);
            got = NULL;
            if (!mu_kv_pack_tokens_ex(pd, KEY, &got, &n, &n_pos, &err)) fail_msg("flip of byte %zu bit %d accepted", i, bit);
            if (!mu_kv_verdict(&err)) fail_msg("flip %zu/%d: no verdict: %s", i, bit, err.msg);
        }
    for (size_t k = 0; k < len; k++) {
        write_all(path, orig, k);
        if (!mu_kv_pack_tokens_ex(pd, KEY, &got, &n, &n_pos, &err)) fail_msg("truncation to %zu accepted", k);
        if (!mu_kv_verdict(&err)) fail_msg("truncation %zu: no verdict: %s", k, err.msg);
    }
    mu_session_free(a);
}

static bool kind_is(const char *d, const char *kind) {
    char *js = NULL, want[64];
    mu_err err = {0};
    if (mu_kv_pack_inspect(d, KEY, &js, &err)) fail_msg("inspect: %s", err.msg);
    snprintf(want, sizeof want, "\"kind\": \"%s\"", kind);
    bool yes = strstr(js, want) != NULL;
    free(js);
    return yes;
}

/* Delta packs (mu_kv_save_opts.chain): a session that grows from its
 * pack writes only the new positions; restoring the chain gives the live
 * session's rows bit for bit; a chain ends at depth 7 (a whole pack
 * again); a parent that is not a prefix gives a whole pack; a missing or
 * damaged ancestor fails the restore with the session reset. */
static void test_delta_chain(void **state) {
    (void)state;
    mu_err err = {0};
    char pd[600], po[600], path[700];
    snprintf(pd, sizeof pd, "%s/chain", dir);
    snprintf(po, sizeof po, "%s/chain-other", dir);
    int32_t t[120], u[40];
    ids(t, 120, 21);
    ids(u, 40, 22);
    mu_session *a = sess(), *b = sess();
    mu_kv_save_opts co = {.chain = true, .parent = pd, .with_tokens = true};
    feed(a, t, 20);
    if (mu_kv_pack_save(a, ID, t, 20, KEY, &co, pd, &err)) fail_msg("save: %s", err.msg);
    assert_true(kind_is(pd, "full"));
    int n = 20;
    for (int depth = 1; depth <= 8; depth++) {
        feed(a, t + n, 7);
        n += 7;
        if (mu_kv_pack_save(a, ID, t, n, KEY, &co, pd, &err)) fail_msg("save %d: %s", depth, err.msg);
        assert_true(kind_is(pd, depth <= 7 ? "delta" : "full")); /* depth 8 would pass the limit */
        if (mu_kv_pack_verify(pd, KEY, ID, CTX, &err)) fail_msg("verify %d: %s", depth, err.msg);
        mu_session_reset(b);
        int got = 0;
        if (mu_kv_pack_restore(b, ID, pd, KEY, &got, &err)) fail_msg("restore %d: %s", depth, err.msg);
        assert_int_equal(got, n);
        const mu_model_info *I = mu_model_get_info(M);
        size_t w = (size_t)I->n_head_kv * (size_t)I->head_dim;
        uint16_t ka[120 * 64], va[120 * 64], kb[120 * 64], vb[120 * 64];
        assert_true(w <= 64);
        for (int il = 0; il < I->n_layer; il++) {
            int lo = I->swa_layers[il] && n > I->n_swa ? n - I->n_swa : 0;
            if (mu_session_kv_read(a, il, lo, n - lo, ka, va, &err) || mu_session_kv_read(b, il, lo, n - lo, kb, vb, &err))
                fail_msg("rows: %s", err.msg);
            assert_memory_equal(ka, kb, (size_t)(n - lo) * w * 2);
            assert_memory_equal(va, vb, (size_t)(n - lo) * w * 2);
        }
    }
    /* the restored chain continues as the live session, bit for bit */
    same_future(a, b, t, n);
    n += 7;
    /* a parent that is not a prefix of the tokens: a whole pack */
    mu_session *c = sess();
    feed(c, u, 30);
    if (mu_kv_pack_save(c, ID, u, 30, KEY, &co, po, &err)) fail_msg("save: %s", err.msg);
    co.parent = po;
    if (mu_kv_pack_save(a, ID, t, n, KEY, &co, pd, &err)) fail_msg("save: %s", err.msg);
    assert_true(kind_is(pd, "full"));
    /* a missing ancestor, a damaged one: refused, the session reset */
    co.parent = pd;
    feed(a, t + n, 5);
    n += 5;
    if (mu_kv_pack_save(a, ID, t, n, KEY, &co, pd, &err)) fail_msg("save: %s", err.msg);
    assert_true(kind_is(pd, "delta"));
    snprintf(path, sizeof path, "%s/parent-1.kvpk", pd);
    char moved[720];
    snprintf(moved, sizeof moved, "%s/moved.kvpk", dir);
    assert_int_equal(rename(path, moved), 0);
    mu_session_reset(b);
    int got = 0;
    assert_int_not_equal(mu_kv_pack_restore(b, ID, pd, KEY, &got, &err), 0);
    assert_string_equal(mu_kv_verdict(&err), "graph");
    assert_int_equal(mu_session_n_past(b), 0);
    assert_int_equal(rename(moved, path), 0);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 5000, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 5000, SEEK_SET);
    fputc(ch ^ 1, f);
    fclose(f);
    assert_int_not_equal(mu_kv_pack_restore(b, ID, pd, KEY, &got, &err), 0);
    assert_non_null(mu_kv_verdict(&err));
    assert_int_equal(mu_session_n_past(b), 0);
    assert_int_not_equal(mu_kv_pack_verify(pd, KEY, ID, CTX, &err), 0);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(c);
}

static void test_bad_opts(void **state) {
    (void)state;
    mu_err err = {0};
    mu_kv_cache *c = NULL;
    mu_kv_cache_opts o = {.block = 5000};
    assert_int_not_equal(mu_kv_cache_new(E, &o, &c, &err), 0);
    assert_non_null(strstr(err.msg, "kvcache: block must be"));
    o = (mu_kv_cache_opts){.pack_dir = "/tmp"};
    assert_int_not_equal(mu_kv_cache_new(E, &o, &c, &err), 0);
    assert_null(c);
    assert_string_equal(mu_kv_src_name(MU_KV_SRC_PACK), "pack");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restore_exact), cmocka_unit_test(test_longest_prefix),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_eviction),      cmocka_unit_test(test_lineage),
        cmocka_unit_test(test_store),         cmocka_unit_test(test_sidecar),
        cmocka_unit_test(test_sidecar_tail),  cmocka_unit_test(test_delta_chain),
        cmocka_unit_test(test_bad_opts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
