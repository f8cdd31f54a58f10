/* test_lane.c: the prefill lane's pieces in src/net without a model:
 * frames and the manifest (round trip, every byte of a sealed manifest
 * flipped, truncation at every offset, another key, chunks out of order),
 * the replay ledger (stale refused, also after reopening), the local CA
 * (never overwrites) and mutual TLS 1.3 with pinning over a socket pair
 * (a pinned pair talks; an unpinned client or server fails the handshake).
 * With LANE_CORPUS_OUT=DIR it also writes the fuzz seeds of
 * tests/fuzz/corpus/lane there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/net/conn.h"
#include "../src/net/ledger.h"
#include "../src/net/lanewire.h"

static const uint8_t KEY[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

static void make_manifest_delta(lane_manifest *m, uint32_t n_have, uint32_t n_ship) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < 16; i++) m->request_id[i] = (uint8_t)(i + 1);
    memset(m->identity, 0xAB, 32);
    memset(m->token_digest, 0xCD, 32);
    assert_true(lane_class_put(m->kclass, "cuda"));
    m->n_ctx = 4096;
    m->step = 64;
    m->n_have = n_have;
    m->n_ship = n_ship;
    m->generation = 1234567;
    m->key_epoch = 3;
    m->row_bytes = 128;
    bool swa[6] = {true, true, false, true, true, false};
    lane_layers_plan(m, 6, swa, 100);
    m->n_chunks = lane_chunk_count(m);
}

static void make_manifest(lane_manifest *m, uint32_t n_ship) { make_manifest_delta(m, 0, n_ship); }

static void write_seed(const char *name, const uint8_t *p, size_t n, uint8_t which) {
    const char *dir = getenv("LANE_CORPUS_OUT");
    if (!dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(&which, 1, 1, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

static void test_plan_and_order(void **st) {
    (void)st;
    lane_manifest m;
    make_manifest(&m, 200);
    /* full layers ship [0,200), sliding the last 100 = [100,200) */
    assert_int_equal(m.layers[0].lo, 100);
    assert_int_equal(m.layers[0].count, 100);
    assert_int_equal(m.layers[2].lo, 0);
    assert_int_equal(m.layers[2].cls, LANE_CLASS_FULL);
    assert_int_equal(m.layers[3].cls, LANE_CLASS_SLIDING);
    /* steps [0,64) [64,128) [128,192) [192,200): full layers 2 and 5 in
     * every step, sliding layers from step [64,128) on (from 100) */
    assert_int_equal(m.n_chunks, 4 * 2 + 3 * 4);
    uint32_t il, pos0, n, covered[6] = {0};
    for (uint32_t i = 0; i < m.n_chunks; i++) {
        assert_true(lane_chunk_at(&m, i, &il, &pos0, &n));
        assert_int_equal(pos0, m.layers[il].lo + covered[il]);
        covered[il] += n;
    }
    for (int l = 0; l < 6; l++) assert_int_equal(covered[l], m.layers[l].count);
    assert_false(lane_chunk_at(&m, m.n_chunks, &il, &pos0, &n));
    /* a handoff shorter than the window ships everything on every layer */
    make_manifest(&m, 50);
    assert_int_equal(m.layers[0].lo, 0);
    assert_int_equal(m.n_chunks, 6);
    /* a delta from 128 of 300: full layers ship [128, 300), sliding layers
     * their window [200, 300); steps [128,192) [192,256) [256,300) */
    make_manifest_delta(&m, 128, 300);
    assert_int_equal(m.layers[2].lo, 128);
    assert_int_equal(m.layers[2].count, 172);
    assert_int_equal(m.layers[0].lo, 200);
    assert_int_equal(m.n_chunks, 3 * 2 + 2 * 4);
    memset(covered, 0, sizeof covered);
    for (uint32_t i = 0; i < m.n_chunks; i++) {
        assert_true(lane_chunk_at(&m, i, &il, &pos0, &n));
        assert_true(pos0 >= 128);
        assert_int_equal(pos0, m.layers[il].lo + covered[il]);
        covered[il] += n;
    }
    for (int l = 0; l < 6; l++) assert_int_equal(covered[l], m.layers[l].count);
    /* a delta above the window's start: sliding layers start at n_have too */
    make_manifest_delta(&m, 256, 300);
    assert_int_equal(m.layers[0].lo, 256);
    assert_int_equal(m.layers[2].lo, 256);
    uint8_t *h;
    size_t hn;
    lane_manifest got;
    mu_err err = {0};
    assert_int_equal(lane_manifest_encode(&m, &h, &hn, &err), 0);
    assert_int_equal(lane_manifest_decode(h, hn, &got, &err), 0);
    assert_int_equal(got.n_have, 256);
    free(h);
    /* a delta from a live slot's prefix, not a multiple of the step: the
     * producer's forwards, hence the frames, go in steps from n_have */
    make_manifest_delta(&m, 200, 300);
    assert_int_equal(lane_manifest_encode(&m, &h, &hn, &err), 0);
    assert_int_equal(lane_manifest_decode(h, hn, &got, &err), 0);
    free(h);
    assert_true(lane_chunk_at(&m, 0, &il, &pos0, &n));
    assert_int_equal(il, 0);
    assert_int_equal(pos0, 200);
    assert_int_equal(n, 64);
    assert_true(lane_chunk_at(&m, m.n_chunks - 1, &il, &pos0, &n));
    assert_int_equal(il, 5);
    assert_int_equal(pos0, 264);
    assert_int_equal(n, 36);
    assert_int_equal(m.n_chunks, 12);
    /* a delta whose layer table disagrees with n_have, or covers everything */
    m.n_have = 100;
    assert_int_equal(lane_manifest_encode(&m, &h, &hn, &err), 0);
    assert_int_not_equal(lane_manifest_decode(h, hn, &got, &err), 0);
    assert_string_equal(lane_reason(&err), "layout");
    free(h);
    m.n_have = 320;
    assert_int_equal(lane_manifest_encode(&m, &h, &hn, &err), 0);
    assert_int_not_equal(lane_manifest_decode(h, hn, &got, &err), 0);
    free(h);
}

