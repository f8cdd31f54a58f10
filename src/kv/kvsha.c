/* kvsha.c: many SHA-256 messages at once, for pack chunks (their content
 * ids and digests): AVX-512 lanes on x86-64 CPUs that have them, OpenSSL
 * one message at a time elsewhere and as the reference.
 * Owns: the choice of implementation. Does not own: the lanes
 * (kvsha_avx512.c) or what is hashed (kvcrypt.c, kvobj.c). */
#include "kvpack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
void kv_sha256_x16(const kv_sha_job *jobs, int n);
#endif

static bool g_lanes;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void pick(void) {
#if defined(__x86_64__)
    const char *e = getenv("MUSER_KV_SHA");
    g_lanes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && !(e && !strcmp(e, "ref"));
#endif
}

bool kv_sha256_lanes(void) {
    pthread_once(&g_once, pick);
    return g_lanes;
}

void kv_sha256_jobs_ref(const kv_sha_job *jobs, int n) {
    for (int i = 0; i < n; i++) {
        const void *parts[2] = {jobs[i].head, jobs[i].body};
        size_t lens[2] = {jobs[i].head_n, jobs[i].body_n};
        kv_sha256v(parts, lens, 2, jobs[i].out);
    }
}

/* The lanes cost the same however many of the 16 carry a message, and
 * OpenSSL hashes one message (with the SHA extensions) about as fast as 8
 * lanes: fewer than 8 messages go one by one. */
#define LANES_MIN 8

void kv_sha256_jobs(const kv_sha_job *jobs, int n) {
#if defined(__x86_64__)
    if (kv_sha256_lanes()) {
        for (int i = 0; i < n; i += 16) {
            int m = n - i < 16 ? n - i : 16;
            if (m >= LANES_MIN) kv_sha256_x16(jobs + i, m);
            else kv_sha256_jobs_ref(jobs + i, m);
        }
        return;
    }
#endif
    kv_sha256_jobs_ref(jobs, n);
}
