/* test_kvpack.c: kvpack v1 conformance of src/kv against the vectors of the
 * kvpack project's Python reference (tests/data/kvpack, README there):
 * muser builds the reference fixtures from the same inputs and must encode
 * byte-identical objects, identities and keys, decode the reference's
 * objects to the same values, and give every case of the rejection corpus
 * the reference's verdict category. Then exhaustive single-bit flips and
 * truncations of a small pack and of its chunk, which must all be refused,
 * and the lossless codec's canonical form. Last, the batched paths pack
 * writes and restores take (AVX-512 lanes where the CPU has them) against
 * OpenSSL one message at a time: the same hashes, the same object bytes,
 * the same verdicts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/kv/kvpack.h"

#define DATA "tests/data/kvpack/"

/* ---- the TSV vectors: "name<TAB>value" lines --------------------------- */

typedef struct {
    char *text;
    int n;
    char *name[256], *value[256];
} tsv;

static void tsv_load(tsv *t, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run the tests from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    t->text = malloc((size_t)n + 1);
    assert_int_equal(fread(t->text, 1, (size_t)n, f), (size_t)n);
    t->text[n] = 0;
    fclose(f);
    t->n = 0;
    for (char *line = strtok(t->text, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        if (!tab || line[0] == '#') continue;
        *tab = 0;
        assert_true(t->n < 256);
        t->name[t->n] = line;
        t->value[t->n++] = tab + 1;
    }
}

static const char *tsv_get(const tsv *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->name[i], name)) return t->value[i];
    fail_msg("vector %s missing", name);
    return NULL;
}

/* hex -> malloc'ed bytes */
static uint8_t *unhex(const char *h, size_t *n) {
    size_t len = strlen(h) / 2;
    uint8_t *p = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        assert_int_equal(sscanf(h + 2 * i, "%2x", &v), 1);
        p[i] = (uint8_t)v;
    }
    *n = len;
    return p;
}

static void expect_bytes(const tsv *t, const char *name, const uint8_t *p, size_t n) {
    size_t m;
    uint8_t *want = unhex(tsv_get(t, name), &m);
    if (m != n || memcmp(want, p, n)) fail_msg("%s: muser's %zu bytes differ from the reference's %zu", name, n, m);
    free(want);
}

/* ---- the reference fixture, built here from the same inputs ------------ */

static void ident(uint8_t out[32], int v) { memset(out, v, 32); }

static const kv_key KEY = {0, 11, (const uint8_t *)"attention.k"};

static kv_fstate fstate(unsigned codec) {
    kv_fstate s = {.key = KEY, .cache_kind = 1, .dtype = 1, .codec = (uint16_t)codec, .codec_version = 1,
                   .layout = KV_LAYOUT_CONTIGUOUS, .axis_rule = KV_AXIS_DIRECT, .token_axis = 0, .elements = 4,
                   .rank = 2, .dims = {0, 4}};
    return s;
}

static kv_family family(kv_fstate *st) {
    kv_family f = {.mode = KV_MODE_NATIVE, .page_tokens = 256, .n_states = 1, .states = st};
    ident(f.abi, 2);
    ident(f.topology, 3);
    ident(f.shard_map, 4);
    return f;
}

static kv_semantic model(void) {
    kv_semantic m;
    ident(m.weights, 10);
    ident(m.adapters, 11);
    ident(m.tokenizer, 12);
    ident(m.position, 13);
    ident(m.math, 14);
    return m;
}

static kv_keys keys;
static uint8_t tenant[32];
static kv_aux aux;

static void setup_keys(void) {
    uint8_t root[32];
    ident(root, 99);
    ident(tenant, 1);
    mu_err err;
    assert_int_equal(kv_key_schedule(root, tenant, 7, &keys, &err), 0);
    ident(aux.type_id, 20);
    ident(aux.value_id, 21);
}

static void seq(uint8_t *p, int from, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(from + i);
}

static const char *CODECS[2] = {"raw", "lossless"}, *MODES[2] = {"plain", "encrypted"};