static void test_class_names(void **st) {
    (void)st;
    char f[LANE_CLASS_LEN];
    assert_true(lane_class_put(f, "x86-exact"));
    assert_true(lane_class_ok(f));
    assert_string_equal(f, "x86-exact");
    assert_false(lane_class_put(f, ""));
    assert_false(lane_class_put(f, "CUDA"));
    assert_false(lane_class_put(f, "a b"));
    assert_false(lane_class_put(f, "0123456789012345678901234567890123"));
    assert_true(lane_class_put(f, "cuda"));
    f[10] = 'x'; /* a byte after the NUL */
    assert_false(lane_class_ok(f));
    memset(f, 'a', sizeof f); /* no NUL */
    assert_false(lane_class_ok(f));
    memset(f, 0, sizeof f);
    assert_false(lane_class_ok(f));
    /* a manifest with a class that is not a name */
    lane_manifest m, got;
    make_manifest(&m, 200);
    m.kclass[0] = '\n';
    uint8_t *h;
    size_t hn;
    mu_err err = {0};
    assert_int_equal(lane_manifest_encode(&m, &h, &hn, &err), 0);
    assert_int_not_equal(lane_manifest_decode(h, hn, &got, &err), 0);
    assert_string_equal(lane_reason(&err), "frame");
    free(h);
}

