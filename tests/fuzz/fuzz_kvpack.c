/* fuzz_kvpack.c: every kvpack v1 decoder of src/kv (kvpack.h). The first
 * byte picks the decoder, the rest is its input:
 *   0 state declaration, 1 family (with semantic validation), 2 realized
 *   schema, 3 manifest (with validation), 4 raw frame, 5 lossless frame,
 *   6 pack envelope, 7 chunk object, 8 pack header without a key.
 * Keys are the reference fixture's (root 99x32, tenant 1x32, epoch 7), so
 * the corpus (tests/data/kvpack objects) reaches the deep checks. A chunk
 * is checked against a reference made from its own header, so mutations
 * get past the digest to the AEAD, codec and content-id checks, through
 * kv_chunk_decode, the in-place kv_chunk_open and the batched
 * kv_chunk_open_many (eight copies at once, hashed in AVX-512 lanes where
 * the CPU has them) alike (same verdict, same plaintext). Accepted
 * canonical objects must re-encode to the input; rejections must name a
 * verdict category. Nothing may crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/kv/kvpack.h"

static void check_reject(int rc, const mu_err *err) {
    if (rc && rc != MU_E_NOMEM && !kv_category(err)) abort();
}

static void same(kv_buf *b, const uint8_t *p, size_t n) {
    if (b->oom || b->n != n || memcmp(b->p, p, n)) abort();
    kv_buf_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned which = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    mu_err err = {0};
    kv_mem *mem = kv_mem_new();
    if (!mem) return 0;
    kv_buf b = {0};
    int rc = 0;
    uint8_t root[32], tenant[32];
    memset(root, 99, 32);
    memset(tenant, 1, 32);
    kv_keys keys;
    kv_key_schedule(root, tenant, 7, &keys, &err);
    switch (which % 9) {
    case 0: {
        kv_decl d;
        if (!(rc = kv_decode_decl(p, n, mem, &d, &err))) kv_encode_decl(&b, &d), same(&b, p, n);
        break;
    }
    case 1: {
        kv_family f;
        if (!(rc = kv_decode_family(p, n, true, mem, &f, &err))) kv_encode_family(&b, &f), same(&b, p, n);
        break;
    }
    case 2: {
        kv_schema s;
        if (!(rc = kv_decode_schema(p, n, mem, &s, &err))) kv_encode_schema(&b, &s), same(&b, p, n);
        break;
    }
    case 3: {
        kv_manifest m;
        if (!(rc = kv_decode_manifest(p, n, true, mem, &m, &err))) kv_encode_manifest(&b, &m), same(&b, p, n);
        break;
    }
    case 4:
    case 5: {
        unsigned codec = which % 9 == 4 ? KV_CODEC_RAW : KV_CODEC_LOSSLESS;
        size_t want = n >= 16 ? (size_t)p[12] | (size_t)p[13] << 8 | (size_t)p[14] << 16 : 0;
        if (want > 1 << 20) want = 1 << 20; /* keep the fuzzer's memory small */
        uint8_t *out = malloc(want ? want : 1);
        if (!out) break;
        if (!(rc = kv_frame_decode(codec, p, n, want, out, &err))) {
            kv_frame_encode(codec, out, want, &b, &err);
            same(&b, p, n);
        }
        free(out);
        break;
    }
    case 6: {
        kv_manifest m;
        rc = kv_pack_decode(p, n, &keys, mem, &m, &err);
        break;
    }
    case 7: {
        /* the family of the reference fixture, codec from the header */
        if (n < 4096) {
            rc = kv_fail(&err, KV_BOUNDS, "short");
            break;
        }
        static const kv_key key = {0, 11, (const uint8_t *)"attention.k"};
        kv_fstate st = {.key = key, .cache_kind = 1, .dtype = 1, .codec = p[20] == 2 ? 2 : 1, .codec_version = 1,
                        .layout = 1, .axis_rule = 1, .elements = 4, .rank = 2, .dims = {0, 4}};
        kv_family f = {.mode = 1, .page_tokens = 256, .n_states = 1, .states = &st};
        memset(f.abi, 2, 32);
        memset(f.topology, 3, 32);
        memset(f.shard_map, 4, 32);
        kv_ref ref = {.epoch = 7};
        memcpy(ref.chunk_id, p + 112, 32);
        memcpy(ref.object_key, p + 144, 32);
        kv_sha256(p, n, ref.digest);
        uint32_t plain = (uint32_t)p[24] | (uint32_t)p[25] << 8 | (uint32_t)p[26] << 16 | (uint32_t)p[27] << 24;
        if (plain > 1 << 20) plain = 1 << 20;
        ref.plain_bytes = plain;
        ref.object_bytes = (uint32_t)n;
        kv_span span = {0, plain / 4 ? plain / 4 : 1, 0, plain};
        uint8_t *out = malloc(plain ? plain : 1);
        if (!out) break;
        rc = kv_chunk_decode(p, n, &ref, &span, tenant, &f, &key, &keys, out, &err);
        /* the in-place decoder of restores: the same verdict and plaintext */
        uint8_t *cp = malloc(n ? n : 1), *out2 = malloc(plain ? plain : 1);
        if (cp && out2) {
            memcpy(cp, p, n);
            const uint8_t *pl = NULL;
            mu_err e2 = {0};
            int rc2 = kv_chunk_open(cp, n, &ref, &span, tenant, &f, &key, &keys, NULL, out2, &pl, &e2);
            if (!rc2 != !rc || (!rc && memcmp(pl, out, plain))) abort();
            check_reject(rc2, &e2);
            /* the batched decoder, 8 copies (enough for the AVX-512 lanes): the same message as kv_chunk_open */
            enum { NB = 8 };
            uint8_t *cb[NB], *ob[NB];
            kv_dec_item it[NB];
            bool ok = true;
            for (int i = 0; i < NB; i++) {
                cb[i] = malloc(n), ob[i] = malloc(plain ? plain : 1);
                ok = ok && cb[i] && ob[i];
                if (cb[i]) memcpy(cb[i], p, n);
                it[i] = (kv_dec_item){cb[i], n, &ref, &span, &key, ob[i], NULL};
            }
            /* without the family's id, then twice with it: the first pass that passes fills the memo of
             * verified objects, the second opens through it; every verdict the same */
            uint8_t fid[32];
            for (int pass = 0; ok && pass < 3; pass++) {
                if (pass == 1 && kv_family_id(&f, fid)) break;
                for (int i = 0; pass && i < NB; i++) memcpy(cb[i], p, n), it[i].plain = NULL;
                mu_err e3 = {0};
                int rc3 = kv_chunk_open_many(it, NB, tenant, &f, &keys, pass ? fid : NULL, &e3);
                if (!rc3 != !rc2 || (rc3 && strcmp(e3.msg, e2.msg))) abort();
                for (int i = 0; !rc3 && i < NB; i++)
                    if (memcmp(it[i].plain, out, plain)) abort();
            }
            for (int i = 0; i < NB; i++) free(cb[i]), free(ob[i]);
        }
        free(cp);
        free(out2);
        free(out);
        break;
    }
    case 8: {
        kv_pack_header h;
        rc = kv_pack_header_read(p, n, &h, &err);
        break;
    }
    }
    check_reject(rc, &err);
    kv_buf_free(&b);
    kv_mem_free(mem);
    return 0;
}