static void test_fixtures(void **state) {
    (void)state;
    setup_keys();
    mu_err err = {0};
    for (int ci = 0; ci < 2; ci++)
        for (int ce = 0; ce < 2; ce++)
            for (int pe = 0; pe < 2; pe++) {
                char path[256];
                snprintf(path, sizeof path, DATA "fixture-%s-%s-%s.tsv", CODECS[ci], MODES[ce], MODES[pe]);
                tsv t;
                tsv_load(&t, path);
                /* keys */
                expect_bytes(&t, "keys.namespace", keys.namespace_, 32);
                expect_bytes(&t, "keys.prefix", keys.prefix, 32);
                expect_bytes(&t, "keys.manifest_auth", keys.manifest_auth, 32);
                expect_bytes(&t, "keys.manifest_encryption", keys.manifest_enc, 32);
                expect_bytes(&t, "keys.chunk_identity", keys.chunk_identity, 32);
                expect_bytes(&t, "keys.object_identity", keys.object_identity, 32);
                expect_bytes(&t, "keys.chunk_encryption", keys.chunk_enc, 32);
                /* the state declaration vector */
                kv_decl d = {.key = {7, 11, (const uint8_t *)"attention.k"}, .full = {3, {320, 4, 8}},
                             .segment = {3, {64, 4, 8}}, .n_strides = 3, .strides = {32, 8, 1},
                             .logical_start = 256, .logical_count = 64, .abs_pos = 320, .window = 0, .group = 9};
                kv_buf b = {0};
                kv_encode_decl(&b, &d);
                expect_bytes(&t, "state_declaration", b.p, b.n);
                kv_buf_free(&b);
                /* family and identities */
                kv_fstate st = fstate(ci ? KV_CODEC_LOSSLESS : KV_CODEC_RAW);
                kv_family f = family(&st);
                kv_encode_family(&b, &f);
                expect_bytes(&t, "family", b.p, b.n);
                kv_buf_free(&b);
                uint8_t id[32];
                kv_semantic m = model();
                kv_semantic_id(&m, id);
                expect_bytes(&t, "semantic_id", id, 32);
                kv_family_id(&f, id);
                expect_bytes(&t, "family_id", id, 32);
                kv_namespace_id(keys.namespace_, "tenant-alpha", 12, id);
                expect_bytes(&t, "namespace_id", id, 32);
                uint32_t toks[4] = {1, 2, 3, 4};
                kv_cut cut;
                uint8_t nodes[1][32];
                assert_int_equal(kv_input_cut(keys.prefix, tenant, &m, &f, &aux, 1, toks, 4, &cut, nodes, &err), 0);
                expect_bytes(&t, "token_root", cut.token_root, 32);
                expect_bytes(&t, "auxiliary_root", cut.aux_root, 32);
                expect_bytes(&t, "prefix.0.id", nodes[0], 32);
                /* frames */
                uint8_t plain[16];
                seq(plain, 0, 16);
                assert_int_equal(kv_frame_encode(KV_CODEC_RAW, plain, 16, &b, &err), 0);
                expect_bytes(&t, "raw_frame", b.p, b.n);
                kv_buf_free(&b);
                assert_int_equal(kv_frame_encode(KV_CODEC_LOSSLESS, plain, 16, &b, &err), 0);
                expect_bytes(&t, "lossless_frame", b.p, b.n);
                kv_buf_free(&b);
                /* chunk */
                uint8_t salt[16], nonce[12];
                seq(salt, 0xA0, 16);
                seq(nonce, 0xB0, 12);
                kv_span span = {0, 4, 0, 16};
                kv_chunk ch;
                assert_int_equal(kv_chunk_encode(plain, 16, tenant, &f, &KEY, &span, 7, ce, &keys, ce ? salt : NULL,
                                                 ce ? nonce : NULL, &ch, &err), 0);
                expect_bytes(&t, "chunk", ch.data.p, ch.data.n);
                expect_bytes(&t, "chunk_id", ch.chunk_id, 32);
                expect_bytes(&t, "object_key", ch.object_key, 32);
                expect_bytes(&t, "object_digest", ch.digest, 32);
                /* schema, manifest, pack */
                kv_rstate rs = {.key = KEY, .full = {2, {4, 4}}, .segment = {2, {4, 4}}, .n_strides = 2,
                                .strides = {4, 1}, .logical_start = 0, .logical_count = 4, .phys_off = 0,
                                .phys_span = 16, .phys_complete = 16, .abs_pos = 4, .window = 0, .n_spans = 1,
                                .spans = &span};
                kv_key gk = KEY;
                kv_group g = {1, 1, &gk};
                kv_schema s = {.kind = 0, .n_states = 1, .states = &rs, .n_groups = 1, .groups = &g,
                               .segment_bytes = 16, .complete_bytes = 16};
                kv_encode_schema(&b, &s);
                expect_bytes(&t, "schema", b.p, b.n);
                kv_buf_free(&b);
                kv_schema_id(&s, id);
                expect_bytes(&t, "schema_id", id, 32);
                kv_ref ref = {.epoch = 7, .plain_bytes = 16, .object_bytes = (uint32_t)ch.data.n};
                memcpy(ref.chunk_id, ch.chunk_id, 32);
                memcpy(ref.object_key, ch.object_key, 32);
                memcpy(ref.digest, ch.digest, 32);
                kv_pstate ps = {KEY, 1, &ref};
                kv_manifest man = {.epoch = 7, .model = m, .cut = cut, .family = f, .schema = s, .n_states = 1,
                                   .states = &ps};
                memcpy(man.tenant, tenant, 32);
                kv_encode_manifest(&b, &man);
                expect_bytes(&t, "manifest", b.p, b.n);
                kv_buf_free(&b);
                uint8_t psalt[16], pnonce[12];
                seq(psalt, 0xC0, 16);
                seq(pnonce, 0xD0, 12);
                kv_buf pack;
                assert_int_equal(
                    kv_pack_encode(&man, &keys, pe, pe ? psalt : NULL, pe ? pnonce : NULL, &pack, id, &err), 0);
                expect_bytes(&t, "pack", pack.p, pack.n);
                expect_bytes(&t, "manifest_id", id, 32);
                kv_buf_free(&pack);
                kv_buf_free(&ch.data);
                /* decoding the reference's own objects gives the same values */
                size_t n;
                uint8_t *rp = unhex(tsv_get(&t, "pack"), &n);
                kv_mem *mem = kv_mem_new();
                kv_manifest dm;
                if (kv_pack_decode(rp, n, &keys, mem, &dm, &err)) fail_msg("pack decode: %s", err.msg);
                kv_encode_manifest(&b, &dm);
                expect_bytes(&t, "manifest", b.p, b.n);
                kv_buf_free(&b);
                uint8_t *rc = unhex(tsv_get(&t, "chunk"), &n), out[16];
                if (kv_chunk_decode(rc, n, &dm.states[0].chunks[0], &dm.schema.states[0].spans[0], dm.tenant,
                                    &dm.family, &dm.states[0].key, &keys, out, &err))
                    fail_msg("chunk decode: %s", err.msg);
                assert_memory_equal(out, plain, 16);
                free(rc);
                free(rp);
                /* and the canonical objects decode and re-encode */
                uint8_t *raw = unhex(tsv_get(&t, "family"), &n);
                kv_family df;
                assert_int_equal(kv_decode_family(raw, n, true, mem, &df, &err), 0);
                free(raw);
                raw = unhex(tsv_get(&t, "schema"), &n);
                kv_schema ds;
                assert_int_equal(kv_decode_schema(raw, n, mem, &ds, &err), 0);
                free(raw);
                raw = unhex(tsv_get(&t, "state_declaration"), &n);
                kv_decl dd;
                assert_int_equal(kv_decode_decl(raw, n, mem, &dd, &err), 0);
                assert_int_equal(dd.group, 9);
                free(raw);
                raw = unhex(tsv_get(&t, "manifest"), &n);
                assert_int_equal(kv_decode_manifest(raw, n, true, mem, &dm, &err), 0);
                free(raw);
                kv_mem_free(mem);
                free(t.text);
            }
}