static void test_manifest_seal(void **st) {
    (void)st;
    lane_manifest m, got;
    make_manifest(&m, 200);
    uint8_t *b, *s;
    size_t bn, sn;
    mu_err err = {0};
    assert_int_equal(lane_begin_encode(&m, KEY, &b, &bn, &err), 0);
    assert_int_equal(lane_begin_open(b, bn, KEY, &got, &err), 0);
    assert_memory_equal(got.request_id, m.request_id, 16);
    assert_string_equal(got.kclass, "cuda");
    assert_int_equal(got.generation, m.generation);
    assert_int_equal(got.n_chunks, m.n_chunks);
    write_seed("begin", b, bn, 3);
    uint8_t(*dg)[32] = calloc(m.n_chunks, 32);
    for (uint32_t i = 0; i < m.n_chunks; i++) memset(dg[i], (int)i, 32);
    assert_int_equal(lane_seal_encode(&m, (const uint8_t(*)[32])dg, KEY, &s, &sn, &err), 0);
    assert_int_equal(lane_seal_open(s, sn, KEY, &got, (const uint8_t(*)[32])dg, &err), 0);
    write_seed("seal", s, sn, 4);
    /* every byte flipped: refused, and for a reason */
    for (size_t i = 0; i < bn; i++) {
        b[i] ^= 0x20;
        err = (mu_err){0};
        assert_int_not_equal(lane_begin_open(b, bn, KEY, &got, &err), 0);
        assert_non_null(lane_reason(&err));
        b[i] ^= 0x20;
    }
    for (size_t i = 0; i < sn; i++) {
        s[i] ^= 0x01;
        err = (mu_err){0};
        assert_int_not_equal(lane_seal_open(s, sn, KEY, &m, (const uint8_t(*)[32])dg, &err), 0);
        assert_string_equal(lane_reason(&err), "seal");
        s[i] ^= 0x01;
    }
    /* truncated at every length */
    for (size_t i = 0; i < bn; i++) assert_int_not_equal(lane_begin_open(b, i, KEY, &got, &err), 0);
    for (size_t i = 0; i < sn; i++) assert_int_not_equal(lane_seal_open(s, i, KEY, &m, (const uint8_t(*)[32])dg, &err), 0);
    /* another key */
    uint8_t k2[32];
    memcpy(k2, KEY, 32);
    k2[31] ^= 1;
    assert_int_not_equal(lane_begin_open(b, bn, k2, &got, &err), 0);
    assert_string_equal(lane_reason(&err), "seal");
    /* a sealed manifest whose digests differ from the rows received */
    dg[5][0] ^= 1;
    assert_int_not_equal(lane_seal_open(s, sn, KEY, &m, (const uint8_t(*)[32])dg, &err), 0);
    assert_string_equal(lane_reason(&err), "digest");
    /* a SEAL of another manifest (another generation), correctly sealed */
    dg[5][0] ^= 1;
    lane_manifest m2 = m;
    m2.generation++;
    uint8_t *s2;
    size_t sn2;
    assert_int_equal(lane_seal_encode(&m2, (const uint8_t(*)[32])dg, KEY, &s2, &sn2, &err), 0);
    assert_int_not_equal(lane_seal_open(s2, sn2, KEY, &m, (const uint8_t(*)[32])dg, &err), 0);
    assert_string_equal(lane_reason(&err), "seal");
    /* the layer table must agree with the chunk count; classes and tails */
    uint8_t *h;
    size_t hn;
    assert_int_equal(lane_manifest_encode(&m, &h, &hn, &err), 0);
    assert_int_equal(lane_manifest_decode(h, hn, &got, &err), 0);
    write_seed("manifest", h, hn, 2);
    h[hn - 4] ^= 1; /* n_chunks */
    assert_int_not_equal(lane_manifest_decode(h, hn, &got, &err), 0);
    assert_string_equal(lane_reason(&err), "layout");
    free(h);
    free(s2);
    free(b);
    free(s);
    free(dg);
}

