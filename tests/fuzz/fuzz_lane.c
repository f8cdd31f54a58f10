/* fuzz_lane.c: every decoder of the prefill lane's wire format
 * (src/net/lanewire.h). The first byte picks the decoder, the rest is its
 * input: 0 frame header, 1 HELLO, 2 manifest header (accepted headers must
 * re-encode to the input), 3 BEGIN under the test key, 4 SEAL against the
 * manifest of its own header (digests all zero), 5 LAYER against the
 * fixed manifest of tests/unit/test_lane.c, 6 ABORT, 7 INFO, 8 ACK.
 * Rejections must name a reason word (lane_reason); nothing may crash,
 * leak or read out of bounds. Seeds: LANE_CORPUS_OUT=DIR build/tests/test_lane. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/net/lanewire.h"

static const uint8_t KEY[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

static void check(int rc, const mu_err *err) {
    if (rc && rc != MU_E_NOMEM && !lane_reason(err)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    mu_err err = {0};
    static lane_manifest m, fixed;
    int rc = 0;
    switch (data[0] % 9) {
    case 0: {
        unsigned t;
        uint32_t l;
        if (n >= LANE_HDR) rc = lane_frame_parse(p, &t, &l, &err);
        break;
    }
    case 1: {
        lane_hello h;
        if (!(rc = lane_hello_decode(p, n, &h, &err)) && h.ask == LANE_ASK_HANDOFF) {
            uint32_t *t = malloc(4 * (size_t)h.n_ship), *r = malloc(4 * (size_t)(h.n_runs + 1));
            if (t) lane_hello_tokens(&h, t);
            if (r) lane_hello_runs(&h, r);
            free(t);
            free(r);
        }
        break;
    }
    case 2:
        if (!(rc = lane_manifest_decode(p, n, &m, &err))) {
            uint8_t *q;
            size_t qn;
            if (!lane_manifest_encode(&m, &q, &qn, &err)) {
                if (qn != n || memcmp(q, p, n)) abort();
                free(q);
            }
        }
        break;
    case 3: rc = lane_begin_open(p, n, KEY, &m, &err); break;
    case 4: {
        /* the header part is 156 + 12 * n_layer + 4 bytes (n_layer at 152) */
        if (n < 156) break;
        size_t hn = 160 + 12 * (size_t)(p[152] | p[153] << 8 | p[154] << 16 | (uint32_t)p[155] << 24);
        if (hn <= n && !lane_manifest_decode(p, hn, &m, &err)) {
            uint8_t(*dg)[32] = calloc(m.n_chunks ? m.n_chunks : 1, 32);
            if (dg) rc = lane_seal_open(p, n, KEY, &m, (const uint8_t(*)[32])dg, &err);
            free(dg);
        }
        break;
    }
    case 5: {
        memset(&fixed, 0, sizeof fixed);
        fixed.n_ctx = 4096, fixed.step = 64, fixed.n_ship = 200, fixed.row_bytes = 128;
        strcpy(fixed.kclass, "cuda");
        bool swa[6] = {true, true, false, true, true, false};
        lane_layers_plan(&fixed, 6, swa, 100);
        fixed.n_chunks = lane_chunk_count(&fixed);
        const uint8_t *rows;
        for (uint32_t i = 0; i < 5; i++) check(lane_layer_check(p, n, &fixed, i, &rows, &err), &err);
        break;
    }
    case 6: {
        uint32_t code;
        char why[128];
        rc = lane_abort_decode(p, n, &code, why, sizeof why, &err);
        break;
    }
    case 7: {
        lane_info i;
        rc = lane_info_decode(p, n, &i, &err);
        break;
    }
    case 8: {
        uint8_t rid[16];
        bool ok;
        rc = lane_ack_decode(p, n, rid, &ok, &err);
        break;
    }
    }
    check(rc, &err);
    return 0;
}
