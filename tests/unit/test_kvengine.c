/* test_kvengine.c: KV packs of real sessions (include/muser_kv.h) on a
 * small generated model: continuing from a restored pack is bit-identical to
 * continuing the live session it was saved from (same process); the codec
 * and encryption variants; a pack of another model, another ring size or
 * with a damaged chunk is refused and leaves the session empty; a second
 * save replaces the first atomically; the root key file rules. Restores
 * go through the memo of verified objects and around it (cold). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser.h"
#include "../../include/muser_kv.h"
#include "../../src/engine/engine.h"
#include "../../src/kv/kvpack.h"
#include "../../src/kv/kvstore.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_kvengine_XXXXXX";
static mu_model *M, *M2;
static mu_engine *E, *E2;
static mu_kv_ident *ID, *ID2;
static int V;
static uint8_t KEY[32];

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    mini_cfg c = mini_default();
    c.n_ctx = 1024;
    if (mini_open(dir, &c, 2, &M, &E)) return -1;
    c.seed = 8; /* other weights, same geometry */
    if (mini_open(dir, &c, 2, &M2, &E2)) return -1;
    mu_err err;
    if (mu_kv_ident_new(E, NULL, &ID, &err) || mu_kv_ident_new(E2, NULL, &ID2, &err)) return -1;
    V = mu_model_get_info(M)->n_vocab;
    for (int i = 0; i < 32; i++) KEY[i] = (uint8_t)(i * 7 + 1);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mu_kv_ident_free(ID);
    mu_kv_ident_free(ID2);
    mu_engine_free(E);
    mu_engine_free(E2);
    mu_model_close(M);
    mu_model_close(M2);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return -1;
    return 0;
}

static void ids(int32_t *p, int n, int seed) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)((i * 37 + seed * 11 + 3) % 70);
}

static void feed(mu_session *s, const int32_t *t, int n) {
    mu_err err = {0};
    mu_batch_item it = {.s = s, .tokens = t, .n_tokens = n};
    if (mu_forward(E, &it, 1, &err)) fail_msg("forward: %s", err.msg);
}

/* prefix of n tokens, saved with o; restored into a fresh session; both
 * continue with 3 more tokens one chunk, then 2 decode steps: bitwise equal */
static void round_trip(int n, const mu_kv_save_opts *o) {
    mu_err err = {0};
    char pack[512];
    snprintf(pack, sizeof pack, "%s/pack-%d", dir, n);
    int32_t t[600];
    ids(t, n + 5, n);
    mu_session *a, *b;
    assert_int_equal(mu_session_new(E, 1024, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 1024, &b, &err), 0);
    feed(a, t, n);
    if (mu_kv_pack_save(a, ID, t, n, KEY, o, pack, &err)) fail_msg("save: %s", err.msg);
    if (mu_kv_pack_verify(pack, KEY, ID, 1024, &err)) fail_msg("verify: %s", err.msg);
    int got = 0;
    /* every other pack restored cold (every object checked in full), the rest through the memo of
     * objects this process wrote and verified */
    static int calls;
    const bool cold = calls++ % 2;
    if (cold) mu_kv_pack_forget_verified();
    uint64_t h0 = kv_memo_hits();
    if (mu_kv_pack_restore(b, ID, pack, KEY, &got, &err)) fail_msg("restore: %s", err.msg);
    if (cold) assert_true(kv_memo_hits() == h0);
    else assert_true(kv_memo_hits() > h0);
    assert_int_equal(got, n);
    assert_int_equal(mu_session_n_past(b), n);
    feed(a, t + n, 3);
    feed(b, t + n, 3);
    assert_memory_equal(mu_session_logits(a, -1), mu_session_logits(b, -1), (size_t)V * sizeof(float));
    for (int k = 0; k < 2; k++) {
        feed(a, t + n + 3 + k, 1);
        feed(b, t + n + 3 + k, 1);
        assert_memory_equal(mu_session_logits(a, -1), mu_session_logits(b, -1), (size_t)V * sizeof(float));
    }
    mu_session_free(a);
    mu_session_free(b);
}

static void test_round_trip(void **state) {
    (void)state;
    mu_kv_save_opts raw = {0}, lossless = {.codec = MU_KV_CODEC_LOSSLESS}, plain = {.plain = true};
    round_trip(1, &raw);
    round_trip(4, &lossless);          /* shorter than the window (5) */
    round_trip(40, &plain);            /* past the window */
    round_trip(300, &raw);             /* more than one chunk per state */
    round_trip(512, &lossless);        /* a whole ubatch */
}