static void test_layer_frames(void **st) {
    (void)st;
    lane_manifest m;
    make_manifest(&m, 200);
    mu_err err = {0};
    uint32_t il, pos0, n;
    assert_true(lane_chunk_at(&m, 3, &il, &pos0, &n));
    size_t len = LANE_LAYER_HDR + 2 * (size_t)n * m.row_bytes;
    uint8_t *p = calloc(1, len);
    const uint8_t *rows;
    lane_layer_header(p, 3, il, pos0, n);
    assert_int_equal(lane_layer_check(p, len, &m, 3, &rows, &err), 0);
    assert_ptr_equal(rows, p + LANE_LAYER_HDR);
    write_seed("layer", p, len, 5);
    /* in another place of the stream (reordered, duplicated) */
    assert_int_not_equal(lane_layer_check(p, len, &m, 4, &rows, &err), 0);
    assert_string_equal(lane_reason(&err), "order");
    assert_int_not_equal(lane_layer_check(p, len, &m, 2, &rows, &err), 0);
    /* a row short, a row long, a lie about the layer */
    assert_int_not_equal(lane_layer_check(p, len - 1, &m, 3, &rows, &err), 0);
    assert_string_equal(lane_reason(&err), "frame");
    lane_layer_header(p, 3, il + 1, pos0, n);
    assert_int_not_equal(lane_layer_check(p, len, &m, 3, &rows, &err), 0);
    assert_string_equal(lane_reason(&err), "order");
    free(p);
    /* frame headers: magic, reserved, type, limits */
    uint8_t h[LANE_HDR];
    unsigned t;
    uint32_t l;
    lane_frame_header(h, LANE_LAYER, 1000);
    assert_int_equal(lane_frame_parse(h, &t, &l, &err), 0);
    write_seed("frame", h, sizeof h, 0);
    lane_frame_header(h, LANE_BEGIN, LANE_MAX_SMALL + 1);
    assert_int_not_equal(lane_frame_parse(h, &t, &l, &err), 0);
    assert_string_equal(lane_reason(&err), "limit");
    lane_frame_header(h, LANE_PING, 0); /* the heartbeat is empty */
    assert_int_equal(lane_frame_parse(h, &t, &l, &err), 0);
    lane_frame_header(h, LANE_PING, 1);
    assert_int_not_equal(lane_frame_parse(h, &t, &l, &err), 0);
    lane_frame_header(h, 99, 1);
    assert_int_not_equal(lane_frame_parse(h, &t, &l, &err), 0);
    lane_frame_header(h, LANE_ACK, 20);
    h[6] = 1;
    assert_int_not_equal(lane_frame_parse(h, &t, &l, &err), 0);
    h[6] = 0;
    h[0] = 'X';
    assert_int_not_equal(lane_frame_parse(h, &t, &l, &err), 0);
}

static void test_small_messages(void **st) {
    (void)st;
    mu_err err = {0};
    uint32_t toks[5] = {1, 2, 3, 40000, 5}, runs[2] = {1, 2 | LANE_RUN_SOLO};
    lane_hello h = {.version = LANE_VERSION, .ask = LANE_ASK_HANDOFF, .n_ctx = 100, .step = 2, .n_have = 3, .n_ship = 5,
                    .tokens = toks, .n_runs = 2, .runs = runs};
    memset(h.request_id, 7, 16);
    assert_true(lane_class_put(h.kclass, "x86-exact"));
    uint8_t *p;
    size_t n;
    assert_int_equal(lane_hello_encode(&h, &p, &n, &err), 0);
    lane_hello g;
    assert_int_equal(lane_hello_decode(p, n, &g, &err), 0);
    assert_string_equal(g.kclass, "x86-exact");
    assert_int_equal(g.n_have, 3);
    assert_int_equal(g.n_runs, 2);
    uint32_t back[5];
    lane_hello_tokens(&g, back);
    assert_memory_equal(back, toks, sizeof toks);
    lane_hello_runs(&g, back);
    assert_memory_equal(back, runs, sizeof runs);
    write_seed("hello", p, n, 1);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(lane_hello_decode(p, i, &g, &err), 0);
    free(p);
    /* held runs that do not cover n_have exactly, an empty run, runs without a delta */
    static const struct { uint32_t n_have, n_runs, r0, r1; } bad[] = {
        {2, 2, 1, 2 | LANE_RUN_SOLO}, {4, 2, 1, 2}, {3, 2, 3, LANE_RUN_SOLO}, {0, 1, 1, 0}, {3, 0, 0, 0}, {5, 2, 3, 2}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        uint32_t r2[2] = {bad[k].r0, bad[k].r1};
        lane_hello b = h;
        b.n_have = bad[k].n_have;
        b.n_runs = bad[k].n_runs;
        b.runs = r2;
        assert_int_equal(lane_hello_encode(&b, &p, &n, &err), 0);
        assert_int_not_equal(lane_hello_decode(p, n, &g, &err), 0);
        assert_string_equal(lane_reason(&err), "limit");
        free(p);
    }
    uint8_t r1[32], r2[32];
    lane_runs_digest(runs, 2, r1);
    runs[1] &= ~LANE_RUN_SOLO; /* the same lengths, not solo: another split */
    lane_runs_digest(runs, 2, r2);
    assert_memory_not_equal(r1, r2, 32);
    h.n_have = 0;
    uint8_t d1[32], d2[32];
    lane_token_digest(toks, 5, d1);
    toks[3]++;
    lane_token_digest(toks, 5, d2);
    assert_memory_not_equal(d1, d2, 32);
    assert_int_equal(lane_abort_encode(LANE_ABORT_BUSY, "busy: queue full", &p, &n, &err), 0);
    uint32_t code;
    char why[64];
    assert_int_equal(lane_abort_decode(p, n, &code, why, sizeof why, &err), 0);
    assert_int_equal(code, 429);
    assert_string_equal(why, "busy: queue full");
    write_seed("abort", p, n, 6);
    free(p);
    lane_info in = {.version = LANE_VERSION, .key_epoch = 2, .n_ctx_max = 8192}, out;
    strcpy(in.name, "glimmer");
    assert_true(lane_class_put(in.kclass, "cuda"));
    assert_int_equal(lane_info_encode(&in, &p, &n, &err), 0);
    assert_int_equal(lane_info_decode(p, n, &out, &err), 0);
    assert_string_equal(out.name, "glimmer");
    assert_string_equal(out.kclass, "cuda");
    assert_int_equal(out.key_epoch, 2);
    write_seed("info", p, n, 7);
    free(p);
    uint8_t ack[20], rid[16];
    bool ok;
    lane_ack_encode(h.request_id, true, ack);
    assert_int_equal(lane_ack_decode(ack, 20, rid, &ok, &err), 0);
    assert_true(ok);
    write_seed("ack", ack, 20, 8);
}