/* The base and its seven deltas: built, compared, decoded, and each delta's
 * plaintext lands at its absolute offset of the logical stream. */
static void test_delta_chains(void **state) {
    (void)state;
    setup_keys();
    mu_err err = {0};
    for (int ci = 0; ci < 2; ci++)
        for (int ce = 0; ce < 2; ce++)
            for (int pe = 0; pe < 2; pe++) {
                char path[256];
                snprintf(path, sizeof path, DATA "delta-%s-%s-%s.tsv", CODECS[ci], MODES[ce], MODES[pe]);
                tsv t;
                tsv_load(&t, path);
                assert_string_equal(tsv_get(&t, "stages"), "8");
                kv_fstate st = fstate(ci ? KV_CODEC_LOSSLESS : KV_CODEC_RAW);
                kv_family f = family(&st);
                kv_semantic m = model();
                uint32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
                uint8_t parent_id[32], stream[32];
                kv_cut parent_cut = {0};
                for (int sg = 0; sg < 8; sg++) {
                    char name[64];
                    int nt = sg + 1;
                    kv_cut cut;
                    assert_int_equal(kv_input_cut(keys.prefix, tenant, &m, &f, &aux, 1, toks, (size_t)nt, &cut, NULL, &err), 0);
                    uint8_t plain[4], salt[16], nonce[12], psalt[16], pnonce[12];
                    seq(plain, sg * 4, 4);
                    for (int i = 0; i < 16; i++) salt[i] = (uint8_t)(0x20 + sg + i), psalt[i] = (uint8_t)(0x60 + sg + i);
                    for (int i = 0; i < 12; i++) nonce[i] = (uint8_t)(0x40 + sg + i), pnonce[i] = (uint8_t)(0x80 + sg + i);
                    kv_span span = {(uint64_t)sg, 1, (uint64_t)sg * 4, 4};
                    kv_chunk ch;
                    assert_int_equal(kv_chunk_encode(plain, 4, tenant, &f, &KEY, &span, 7, ce, &keys, ce ? salt : NULL,
                                                     ce ? nonce : NULL, &ch, &err), 0);
                    snprintf(name, sizeof name, "stage.%d.chunk", sg);
                    expect_bytes(&t, name, ch.data.p, ch.data.n);
                    kv_rstate rs = {.key = KEY, .full = {2, {(uint64_t)nt, 4}},
                                    .segment = {2, {sg ? 1u : (uint64_t)nt, 4}}, .n_strides = 2, .strides = {4, 1},
                                    .logical_start = sg ? (uint64_t)sg : 0, .logical_count = sg ? 1 : (uint64_t)nt,
                                    .phys_off = sg ? (uint64_t)sg * 4 : 0, .phys_span = sg ? 4 : (uint64_t)nt * 4,
                                    .phys_complete = (uint64_t)nt * 4, .abs_pos = (uint64_t)nt, .n_spans = 1,
                                    .spans = &span};
                    kv_key gk = KEY;
                    kv_group g = {1, 1, &gk};
                    kv_schema s = {.kind = sg ? 1 : 0, .depth = (uint8_t)sg, .parent_cut = parent_cut, .n_states = 1,
                                   .states = &rs, .n_groups = 1, .groups = &g,
                                   .segment_bytes = sg ? 4 : (uint64_t)nt * 4, .complete_bytes = (uint64_t)nt * 4};
                    if (sg) memcpy(s.parent, parent_id, 32);
                    kv_ref ref = {.epoch = 7, .plain_bytes = 4, .object_bytes = (uint32_t)ch.data.n};
                    memcpy(ref.chunk_id, ch.chunk_id, 32);
                    memcpy(ref.object_key, ch.object_key, 32);
                    memcpy(ref.digest, ch.digest, 32);
                    kv_pstate ps = {KEY, 1, &ref};
                    kv_manifest man = {.epoch = 7, .model = m, .cut = cut, .family = f, .schema = s, .n_states = 1,
                                       .states = &ps};
                    memcpy(man.tenant, tenant, 32);
                    kv_buf b = {0}, pack;
                    kv_encode_manifest(&b, &man);
                    snprintf(name, sizeof name, "stage.%d.manifest", sg);
                    expect_bytes(&t, name, b.p, b.n);
                    kv_buf_free(&b);
                    uint8_t id[32];
                    assert_int_equal(kv_pack_encode(&man, &keys, pe, pe ? psalt : NULL, pe ? pnonce : NULL, &pack, id, &err), 0);
                    snprintf(name, sizeof name, "stage.%d.pack", sg);
                    expect_bytes(&t, name, pack.p, pack.n);
                    snprintf(name, sizeof name, "stage.%d.manifest_id", sg);
                    expect_bytes(&t, name, id, 32);
                    /* decode the reference's pack and chunk; place the plaintext */
                    size_t n;
                    snprintf(name, sizeof name, "stage.%d.pack", sg);
                    uint8_t *rp = unhex(tsv_get(&t, name), &n);
                    kv_mem *mem = kv_mem_new();
                    kv_manifest dm;
                    if (kv_pack_decode(rp, n, &keys, mem, &dm, &err)) fail_msg("stage %d: %s", sg, err.msg);
                    snprintf(name, sizeof name, "stage.%d.chunk", sg);
                    uint8_t *rc = unhex(tsv_get(&t, name), &n);
                    const kv_span *sp = &dm.schema.states[0].spans[0];
                    assert_int_equal(kv_chunk_decode(rc, n, &dm.states[0].chunks[0], sp, dm.tenant, &dm.family,
                                                     &dm.states[0].key, &keys, stream + sp->plain_off, &err), 0);
                    assert_int_equal(dm.schema.kind, sg ? 1 : 0);
                    free(rc);
                    free(rp);
                    kv_mem_free(mem);
                    kv_buf_free(&pack);
                    kv_buf_free(&ch.data);
                    memcpy(parent_id, id, 32);
                    parent_cut = cut;
                }
                uint8_t want[32];
                seq(want, 0, 32);
                assert_memory_equal(stream, want, 32);
                free(t.text);
            }
}