/* A pack restores only into its own identity; refusals leave nothing. */
static void test_refusals(void **state) {
    (void)state;
    mu_err err = {0};
    char pack[512];
    snprintf(pack, sizeof pack, "%s/refuse", dir);
    int32_t t[64];
    ids(t, 64, 3);
    mu_session *a, *b, *c, *small;
    assert_int_equal(mu_session_new(E, 1024, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 1024, &b, &err), 0);
    assert_int_equal(mu_session_new(E2, 1024, &c, &err), 0);
    assert_int_equal(mu_session_new(E, 64, &small, &err), 0); /* a smaller ring: another cell layout */
    feed(a, t, 30);
    assert_int_equal(mu_kv_pack_save(a, ID, t, 30, KEY, NULL, pack, &err), 0);
    /* another model */
    assert_int_not_equal(mu_kv_pack_restore(c, ID2, pack, KEY, NULL, &err), 0);
    assert_string_equal(mu_kv_verdict(&err), "identity");
    assert_int_equal(mu_session_n_past(c), 0);
    /* another ring */
    assert_int_not_equal(mu_kv_pack_restore(small, ID, pack, KEY, NULL, &err), 0);
    assert_string_equal(mu_kv_verdict(&err), "identity");
    /* another key */
    uint8_t other[32];
    memcpy(other, KEY, 32);
    other[0] ^= 1;
    assert_int_not_equal(mu_kv_pack_restore(b, ID, pack, other, NULL, &err), 0);
    assert_string_equal(mu_kv_verdict(&err), "authentication");
    /* a damaged chunk: found mid-restore, the session is reset */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "f=$(ls %s/*.kvchk | tail -1); printf '\\x01' | dd of=$f bs=1 seek=4100 conv=notrunc 2>/dev/null", pack);
    assert_int_equal(system(cmd), 0);
    assert_int_not_equal(mu_kv_pack_verify(pack, KEY, NULL, 0, &err), 0);
    assert_string_equal(mu_kv_verdict(&err), "authentication");
    assert_int_not_equal(mu_kv_pack_restore(b, ID, pack, KEY, NULL, &err), 0);
    assert_int_equal(mu_session_n_past(b), 0);
    /* a session that holds positions is not a restore target */
    assert_int_equal(mu_kv_pack_save(a, ID, t, 30, KEY, NULL, pack, &err), 0); /* replaces the damaged pack */
    assert_int_equal(mu_kv_pack_verify(pack, KEY, ID, 1024, &err), 0);
    assert_int_equal(mu_kv_pack_restore(a, ID, pack, KEY, NULL, &err), MU_E_STATE);
    /* the replaced pack holds only its own chunk files */
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq $((4 * 2 + 1))", pack);
    assert_int_equal(system(cmd), 0);
    mu_session_free(a);
    mu_session_free(b);
    mu_session_free(c);
    mu_session_free(small);
}

static void root_of(const char *pack, char out[65]) {
    mu_err err;
    char *js = NULL;
    if (mu_kv_pack_inspect(pack, KEY, &js, &err)) fail_msg("inspect: %s", err.msg);
    const char *r = strstr(js, "\"token_root\": \"");
    assert_non_null(r);
    memcpy(out, r + 15, 64);
    out[64] = 0;
    free(js);
}

/* A writer killed (SIGKILL) after a random count of its writes, fsyncs,
 * renames and unlinks, 1000 times: the pack under the name is always the
 * previous generation or the new one, whole, and verifies. */
