/* kvbench.c: the costs of KV reuse on one model (docs/benchmarks.md "KV
 * packs and the prefix cache"): prefill n tokens once, then
 *   - pack writes (raw and lossless codec, plain and encrypted): seconds,
 *     bytes on disk per token, GB/s of KV rows written;
 *   - pack restore into a fresh session, files in the page cache, to ready
 *     for the next token (state committed): median of 5;
 *   - the resident prefix cache: capture the session, restore the prefix.
 * One JSON object on stdout.
 *   kvbench -m MODEL [-n 2048] [--ctx N] [--threads N] [--kv-threads N] [--fill] [--only-raw] [--reps N] -o SCRATCH_DIR
 * --fill writes random finite rows instead of prefilling (the costs of raw
 * packs do not depend on the values; the lossless codec's do), so a shape
 * of many layers costs no forward pass; --only-raw skips the lossless codec.
 * --reps N: writes and restores per variant (default 3 and 5); medians and
 * minimums are reported, and the rows' copy out of and into a session alone.
 * Each timed write makes a new pack (the previous one is removed first,
 * untimed). MUSER_KV_SHA=ref hashes through OpenSSL one chunk at a time
 * instead of the AVX-512 lanes (kvsha.c).
 * Restores are timed twice: first restores (mu_kv_pack_forget_verified
 * before each: every chunk object checked in full, as in a fresh process;
 * restore_*), then restores of a pack this process verified before
 * (restore_warm_*: the memo skips the checks the objects' bytes decide),
 * and first restores into a new session each (restore_new_session_cpu_ms:
 * the session's KV pages fault in, as in a fresh process).
 * --loop write|restore|restore-warm N: only that phase, N times (raw
 * plain; the writes include the previous pack's removal), for a profiler;
 * one line of JSON.
 * --kv-threads sets MUSER_KV_THREADS: the threads a pack write or restore
 * spreads its layers over (default: the engine's). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../include/muser.h"
#include "../include/muser_kv.h"

#define MAX_REPS 50

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* the process's CPU seconds (every thread's: pack writes and restores
 * spread layers over --kv-threads threads): on a shared machine, the cost
 * without the waiting for a core */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(path);
}
/* the previous pack removed before a timed write: the write of a new pack,
 * not the replacement of a generation (which also frees the old one's pages) */