/* ---- rejection corpus -------------------------------------------------- */

static const char *LEGACY[7] = {"IOKVPK1\0", "KVREC1\0\0", "KVCOMMIT", "KVFOOT1\0", "KVZLIB1\0", "KVQ8V1\0\0", "IOKVENC\0"};

static void test_rejection_corpus(void **state) {
    (void)state;
    tsv fx;
    tsv_load(&fx, DATA "fixture-raw-plain-plain.tsv");
    FILE *f = fopen(DATA "rejections.tsv", "r");
    assert_non_null(f);
    char line[1024];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        char *col[9];
        int nc = 0;
        for (char *p = strtok(line, "\t"); p && nc < 9; p = strtok(NULL, "\t")) col[nc++] = p;
        assert_int_equal(nc, 9);
        size_t n;
        uint8_t *d = unhex(tsv_get(&fx, col[2]), &n);
        d = realloc(d, n + 1);
        long off = atol(col[4]), val = atol(col[5]);
        const char *op = col[3];
        if (!strcmp(op, "truncate")) n = (size_t)off;
        else if (!strcmp(op, "xor")) d[off] ^= (uint8_t)val;
        else if (!strcmp(op, "set-u8")) d[off] = (uint8_t)val;
        else if (!strcmp(op, "set-u16")) d[off] = (uint8_t)val, d[off + 1] = (uint8_t)(val >> 8);
        else if (!strcmp(op, "append-zero")) d[n++] = 0;
        else if (!strcmp(op, "legacy-magic")) memcpy(d, LEGACY[val], 8);
        else fail_msg("unknown operation %s", op);
        mu_err err = {0};
        kv_mem *mem = kv_mem_new();
        int rc;
        const char *kind = col[1];
        if (!strcmp(kind, "state")) {
            kv_decl x;
            rc = kv_decode_decl(d, n, mem, &x, &err);
        } else if (!strcmp(kind, "family")) {
            kv_family x;
            rc = kv_decode_family(d, n, true, mem, &x, &err);
        } else if (!strcmp(kind, "schema")) {
            kv_schema x;
            rc = kv_decode_schema(d, n, mem, &x, &err);
        } else {
            kv_manifest x;
            rc = kv_decode_manifest(d, n, true, mem, &x, &err);
        }
        if (!rc) fail_msg("%s: accepted", col[0]);
        const char *cat = kv_category(&err);
        if (!cat || strcmp(cat, col[7]) || strcmp(cat, col[6]))
            fail_msg("%s: muser says %s (%s), the reference %s, the corpus %s", col[0], cat ? cat : "?", err.msg,
                     col[7], col[6]);
        kv_mem_free(mem);
        free(d);
        cases++;
    }
    fclose(f);
    assert_int_equal(cases, 31);
    free(fx.text);
}