static void test_kill_writer(void **state) {
    (void)state;
    mu_err err = {0};
    /* on tmpfs when there is one: the fsyncs of 1000 publications on a disk
     * take a minute; the kill points are the same */
    char base[] = "/dev/shm/mutest_kill_XXXXXX", pack[512];
    bool shm = mkdtemp(base) != NULL;
    snprintf(pack, sizeof pack, "%s/killed", shm ? base : dir);
    int32_t ta[30], tb[30];
    ids(ta, 30, 1);
    ids(tb, 30, 2);
    mu_session *a;
    assert_int_equal(mu_session_new(E, 1024, &a, &err), 0);
    feed(a, ta, 30); /* the rows do not depend on the ids saved with them: two cuts, two generations */
    char ra[65], rb[65], cur[65], now[65];
    assert_int_equal(mu_kv_pack_save(a, ID, tb, 30, KEY, NULL, pack, &err), 0);
    root_of(pack, rb);
    assert_int_equal(mu_kv_pack_save(a, ID, ta, 30, KEY, NULL, pack, &err), 0);
    root_of(pack, ra);
    strcpy(cur, ra);
    uint64_t rng = 12345;
    int kills = 0, completes = 0;
    for (int trial = 0; trial < 1000; trial++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        long at = 1 + (long)((rng >> 33) % 26); /* a publication here takes 22 steps */
        bool to_b = !strcmp(cur, ra);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            kv_test_kill_at(at);
            mu_err e2;
            int rc = mu_kv_pack_save(a, ID, to_b ? tb : ta, 30, KEY, NULL, pack, &e2);
            _exit(rc ? 2 : 0);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (WIFSIGNALED(st)) {
            assert_int_equal(WTERMSIG(st), SIGKILL);
            kills++;
        } else {
            assert_int_equal(WEXITSTATUS(st), 0);
            completes++;
        }
        if (mu_kv_pack_verify(pack, KEY, ID, 1024, &err)) fail_msg("trial %d (kill at %ld): %s", trial, at, err.msg);
        root_of(pack, now);
        if (strcmp(now, ra) && strcmp(now, rb)) fail_msg("trial %d: neither generation", trial);
        if (!WIFSIGNALED(st) && strcmp(now, to_b ? rb : ra)) fail_msg("trial %d: a finished save is not visible", trial);
        strcpy(cur, now);
    }
    assert_true(kills > 800);
    assert_true(completes > 20);
    mu_session_free(a);
    if (shm) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf %s", base);
        assert_int_equal(system(cmd), 0);
    }
}

/* A delta save (a chain's next generation, written over its parent in the
 * same directory) killed at random points: the directory always verifies
 * as the parent or the finished delta, never a part. */
static void test_kill_delta(void **state) {
    (void)state;
    mu_err err = {0};
    char base[] = "/dev/shm/mutest_killd_XXXXXX", pack[512];
    bool shm = mkdtemp(base) != NULL;
    snprintf(pack, sizeof pack, "%s/chain", shm ? base : dir);
    int32_t t[40];
    ids(t, 40, 3);
    mu_session *a20, *a30;
    assert_int_equal(mu_session_new(E, 1024, &a20, &err), 0);
    assert_int_equal(mu_session_new(E, 1024, &a30, &err), 0);
    feed(a20, t, 20);
    feed(a30, t, 30);
    mu_kv_save_opts whole = {.chain = true}, delta = {.chain = true, .parent = pack};
    uint64_t rng = 777;
    int kills = 0, completes = 0;
    for (int trial = 0; trial < 200; trial++) {
        if (mu_kv_pack_save(a20, ID, t, 20, KEY, &whole, pack, &err)) fail_msg("base: %s", err.msg);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        long at = 1 + (long)((rng >> 33) % 60);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            kv_test_kill_at(at);
            mu_err e2;
            int rc = mu_kv_pack_save(a30, ID, t, 30, KEY, &delta, pack, &e2);
            _exit(rc ? 2 : 0);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (WIFSIGNALED(st)) kills++;
        else {
            assert_int_equal(WEXITSTATUS(st), 0);
            completes++;
        }
        mu_session *r;
        assert_int_equal(mu_session_new(E, 1024, &r, &err), 0);
        int got = 0;
        if (mu_kv_pack_restore(r, ID, pack, KEY, &got, &err)) fail_msg("trial %d (kill at %ld): %s", trial, at, err.msg);
        if (got != 20 && got != 30) fail_msg("trial %d: %d positions", trial, got);
        if (!WIFSIGNALED(st) && got != 30) fail_msg("trial %d: a finished delta is not visible", trial);
        char p1[600];
        snprintf(p1, sizeof p1, "%s/parent-1.kvpk", pack);
        if ((got == 30) != !access(p1, F_OK)) fail_msg("trial %d: %d positions, parent-1.kvpk %s", trial, got,
                                                       access(p1, F_OK) ? "absent" : "present");
        mu_session_free(r);
    }
    assert_true(kills > 50);
    assert_true(completes > 10);
    mu_session_free(a20);
    mu_session_free(a30);
    if (shm) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf %s", base);
        assert_int_equal(system(cmd), 0);
    }
}

/* A disk that fills mid-write (a file size limit here) is a clean error:
 * the previous generation stays, no partial directory is left. */