static char tmp[256];

static void test_ledger(void **st) {
    (void)st;
    char path[512];
    snprintf(path, sizeof path, "%s/ledger.db", tmp);
    ledger *l;
    mu_err err = {0};
    uint8_t k[32] = {9};
    assert_int_equal(ledger_open(path, &l, &err), 0);
    assert_int_equal(ledger_admit(l, k, 1, 100, &err), 0);
    assert_int_equal(ledger_admit(l, k, 1, 101, &err), 0);
    assert_int_not_equal(ledger_admit(l, k, 1, 101, &err), 0); /* replay */
    assert_string_equal(lane_reason(&err), "stale");
    assert_int_not_equal(ledger_admit(l, k, 1, 50, &err), 0);  /* stale */
    assert_int_equal(ledger_admit(l, k, 2, 50, &err), 0);      /* a new epoch starts over */
    ledger_close(l);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 077, 0);
    assert_int_equal(ledger_open(path, &l, &err), 0); /* after a restart */
    assert_int_not_equal(ledger_admit(l, k, 1, 101, &err), 0);
    uint64_t hw;
    assert_int_equal(ledger_high(l, k, 1, &hw, &err), 0);
    assert_int_equal(hw, 101);
    assert_int_equal(ledger_admit(l, k, 1, 102, &err), 0);
    ledger_close(l);
}

/* ---- TLS over a socket pair ------------------------------------------------ */

typedef struct {
    tls_ctx *ctx;
    int fd;
    uint8_t pin[32];
    int rc;
    mu_err err;
    conn *c;
} side;

static bool pin_eq(void *user, const uint8_t fp[32]) { return !memcmp(user, fp, 32); }

static void *server_main(void *arg) {
    side *s = arg;
    s->rc = tls_accept(s->ctx, s->fd, pin_eq, s->pin, 5000, &s->c, &s->err);
    if (!s->rc) {
        uint8_t *buf = NULL;
        size_t cap = 0;
        unsigned t;
        const uint8_t *p;
        uint32_t len;
        s->rc = conn_read_frame(s->c, &buf, &cap, &t, &p, &len, &s->err);
        if (!s->rc) s->rc = conn_write_frame(s->c, LANE_ACK, p, len, &s->err);
        free(buf);
    }
    return NULL;
}