/* ---- exhaustive damage ------------------------------------------------- */

static void damage(const char *fixture) {
    setup_keys();
    tsv t;
    tsv_load(&t, fixture);
    size_t pn, cn;
    uint8_t *pack = unhex(tsv_get(&t, "pack"), &pn), *chunk = unhex(tsv_get(&t, "chunk"), &cn);
    mu_err err;
    kv_mem *mem = kv_mem_new();
    kv_manifest m;
    assert_int_equal(kv_pack_decode(pack, pn, &keys, mem, &m, &err), 0);
    const kv_ref *ref = &m.states[0].chunks[0];
    const kv_span *span = &m.schema.states[0].spans[0];
    uint8_t out[16];
    assert_int_equal(kv_chunk_decode(chunk, cn, ref, span, m.tenant, &m.family, &m.states[0].key, &keys, out, &err), 0);
    long flips = 0;
    for (size_t i = 0; i < pn; i++)
        for (int b = 0; b < 8; b++) {
            pack[i] ^= (uint8_t)(1 << b);
            kv_mem *m2 = kv_mem_new();
            kv_manifest x;
            if (!kv_pack_decode(pack, pn, &keys, m2, &x, &err)) fail_msg("%s: pack bit %zu.%d flipped accepted", fixture, i, b);
            assert_non_null(kv_category(&err));
            kv_mem_free(m2);
            pack[i] ^= (uint8_t)(1 << b);
            flips++;
        }
    for (size_t i = 0; i < cn; i++)
        for (int b = 0; b < 8; b++) {
            chunk[i] ^= (uint8_t)(1 << b);
            if (!kv_chunk_decode(chunk, cn, ref, span, m.tenant, &m.family, &m.states[0].key, &keys, out, &err))
                fail_msg("%s: chunk bit %zu.%d flipped accepted", fixture, i, b);
            assert_non_null(kv_category(&err));
            chunk[i] ^= (uint8_t)(1 << b);
            flips++;
        }
    for (size_t n = 0; n < pn; n++) {
        kv_mem *m2 = kv_mem_new();
        kv_manifest x;
        if (!kv_pack_decode(pack, n, &keys, m2, &x, &err)) fail_msg("pack truncated to %zu accepted", n);
        kv_mem_free(m2);
    }
    for (size_t n = 0; n < cn; n++)
        if (!kv_chunk_decode(chunk, n, ref, span, m.tenant, &m.family, &m.states[0].key, &keys, out, &err))
            fail_msg("chunk truncated to %zu accepted", n);
    assert_int_equal(flips, (long)(pn + cn) * 8);
    kv_mem_free(mem);
    free(pack);
    free(chunk);
    free(t.text);
}

static void test_damage_plain(void **state) {
    (void)state;
    damage(DATA "fixture-raw-plain-plain.tsv");
}
static void test_damage_encrypted(void **state) {
    (void)state;
    damage(DATA "fixture-lossless-encrypted-encrypted.tsv");
}

/* ---- TailWindow (MANIFEST_V1.md; muser's extension over the reference) -- */

/* A full manifest of 10 tokens whose one state keeps the last `count` */
static int tail_manifest(uint64_t count, uint64_t start, int kind, mu_err *err) {
    setup_keys();
    kv_fstate st = fstate(KV_CODEC_RAW);
    st.axis_rule = KV_AXIS_TAIL;
    kv_family f = family(&st);
    kv_span span = {start, count, start * 4, (uint32_t)(count * 4)};
    kv_rstate rs = {.key = KEY, .full = {2, {count, 4}}, .segment = {2, {count, 4}}, .n_strides = 2,
                    .strides = {4, 1}, .logical_start = start, .logical_count = count, .phys_off = 0,
                    .phys_span = count * 4, .phys_complete = count * 4, .abs_pos = 10, .n_spans = 1, .spans = &span};
    kv_key gk = KEY;
    kv_group g = {1, 1, &gk};
    kv_schema s = {.kind = (uint8_t)kind, .depth = (uint8_t)kind, .n_states = 1, .states = &rs, .n_groups = 1,
                   .groups = &g, .segment_bytes = count * 4, .complete_bytes = count * 4};
    kv_ref ref = {.epoch = 7, .plain_bytes = (uint32_t)(count * 4), .object_bytes = 8192};
    memset(ref.chunk_id, 1, 32);
    memset(ref.object_key, 2, 32);
    memset(ref.digest, 3, 32);
    kv_pstate ps = {KEY, 1, &ref};
    kv_manifest m = {.epoch = 7, .model = model(), .family = f, .schema = s, .n_states = 1, .states = &ps};
    memcpy(m.tenant, tenant, 32);
    memset(m.cut.token_root, 5, 32);
    memset(m.cut.aux_root, 6, 32);
    m.cut.token_count = 10;
    if (kind) {
        memset(m.schema.parent, 7, 32);
        m.schema.parent_cut = m.cut;
        m.schema.parent_cut.token_count = 4;
    }
    return kv_validate_manifest(&m, err);
}