static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, const mu_err *err) {
    fprintf(stderr, "kvbench: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

int main(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    int n = 2048, ctx = 0, threads = 0, loop_n = 0;
    const char *loop_what = NULL;
    bool fill = false, only_raw = false;
    int wreps = 3, rreps = 5; /* medians reported, and the minimums (the cost without another process's load) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--kv-threads") && i + 1 < argc) setenv("MUSER_KV_THREADS", argv[++i], 1);
        else if (!strcmp(argv[i], "--fill")) fill = true;
        else if (!strcmp(argv[i], "--only-raw")) only_raw = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) wreps = rreps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--loop") && i + 2 < argc) loop_what = argv[++i], loop_n = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: kvbench -m MODEL [-n 2048] [--ctx N] [--threads N] [--kv-threads N] [--fill] [--only-raw] [--reps N] [--loop write|restore|restore-warm N] -o SCRATCH_DIR\n");
            return 1;
        }
    }
    if (wreps < 1 || wreps > MAX_REPS) return fprintf(stderr, "kvbench: --reps must be 1..%d\n", MAX_REPS), 1;
    if (!model || !out || n < 1) return fprintf(stderr, "kvbench: -m and -o are needed\n"), 1;
    mu_err err = {0};
    mu_model *m;
    mu_engine *e;
    if (mu_model_open(model, &m, &err)) die("model", &err);
    mu_engine_opts eo = {.n_threads = threads};
    if (mu_engine_new(m, &eo, &e, &err)) die("engine", &err);
    if (!ctx) ctx = mu_kv_default_ctx(m);
    if (n >= ctx) n = ctx - 1;
    const mu_model_info *I = mu_model_get_info(m);
    if (loop_what && strcmp(loop_what, "write") && strcmp(loop_what, "restore") && strcmp(loop_what, "restore-warm"))
        return fprintf(stderr, "kvbench: --loop write|restore|restore-warm N\n"), 1;
    mu_kv_ident *id;
    if (mu_kv_ident_new(e, model, &id, &err)) die("identity", &err);
    uint8_t key[32];
    for (int i = 0; i < 32; i++) key[i] = (uint8_t)(i * 13 + 5);
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    uint64_t r = 88172645463325252ULL;
    for (int i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[i] = (int32_t)(r % (uint64_t)(I->n_vocab - 300)) + 10;
    }
    mu_session *s, *t;
    if (mu_session_new(e, ctx, &s, &err) || mu_session_new(e, ctx, &t, &err)) die("session", &err);
    double t0 = now_s();
    if (fill) { /* rows written directly: finite F16 values from a xorshift stream, no forward pass */
        size_t w = (size_t)I->n_head_kv * (size_t)I->head_dim;
        uint16_t *k = malloc((size_t)n * w * 2), *v = malloc((size_t)n * w * 2);
        if (!k || !v) die("fill", NULL);
        for (size_t i = 0; i < (size_t)n * w; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            k[i] = (uint16_t)(r & 0xBBFF); /* exponent below 0x1F: finite */
            v[i] = (uint16_t)((r >> 20) & 0xBBFF);
        }
        for (int il = 0; il < I->n_layer; il++) {
            int lo = I->swa_layers[il] && n > I->n_swa ? n - I->n_swa : 0;
            if (mu_session_kv_write(s, il, lo, n - lo, k + (size_t)lo * w, v + (size_t)lo * w, &err)) die("fill", &err);
        }
        if (mu_session_kv_commit(s, n, &err)) die("fill", &err);
        free(k);
        free(v);
    } else {
        for (int p = 0; p < n; p += 512) {
            mu_batch_item it = {.s = s, .tokens = tok + p, .n_tokens = n - p < 512 ? n - p : 512};
            if (mu_forward(e, &it, 1, &err)) die("prefill", &err);
        }
    }
    double prefill_s = now_s() - t0;
    if (loop_what) { /* one phase only, N times, raw plain packs: for a profiler (perf record) */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/kvbench-loop", out);
        mu_kv_save_opts so = {.codec = MU_KV_CODEC_RAW, .plain = true};
        bool wr = !strcmp(loop_what, "write"); /* restore: a first restore each time; restore-warm: again */
        if (!wr && mu_kv_pack_save(s, id, tok, n, key, &so, dir, &err)) die("save", &err);
        double a = cpu_s();
        for (int k = 0; k < loop_n; k++) {
            int got = 0;
            if (wr) rm_rf(dir);
            else mu_session_reset(t);
            if (!strcmp(loop_what, "restore")) mu_kv_pack_forget_verified();
            if (wr ? mu_kv_pack_save(s, id, tok, n, key, &so, dir, &err)
                   : mu_kv_pack_restore(t, id, dir, key, &got, &err) || got != n)
                die(loop_what, &err);
        }
        printf("{\"loop\":\"%s\",\"n\":%d,\"cpu_ms_each\":%.2f}\n", loop_what, loop_n, (cpu_s() - a) * 1e3 / loop_n);
        return 0;
    }
    /* the KV rows a pack of n positions holds: full layers n, sliding min(n, window) */
    uint64_t rows = 0;
    for (int il = 0; il < I->n_layer; il++) rows += I->swa_layers[il] && n > I->n_swa ? (uint64_t)I->n_swa : (uint64_t)n;
    uint64_t kv_bytes = rows * 2 * (uint64_t)I->n_head_kv * (uint64_t)I->head_dim * 2;
    printf("{\"model\":\"%s\",\"sha\":\"%s\",\"kv_threads\":\"%s\",\"n_layer\":%d,\"tokens\":%d,\"ctx\":%d,\"kernels\":\"%s\",\"prefill_s\":%.3f,"
           "\"kv_bytes\":%llu,\"packs\":[",
           model, getenv("MUSER_KV_SHA") ? getenv("MUSER_KV_SHA") : "default", getenv("MUSER_KV_THREADS") ? getenv("MUSER_KV_THREADS") : "engine", I->n_layer, n, ctx, mu_engine_kern_name(e), prefill_s, (unsigned long long)kv_bytes);
    static const struct {
        int codec;
        bool plain;
        const char *name;
    } var[] = {{MU_KV_CODEC_RAW, true, "raw-plain"},
               {MU_KV_CODEC_RAW, false, "raw-encrypted"},
               {MU_KV_CODEC_LOSSLESS, true, "lossless-plain"},
               {MU_KV_CODEC_LOSSLESS, false, "lossless-encrypted"}};
    char dir_raw[4096] = "";
    for (size_t v = 0; v < (only_raw ? 2 : sizeof var / sizeof var[0]); v++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/kvbench-%s", out, var[v].name);
        if (v == 0) snprintf(dir_raw, sizeof dir_raw, "%s", dir);
        mu_kv_save_opts so = {.codec = var[v].codec, .plain = var[v].plain};
        double ws[MAX_REPS], wc[MAX_REPS];
        for (int k = 0; k < wreps; k++) {
            rm_rf(dir);
            double a = now_s(), ac = cpu_s();
            if (mu_kv_pack_save(s, id, tok, n, key, &so, dir, &err)) die("save", &err);
            ws[k] = now_s() - a;
            wc[k] = cpu_s() - ac;
        }
        qsort(ws, (size_t)wreps, sizeof ws[0], cmp_d);
        qsort(wc, (size_t)wreps, sizeof wc[0], cmp_d);
        uint64_t bytes = 0;
        mu_kv_pack_bytes(dir, &bytes, &err);
        /* first restores (every object checked in full, as in a fresh process), then restores of a pack
         * this process verified before (its memo: the checks the objects' bytes decide are skipped) */
        double rs[MAX_REPS], rc5[MAX_REPS], ws2[MAX_REPS], wc2[MAX_REPS];
        for (int warm = 0; warm < 2; warm++)
            for (int k = 0; k < rreps; k++) {
                mu_session_reset(t);
                if (!warm) mu_kv_pack_forget_verified();
                double a = now_s(), ac = cpu_s();
                int got = 0;
                if (mu_kv_pack_restore(t, id, dir, key, &got, &err) || got != n) die("restore", &err);
                (warm ? ws2 : rs)[k] = now_s() - a;
                (warm ? wc2 : rc5)[k] = cpu_s() - ac;
            }
        /* a first restore into a new session, as a fresh process makes it: its KV pages fault in */
        double fc[MAX_REPS];
        for (int k = 0; k < rreps; k++) {
            mu_session *f;
            mu_kv_pack_forget_verified();
            double ac = cpu_s();
            int got = 0;
            if (mu_session_new(e, ctx, &f, &err) || mu_kv_pack_restore(f, id, dir, key, &got, &err) || got != n)
                die("restore", &err);
            fc[k] = cpu_s() - ac;
            mu_session_free(f);
        }
        qsort(fc, (size_t)rreps, sizeof fc[0], cmp_d);
        qsort(rs, (size_t)rreps, sizeof rs[0], cmp_d);
        qsort(rc5, (size_t)rreps, sizeof rc5[0], cmp_d);
        qsort(ws2, (size_t)rreps, sizeof ws2[0], cmp_d);
        qsort(wc2, (size_t)rreps, sizeof wc2[0], cmp_d);
        printf("%s{\"variant\":\"%s\",\"write_s\":%.4f,\"write_gb_s\":%.3f,\"file_bytes\":%llu,"
               "\"bytes_per_token\":%.1f,\"restore_ms\":%.2f,\"write_cpu_s\":%.4f,\"write_cpu_gb_s\":%.3f,"
               "\"restore_cpu_ms\":%.2f,\"write_min_s\":%.4f,\"write_cpu_min_s\":%.4f,\"write_cpu_max_gb_s\":%.3f,"
               "\"restore_min_ms\":%.2f,\"restore_cpu_min_ms\":%.2f,\"restore_warm_ms\":%.2f,"
               "\"restore_warm_cpu_ms\":%.2f,\"restore_warm_cpu_min_ms\":%.2f,\"restore_new_session_cpu_ms\":%.2f}",
               v ? "," : "", var[v].name, ws[wreps / 2], kv_bytes / ws[wreps / 2] / 1e9, (unsigned long long)bytes,
               (double)bytes / n, rs[rreps / 2] * 1e3, wc[wreps / 2], kv_bytes / wc[wreps / 2] / 1e9,
               rc5[rreps / 2] * 1e3, ws[0], wc[0], kv_bytes / wc[0] / 1e9, rs[0] * 1e3, rc5[0] * 1e3,
               ws2[rreps / 2] * 1e3, wc2[rreps / 2] * 1e3, wc2[0] * 1e3, fc[rreps / 2] * 1e3);
    }
    /* a delta pack (mu_kv_save_opts.chain): the last 256 positions over a chainable pack of the rest, as a
     * server session's turn writes it; its own bytes are the directory's less its parent's */
    if (n > 256) {
        char base[4096], child[4096];
        snprintf(base, sizeof base, "%s/kvbench-chain", out);
        snprintf(child, sizeof child, "%s/kvbench-chain-delta", out);
        mu_kv_save_opts whole = {.chain = true, .plain = true}, dl = {.chain = true, .plain = true, .parent = base};
        int got = 0;
        mu_session_reset(t);
        if (mu_kv_pack_restore(t, id, dir_raw, key, &got, &err) || mu_session_truncate(t, n - 256, &err) ||
            mu_kv_pack_save(t, id, tok, n - 256, key, &whole, base, &err))
            die("chain base", &err);
        double dw[MAX_REPS], dr[MAX_REPS];
        for (int k = 0; k < wreps; k++) {
            rm_rf(child);
            double a = cpu_s();
            if (mu_kv_pack_save(s, id, tok, n, key, &dl, child, &err)) die("delta", &err);
            dw[k] = cpu_s() - a;
        }
        for (int k = 0; k < rreps; k++) {
            mu_session_reset(t);
            mu_kv_pack_forget_verified();
            double a = cpu_s();
            if (mu_kv_pack_restore(t, id, child, key, &got, &err) || got != n) die("chain restore", &err);
            dr[k] = cpu_s() - a;
        }
        qsort(dw, (size_t)wreps, sizeof dw[0], cmp_d);
        qsort(dr, (size_t)rreps, sizeof dr[0], cmp_d);
        uint64_t bb = 0, cb = 0;
        mu_kv_pack_bytes(base, &bb, &err);
        mu_kv_pack_bytes(child, &cb, &err);
        printf(",{\"variant\":\"raw-plain-delta-256\",\"delta_bytes\":%llu,\"delta_bytes_per_token\":%.1f,"
               "\"write_cpu_min_ms\":%.2f,\"chain_restore_cpu_min_ms\":%.2f}",
               (unsigned long long)(cb - bb), (double)(cb - bb) / 256, dw[0] * 1e3, dr[0] * 1e3);
    }
    /* the rows alone: every layer's pack rows out of and into a session (the copy a pack cannot avoid) */
    {
        size_t w = (size_t)I->n_head_kv * (size_t)I->head_dim;
        uint16_t *k = malloc((size_t)n * w * 2), *v = malloc((size_t)n * w * 2);
        double rd[MAX_REPS], wr[MAX_REPS];
        for (int q = 0; q < rreps; q++) {
            double a = cpu_s();
            for (int il = 0; il < I->n_layer; il++) {
                int lo = I->swa_layers[il] && n > I->n_swa ? n - I->n_swa : 0;
                if (mu_session_kv_read(s, il, lo, n - lo, k, v, &err)) die("rows", &err);
            }
            rd[q] = cpu_s() - a;
            a = cpu_s();
            for (int il = 0; il < I->n_layer; il++) {
                int lo = I->swa_layers[il] && n > I->n_swa ? n - I->n_swa : 0;
                if (mu_session_kv_write(t, il, lo, n - lo, k, v, &err)) die("rows", &err);
            }
            wr[q] = cpu_s() - a;
        }
        qsort(rd, (size_t)rreps, sizeof rd[0], cmp_d);
        qsort(wr, (size_t)rreps, sizeof wr[0], cmp_d);
        printf("],\"rows_read_cpu_min_ms\":%.2f,\"rows_write_cpu_min_ms\":%.2f", rd[0] * 1e3, wr[0] * 1e3);
        free(k);
        free(v);
        mu_session_reset(t);
    }
    /* the resident prefix cache at 512-token blocks */
    mu_kv_cache_opts co = {.block = 512};
    mu_kv_cache *c;
    mu_kv_lineage *ls, *lt;
    if (mu_kv_cache_new(e, &co, &c, &err) || mu_kv_lineage_new(c, ctx, &ls, &err) ||
        mu_kv_lineage_new(c, ctx, &lt, &err))
        die("cache", &err);
    double a = now_s();
    mu_kv_cache_capture(c, s, ls, tok, n);
    double cap_s = now_s() - a;
    double cs[5], cc[5];
    int got = 0, src = 0;
    for (int k = 0; k < 5; k++) {
        mu_session_reset(t);
        mu_kv_lineage_cut(lt, 0);
        a = now_s();
        double ac = cpu_s();
        got = mu_kv_cache_restore(c, t, lt, tok, n, 0, &src);
        cs[k] = now_s() - a;
        cc[k] = cpu_s() - ac;
    }
    qsort(cs, 5, sizeof cs[0], cmp_d);
    qsort(cc, 5, sizeof cc[0], cmp_d);
    mu_kv_cache_stats st;
    mu_kv_cache_get_stats(c, &st);
    printf(",\"prefix_cache\":{\"block\":512,\"captured_tokens\":%llu,\"bytes\":%llu,\"capture_ms\":%.2f,"
           "\"restored_tokens\":%d,\"restore_ms\":%.2f,\"restore_cpu_ms\":%.2f}}\n",
           (unsigned long long)(st.n_nodes * 512), (unsigned long long)st.bytes, cap_s * 1e3, got, cs[2] * 1e3,
           cc[2] * 1e3);
    mu_kv_lineage_free(ls);
    mu_kv_lineage_free(lt);
    mu_kv_cache_free(c);
    mu_session_free(s);
    mu_session_free(t);
    mu_kv_ident_free(id);
    mu_engine_free(e);
    mu_model_close(m);
    free(tok);
    return 0;
}
