/* membw.c: measures the machine's memory read bandwidth, the ceiling for
 * decode (which reads every weight once per token).
 * Owns: one number per thread count: bytes read per second from a buffer far
 * larger than the caches, each thread streaming its own contiguous slice with
 * 256-bit loads (what the kernels do), best of several passes.
 * Not part of libmuser; built by bench/build.sh.
 * Usage: membw [MiB per pass (default 1024)] [threads (default: all online)] */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const uint8_t *p;
    size_t n;
    pthread_barrier_t *bar;
    double secs, cpu; /* wall and thread CPU seconds of the read */
    uint64_t sink;
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    const double t0 = now(), c0 = cpu_now();
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= j->n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(j->p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(j->p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(j->p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(j->p + i + 96)));
    }
    j->secs = now() - t0;
    j->cpu = cpu_now() - c0;
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    j->sink = (uint64_t)_mm256_extract_epi64(a, 0);
    return NULL;
}

/* Returns bytes/s over the slowest thread's wall time; *cpu_rate gets the sum
 * of each thread's bytes per CPU-second (time it actually ran: a shared,
 * busy machine deschedules the readers, which the wall rate counts). */
static double measure(const uint8_t *buf, size_t bytes, int nt, double *cpu_rate) {
    pthread_t th[64];
    job jobs[64];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    const size_t per = bytes / (size_t)nt / 128 * 128;
    const double t0 = now();
    for (int i = 0; i < nt; i++) {
        jobs[i] = (job){buf + per * (size_t)i, per, &bar, 0, 0, 0};
        pthread_create(&th[i], NULL, reader, &jobs[i]);
    }
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    const double wall = now() - t0;
    double slowest = 0;
    *cpu_rate = 0;
    for (int i = 0; i < nt; i++) {
        slowest = jobs[i].secs > slowest ? jobs[i].secs : slowest;
        *cpu_rate += (double)per / jobs[i].cpu;
    }
    pthread_barrier_destroy(&bar);
    (void)wall;
    return (double)per * nt / slowest;
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 1024;
    int nt_max = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (mib < 64 || nt_max < 1 || nt_max > 64) {
        fprintf(stderr, "usage: membw [MiB >= 64] [threads 1..64]\n");
        return 1;
    }
    const size_t bytes = mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < bytes; i += 64) memset(buf + i, (int)(i >> 6), 64);
    for (int nt = 1; nt <= nt_max; nt++) {
        double best = 0, best_cpu = 0, c;
        for (int rep = 0; rep < 7; rep++) {
            const double bw = measure(buf, bytes, nt, &c);
            best = bw > best ? bw : best;
            best_cpu = c > best_cpu ? c : best_cpu;
        }
        double load[1] = {0};
        getloadavg(load, 1);
        printf("{\"threads\": %d, \"buffer_mib\": %zu, \"read_gbps\": %.2f, \"read_gbps_cpu\": %.2f, \"loadavg1\": %.2f}\n",
               nt, mib, best / 1e9, best_cpu / 1e9, load[0]);
    }
    free(buf);
    return 0;
}