static void test_tail_window(void **state) {
    (void)state;
    mu_err err;
    assert_int_equal(tail_manifest(3, 7, 0, &err), 0);   /* the last 3 of 10 */
    assert_int_equal(tail_manifest(10, 0, 0, &err), 0);  /* all of them */
    assert_int_not_equal(tail_manifest(3, 6, 0, &err), 0); /* not trailing */
    assert_string_equal(kv_category(&err), "semantics");
    assert_int_not_equal(tail_manifest(3, 7, 1, &err), 0); /* in a delta */
    assert_string_equal(kv_category(&err), "semantics");
    assert_int_not_equal(tail_manifest(11, 0, 0, &err), 0); /* more than the cut */
}


/* ---- batched hashing, encoding and verification ------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint8_t rnd8(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint8_t)(rng >> 24);
}

static void test_sha_jobs(void **state) {
    (void)state;
    enum { N = 40 };
    static uint8_t head[N][KV_SHA_HEAD], body[N][9000];
    uint8_t a[N][32], b[N][32];
    kv_sha_job x[N], y[N];
    /* the padding's edges (55, 56, 63, 64 bytes in a block) in head, body and both */
    static const size_t lens[] = {0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 200, 511, 512};
    for (int trial = 0; trial < 60; trial++) {
        int n = 1 + trial % N;
        for (int i = 0; i < n; i++) {
            size_t hn = trial < 14 ? lens[(trial + i) % 14] : rnd8() * 2u % (KV_SHA_HEAD + 1);
            size_t bn = trial < 14 ? lens[(trial * 3 + i) % 14] : (size_t)rnd8() * 35;
            for (size_t k = 0; k < hn; k++) head[i][k] = rnd8();
            for (size_t k = 0; k < bn; k++) body[i][k] = rnd8();
            x[i] = (kv_sha_job){.head = head[i], .head_n = hn, .body = body[i], .body_n = bn, .out = a[i]};
            y[i] = x[i];
            y[i].out = b[i];
        }
        kv_sha256_jobs(x, n);
        kv_sha256_jobs_ref(y, n);
        for (int i = 0; i < n; i++)
            if (memcmp(a[i], b[i], 32))
                fail_msg("trial %d job %d (%zu + %zu bytes): lanes and OpenSSL differ (lanes: %d)", trial, i, x[i].head_n,
                         x[i].body_n, kv_sha256_lanes());
    }
}

/* n chunks of one state, 16 tokens (64 bytes) each */
#define BT 16
typedef struct {
    kv_fstate st;
    kv_family f;
    uint8_t fam[32];
    kv_span span[BT];
    uint8_t plain[BT][64];
    kv_buf obj[BT];
    kv_chunk ch[BT];
    kv_ref ref[BT];
} batch;

static void batch_make(batch *b, unsigned codec, bool enc) {
    setup_keys();
    memset(b, 0, sizeof *b);
    b->st = fstate(codec);
    b->f = family(&b->st);
    assert_int_equal(kv_family_id(&b->f, b->fam), 0);
    kv_enc_item it[BT];
    for (int i = 0; i < BT; i++) {
        b->span[i] = (kv_span){(uint64_t)i * 16, 16, (uint64_t)i * 64, 64};
        for (int k = 0; k < 64; k++) b->plain[i][k] = codec == KV_CODEC_LOSSLESS && k % 3 ? 9 : rnd8();
        it[i] = (kv_enc_item){.plain = b->plain[i], .n = 64, .state = &KEY, .span = &b->span[i], .obj = &b->obj[i],
                              .out = &b->ch[i]};
    }
    mu_err err;
    assert_int_equal(kv_chunk_encode_many(it, BT, tenant, &b->f, 7, enc, &keys, b->fam, &err), 0);
    for (int i = 0; i < BT; i++) {
        kv_ref *r = &b->ref[i];
        memcpy(r->chunk_id, b->ch[i].chunk_id, 32);
        memcpy(r->object_key, b->ch[i].object_key, 32);
        memcpy(r->digest, b->ch[i].digest, 32);
        r->epoch = 7;
        r->plain_bytes = 64;
        r->object_bytes = (uint32_t)b->obj[i].n;
    }
}

static void batch_free(batch *b) {
    for (int i = 0; i < BT; i++) kv_buf_free(&b->obj[i]);
}