/* One handshake: 0 when both ends agreed and a frame went there and back. */
static int handshake(const char *scert, const char *ckey_name, const uint8_t server_pin[32], const uint8_t client_pin[32],
                     mu_err *cerr, mu_err *serr) {
    char sc[512], sk[512], cc[512], ck[512];
    snprintf(sc, sizeof sc, "%s/tls/%s.pem", tmp, scert);
    snprintf(sk, sizeof sk, "%s/tls/%s.key", tmp, scert);
    snprintf(cc, sizeof cc, "%s/tls/%s.pem", tmp, ckey_name);
    snprintf(ck, sizeof ck, "%s/tls/%s.key", tmp, ckey_name);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    side srv = {.fd = sv[0]}, cli = {.fd = sv[1]};
    memcpy(srv.pin, server_pin, 32);
    memcpy(cli.pin, client_pin, 32);
    assert_int_equal(tls_ctx_new(true, sc, sk, &srv.ctx, cerr), 0);
    assert_int_equal(tls_ctx_new(false, cc, ck, &cli.ctx, cerr), 0);
    pthread_t th;
    pthread_create(&th, NULL, server_main, &srv);
    cli.rc = tls_connect(cli.ctx, cli.fd, pin_eq, cli.pin, 5000, &cli.c, &cli.err);
    if (!cli.rc) {
        cli.rc = conn_write_frame(cli.c, LANE_ACK, "01234567890123456789", 20, &cli.err);
        uint8_t *buf = NULL;
        size_t cap = 0;
        unsigned t;
        const uint8_t *p;
        uint32_t len;
        if (!cli.rc) cli.rc = conn_read_frame(cli.c, &buf, &cap, &t, &p, &len, &cli.err);
        if (!cli.rc && (len != 20 || memcmp(p, "01234567890123456789", 20))) cli.rc = -99;
        free(buf);
    }
    conn_close(cli.c); /* also wakes a server waiting for the frame */
    pthread_join(th, NULL);
    conn_close(srv.c);
    tls_ctx_free(srv.ctx);
    tls_ctx_free(cli.ctx);
    *cerr = cli.err;
    *serr = srv.err;
    return cli.rc ? cli.rc : srv.rc;
}

static void test_tls(void **st) {
    (void)st;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tls", tmp);
    mu_err err = {0}, e2 = {0};
    assert_int_equal(tls_ca_init(dir, &err), 0);
    assert_int_equal(tls_ca_init(dir, &err), MU_E_STATE); /* never overwrites */
    assert_int_equal(tls_issue(dir, "prod", "127.0.0.1", &err), 0);
    assert_int_equal(tls_issue(dir, "dec", "localhost", &err), 0);
    assert_int_equal(tls_issue(dir, "evil", "localhost", &err), 0);
    assert_int_equal(tls_issue(dir, "dec", "localhost", &err), MU_E_STATE);
    assert_int_not_equal(tls_issue(dir, "../x", "localhost", &err), 0);
    assert_int_not_equal(tls_issue(dir, "y", "a b", &err), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/dec.key", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 077, 0);
    uint8_t fp_prod[32], fp_dec[32], fp_evil[32];
    snprintf(path, sizeof path, "%s/prod.pem", dir);
    assert_int_equal(tls_cert_fp(path, fp_prod, &err), 0);
    snprintf(path, sizeof path, "%s/dec.pem", dir);
    assert_int_equal(tls_cert_fp(path, fp_dec, &err), 0);
    snprintf(path, sizeof path, "%s/evil.pem", dir);
    assert_int_equal(tls_cert_fp(path, fp_evil, &err), 0);
    /* pinned both ways */
    assert_int_equal(handshake("prod", "dec", fp_dec, fp_prod, &err, &e2), 0);
    /* a client the server has not pinned (same CA!) */
    assert_int_not_equal(handshake("prod", "evil", fp_dec, fp_prod, &err, &e2), 0);
    assert_string_equal(lane_reason(&e2), "auth");
    /* a server the client has not pinned */
    assert_int_not_equal(handshake("evil", "dec", fp_dec, fp_prod, &err, &e2), 0);
    assert_string_equal(lane_reason(&err), "auth");
}

static int setup(void **st) {
    (void)st;
    snprintf(tmp, sizeof tmp, "/tmp/test_lane.XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) ? -1 : 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_and_order), cmocka_unit_test(test_class_names), cmocka_unit_test(test_manifest_seal),
        cmocka_unit_test(test_layer_frames),   cmocka_unit_test(test_small_messages),
        cmocka_unit_test(test_ledger),         cmocka_unit_test(test_tls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