static void test_full_disk(void **state) {
    (void)state;
    mu_err err = {0};
    char pack[512], cmd[700];
    snprintf(pack, sizeof pack, "%s/full", dir);
    int32_t t[40];
    ids(t, 40, 4);
    mu_session *a;
    assert_int_equal(mu_session_new(E, 1024, &a, &err), 0);
    feed(a, t, 40);
    assert_int_equal(mu_kv_pack_save(a, ID, t, 40, KEY, NULL, pack, &err), 0);
    char before[65], after[65];
    root_of(pack, before);
    t[0] ^= 1; /* another cut */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {6000, 6000}; /* the first chunk file (8 KiB) cannot be written whole */
        setrlimit(RLIMIT_FSIZE, &rl);
        mu_err e2 = {0};
        int rc = mu_kv_pack_save(a, ID, t, 40, KEY, NULL, pack, &e2);
        _exit(rc == MU_E_IO && strstr(e2.msg, "kvpack: write ") ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(mu_kv_pack_verify(pack, KEY, ID, 1024, &err), 0);
    root_of(pack, after);
    assert_string_equal(before, after);
    snprintf(cmd, sizeof cmd, "! ls -a %s | grep -q '^\\.full\\.partial-'", dir);
    assert_int_equal(system(cmd), 0);
    mu_session_free(a);
}


/* rows into and out of a session (V kept transposed: whole 16x16 tiles
 * through AVX2 where the CPU has it) against the scalar reference, one
 * position at a time (mu_session_row_put), at an offset that leaves
 * partial tiles at both ends */
static void test_rows(void **state) {
    (void)state;
    mu_err err = {0};
    const mu_model_info *I = mu_model_get_info(M);
    const size_t w = (size_t)I->n_head_kv * (size_t)I->head_dim;
    const int p0 = 5, n = 203;
    uint16_t *k = malloc((size_t)n * w * 2), *v = malloc((size_t)n * w * 2), *k2 = malloc((size_t)n * w * 2),
             *v2 = malloc((size_t)n * w * 2);
    for (size_t i = 0; i < (size_t)n * w; i++) k[i] = (uint16_t)(i * 2654435761u >> 7), v[i] = (uint16_t)(i * 40503u + 7);
    mu_session *a, *b;
    assert_int_equal(mu_session_new(E, 1024, &a, &err), 0);
    assert_int_equal(mu_session_new(E, 1024, &b, &err), 0);
    int tested = 0;
    for (int il = 0; il < I->n_layer; il++) {
        if (mu_session_kv_write(a, il, p0, n, k, v, &err)) continue; /* a ring smaller than n */
        for (int p = 0; p < n; p++) mu_session_row_put(b, il, p0 + p, k + (size_t)p * w, v + (size_t)p * w);
        tested++;
    }
    assert_true(tested > 0);
    assert_int_equal(mu_session_kv_commit(a, p0 + n, &err), 0);
    assert_int_equal(mu_session_kv_commit(b, p0 + n, &err), 0);
    for (int il = 0; il < I->n_layer; il++) {
        if (mu_session_kv_read(b, il, p0, n, k2, v2, &err)) continue;
        assert_memory_equal(k2, k, (size_t)n * w * 2); /* reading: against rows put one by one */
        assert_memory_equal(v2, v, (size_t)n * w * 2);
        assert_int_equal(mu_session_kv_read(a, il, p0, n, k2, v2, &err), 0);
        assert_memory_equal(k2, k, (size_t)n * w * 2); /* writing: the same cells as one by one */
        assert_memory_equal(v2, v, (size_t)n * w * 2);
    }
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) { /* the tile itself, with strides */
        uint16_t src[16 * 40], dst[16 * 24];
        for (int i = 0; i < 16 * 40; i++) src[i] = (uint16_t)(i * 31 + 1);
        mu_rows_tr16_avx2(src + 3, 40, dst + 1, 24);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) assert_int_equal(dst[1 + c * 24 + r], src[3 + r * 40 + c]);
    }
#endif
    mu_session_free(a);
    mu_session_free(b);
    free(k), free(v), free(k2), free(v2);
}

static void test_root_key(void **state) {
    (void)state;
    mu_err err;
    char home[512], path[600];
    snprintf(home, sizeof home, "%s/home", dir);
    setenv("MUSER_HOME", home, 1);
    uint8_t k1[32], k2[32];
    assert_int_equal(mu_kv_root_key(NULL, k1, &err), 0);
    assert_int_equal(mu_kv_root_key(NULL, k2, &err), 0);
    assert_memory_equal(k1, k2, 32);
    snprintf(path, sizeof path, "%s/kvpack.key", home);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 32);
    chmod(path, 0644);
    assert_int_equal(mu_kv_root_key(NULL, k2, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "readable by others"));
    snprintf(path, sizeof path, "%s/short.key", dir);
    FILE *f = fopen(path, "w");
    fputs("short", f);
    fclose(f);
    chmod(path, 0600);
    assert_int_equal(mu_kv_root_key(path, k2, &err), MU_E_ARG);
    unsetenv("MUSER_HOME");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_kill_writer),
        cmocka_unit_test(test_kill_delta),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_root_key),
        cmocka_unit_test(test_rows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