static void test_encode_many(void **state) {
    (void)state;
    mu_err err;
    for (unsigned codec = KV_CODEC_RAW; codec <= KV_CODEC_LOSSLESS; codec++)
        for (int enc = 0; enc < 2; enc++) {
            batch b;
            batch_make(&b, codec, enc);
            for (int i = 0; i < BT; i++) {
                uint8_t id[32], out[64];
                assert_int_equal(kv_chunk_id(keys.chunk_identity, tenant, b.fam, &KEY, &b.span[i], b.plain[i], 64, id, &err), 0);
                assert_memory_equal(id, b.ch[i].chunk_id, 32);
                if (!enc) { /* no salt or nonce: one object for one plaintext */
                    kv_chunk c;
                    assert_int_equal(kv_chunk_encode(b.plain[i], 64, tenant, &b.f, &KEY, &b.span[i], 7, false, &keys,
                                                     NULL, NULL, &c, &err), 0);
                    assert_int_equal(c.data.n, b.obj[i].n);
                    assert_memory_equal(c.data.p, b.obj[i].p, c.data.n);
                    assert_memory_equal(c.digest, b.ch[i].digest, 32);
                    kv_buf_free(&c.data);
                }
                assert_int_equal(kv_chunk_decode(b.obj[i].p, b.obj[i].n, &b.ref[i], &b.span[i], tenant, &b.f, &KEY,
                                                 &keys, out, &err), 0);
                assert_memory_equal(out, b.plain[i], 64);
            }
            batch_free(&b);
        }
}

/* kv_chunk_open_many against kv_chunk_open item after item on copies of
 * the batch, with bit off[d] of object obj[d] flipped; reauth: the damaged
 * objects' references carry their new digests (as a writer's bug would
 * make them), so the checks after the digests see the damage */
static void open_compare(const batch *b0, const int *obj, const size_t *off, int n_damage, bool reauth,
                         const char *what) {
    uint8_t *x[BT], *y[BT], outx[BT][64], outy[BT][64];
    kv_dec_item it[BT];
    batch *b = malloc(sizeof *b);
    memcpy(b, b0, sizeof *b);
    for (int i = 0; i < BT; i++) {
        x[i] = malloc(b->obj[i].n);
        memcpy(x[i], b->obj[i].p, b->obj[i].n);
    }
    for (int d = 0; d < n_damage; d++) {
        x[obj[d]][off[d] / 8] ^= (uint8_t)(1 << off[d] % 8);
        if (reauth) kv_sha256(x[obj[d]], b->obj[obj[d]].n, b->ref[obj[d]].digest);
    }
    for (int i = 0; i < BT; i++) {
        y[i] = malloc(b->obj[i].n);
        memcpy(y[i], x[i], b->obj[i].n);
        it[i] = (kv_dec_item){.p = x[i], .n = b->obj[i].n, .ref = &b->ref[i], .span = &b->span[i], .state = &KEY,
                              .out = outx[i]};
    }
    mu_err ex = {0}, ey = {0};
    int rx = kv_chunk_open_many(it, BT, tenant, &b->f, &keys, b->fam, &ex), ry = 0;
    for (int i = 0; i < BT && !ry; i++) {
        const uint8_t *pl;
        ry = kv_chunk_open(y[i], b->obj[i].n, &b->ref[i], &b->span[i], tenant, &b->f, &KEY, &keys, b->fam, outy[i], &pl,
                           &ey);
        if (!ry) assert_memory_equal(pl, b->plain[i], 64);
    }
    if (rx != ry || (rx && strcmp(ex.msg, ey.msg)))
        fail_msg("%s: batched %d (%s), one by one %d (%s)", what, rx, rx ? ex.msg : "", ry, ry ? ey.msg : "");
    if (!rx)
        for (int i = 0; i < BT; i++) assert_memory_equal(it[i].plain, b->plain[i], 64);
    for (int i = 0; i < BT; i++) free(x[i]), free(y[i]);
    free(b);
}

static void test_open_many(void **state) {
    (void)state;
    for (int enc = 0; enc < 2; enc++) {
        batch b;
        batch_make(&b, enc ? KV_CODEC_LOSSLESS : KV_CODEC_RAW, enc);
        open_compare(&b, NULL, NULL, 0, false, "intact");
        char what[80];
        /* every bit of object 5's header fields and frame */
        for (size_t bit = 0; bit < (4096 + 128) * 8; bit++) {
            if (bit >= 300 * 8 && bit < 4096 * 8 && bit % 61) continue; /* reserved bytes: a sample */
            int o = 5;
            snprintf(what, sizeof what, "object 5 bit %zu", bit);
            open_compare(&b, &o, &bit, 1, false, what);
            if (bit >= 4096 * 8) open_compare(&b, &o, &bit, 1, true, what); /* the frame, authenticated */
        }
        /* two damaged objects: the earlier one's verdict, whatever step each fails at */
        static const size_t at[] = {0, 20 * 8, 112 * 8, 204 * 8, 4096 * 8 + 3, 4096 * 8 + 17 * 8, 4096 * 8 + 60 * 8};
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < 7; j++)
                for (int ra = 0; ra < 2; ra++) {
                    int o[2] = {3, 9};
                    size_t off[2] = {at[i], at[j]};
                    snprintf(what, sizeof what, "objects 3 (%zu) and 9 (%zu)%s", at[i], at[j], ra ? ", reauth" : "");
                    open_compare(&b, o, off, 2, ra, what);
                }
        batch_free(&b);
    }
}

/* The memo of objects verified before: the objects kv_chunk_encode_many
 * made open through it (every comparison still made), an object whose
 * context changed (its span, the keys) misses it and gets the full check's
 * verdict, and with the memo off nothing opens through it. open_compare
 * holds each verdict to kv_chunk_open's (which never uses the memo). */
static void test_memo(void **state) {
    (void)state;
    for (int enc = 0; enc < 2; enc++) {
        kv_memo_set(true);
        batch b;
        batch_make(&b, enc ? KV_CODEC_LOSSLESS : KV_CODEC_RAW, enc);
        uint64_t h0 = kv_memo_hits();
        open_compare(&b, NULL, NULL, 0, false, "memo: intact");
        assert_int_equal(kv_memo_hits() - h0, BT);
        /* a span moved: the content id differs, the object must be checked again */
        batch *m = malloc(sizeof *m);
        memcpy(m, &b, sizeof *m);
        m->span[5].token_start++;
        h0 = kv_memo_hits();
        open_compare(m, NULL, NULL, 0, false, "memo: span moved");
        assert_true(kv_memo_hits() - h0 < BT); /* object 5 missed (and the batch failed at it) */
        /* damage after the memo holds the objects: digests differ, full checks */
        static const size_t at[] = {20 * 8, 112 * 8, 150 * 8, 204 * 8, 4096 * 8 + 17 * 8, 4096 * 8 + 60 * 8};
        for (int i = 0; i < 6; i++)
            for (int ra = 0; ra < 2; ra++) {
                int o = 7;
                size_t off = at[i];
                char what[80];
                snprintf(what, sizeof what, "memo: object 7 bit %zu%s", off, ra ? ", reauth" : "");
                open_compare(&b, &o, &off, 1, ra, what);
            }
        /* other keys (another root key): no object is known */
        kv_keys saved = keys;
        keys.chunk_identity[0] ^= 1;
        h0 = kv_memo_hits();
        open_compare(&b, NULL, NULL, 0, false, "memo: other identity key");
        assert_int_equal(kv_memo_hits(), h0);
        keys = saved;
        /* off: nothing through the memo, same verdicts */
        kv_memo_set(false);
        h0 = kv_memo_hits();
        open_compare(&b, NULL, NULL, 0, false, "memo off: intact");
        open_compare(m, NULL, NULL, 0, false, "memo off: span moved");
        assert_int_equal(kv_memo_hits(), h0);
        free(m);
        batch_free(&b);
    }
    kv_memo_set(true);
}

/* ---- the lossless codec ------------------------------------------------ */

static void test_lossless(void **state) {
    (void)state;
    mu_err err;
    uint64_t s = 5;
    uint8_t in[3000], out[3000];
    for (int trial = 0; trial < 200; trial++) {
        size_t n = 1 + (size_t)(trial * 37 % 3000);
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            in[i] = (s >> 60) < 6 ? 7 : (uint8_t)(s >> 56); /* long runs and literals */
        }
        kv_buf b = {0};
        assert_int_equal(kv_frame_encode(KV_CODEC_LOSSLESS, in, n, &b, &err), 0);
        assert_true(b.n <= 16 + n + (n + 127) / 128);
        assert_int_equal(kv_frame_decode(KV_CODEC_LOSSLESS, b.p, b.n, n, out, &err), 0);
        assert_memory_equal(in, out, n);
        kv_buf_free(&b);
    }
    /* "aaaa" as a literal packet is an alternate packetization: refused */
    uint8_t alt[21] = {'K', 'V', 'R', 'L', 'E', '1', 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 3, 'a', 'a', 'a', 'a'};
    assert_int_not_equal(kv_frame_decode(KV_CODEC_LOSSLESS, alt, 21, 4, out, &err), 0);
    assert_string_equal(kv_category(&err), "reserved");
    uint8_t canon[18] = {'K', 'V', 'R', 'L', 'E', '1', 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 0x83, 'a'};
    assert_int_equal(kv_frame_decode(KV_CODEC_LOSSLESS, canon, 18, 4, out, &err), 0);
    assert_memory_equal(out, "aaaa", 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),         cmocka_unit_test(test_delta_chains),
        cmocka_unit_test(test_rejection_corpus), cmocka_unit_test(test_damage_plain),
        cmocka_unit_test(test_damage_encrypted), cmocka_unit_test(test_lossless),
        cmocka_unit_test(test_tail_window),      cmocka_unit_test(test_sha_jobs),
        cmocka_unit_test(test_encode_many),      cmocka_unit_test(test_open_many),
        cmocka_unit_test(test_memo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
