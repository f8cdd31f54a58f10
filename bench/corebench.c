/* corebench.c: what the cores of this machine can do at once, the ceiling
 * for compute-bound prefill (issue 20's thread scaling).
 * Owns: the int8 multiply-add rate of a register-only loop (AVX-512 VNNI
 * vpdpbusd, and AMX tdpbusd where the CPU and kernel allow it) per thread,
 *   - "solo": one thread pinned to each CPU in turn (its clock alone);
 *   - "pair": CPU 0 together with CPU k, for every k (a CPU that halves CPU
 *     0's rate shares its core: hyperthread siblings the VM does not show);
 *   - "all":  threads pinned to CPUs 0..n-1 for n = 1, 2, 4, ... all (what
 *     n threads of a perfectly parallel compute-bound kernel can reach).
 * The "clock" loop (a chain of dependent imuls, 3 cycles each: GHz) in
 * the same modes gives each thread's clock with scalar code (AVX-512 and
 * AMX code may run at a lower one), so a clock that falls as threads are
 * added is told apart from cores that are shared.
 * No memory traffic: the loops touch registers (and tiles) only, so a rate
 * that does not scale with threads is the cores' (shared cores, clocks),
 * not the memory's. One JSON line a measurement, in G a second ("gmacs":
 * int8 products; cycles for the clock loop).
 * Not part of libmuser; built by bench/build.sh (x86-64 only).
 * Usage: corebench [seconds a measurement (default 0.3)] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* one dependent chain of 64-bit imuls, 3 cycles each on every x86-64 core
 * of the last decade (a chain of adds of an immediate is not a clock: newer
 * cores fold them at rename): cycles a second */
static uint64_t clock_rounds(uint64_t n, int32_t *sink) {
    uint64_t x = (uint64_t)*sink | 1, one = 1;
    __asm__ volatile("" : "+r"(one));
    for (uint64_t r = 0; r < n; r++)
        __asm__ volatile(".rept 100\n\timul %1, %0\n\t.endr" : "+r"(x) : "r"(one));
    *sink = (int32_t)x;
    return n * 300;
}

/* 12 independent chains of vpdpbusd (64 products each) a round */
__attribute__((target("avx512f,avx512vnni"))) static uint64_t vnni_rounds(uint64_t n, int32_t *sink) {
    __m512i a[12];
    const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
    for (uint64_t r = 0; r < n; r++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
    }
    __m512i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, a[i]);
    *sink += _mm512_reduce_add_epi32(s);
    return n * 12 * 64;
}

/* AMX: tiles 0-3 accumulate 16x16 int32 from A tiles 4-5 (16x64 bytes) and
 * B tiles 6-7; four independent tdpbusd a round, 16*16*64 products each */
static bool amx_ok;
typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, pad[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

__attribute__((target("amx-tile,amx-int8"))) static uint64_t amx_rounds(uint64_t n, int32_t *sink) {
    static _Thread_local int8_t buf[1024] __attribute__((aligned(64)));
    static _Thread_local int32_t out[256] __attribute__((aligned(64)));
    tilecfg c = {.palette = 1};
    for (int t = 0; t < 8; t++) c.colsb[t] = 64, c.rows[t] = 16;
    _tile_loadconfig(&c);
    for (int i = 0; i < 1024; i++) buf[i] = (int8_t)(i & 7);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, buf, 64);
    _tile_loadd(5, buf, 64);
    _tile_loadd(6, buf, 64);
    _tile_loadd(7, buf, 64);
    for (uint64_t r = 0; r < n; r++) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    *sink += out[0];
    return n * 4 * 16 * 16 * 64;
}

static void amx_init(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 25) & 1)) return; /* AMX-TILE, AMX-INT8 */
    /* ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: Linux's permission for tile data */
    amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

typedef uint64_t (*loop_fn)(uint64_t, int32_t *);

typedef struct {
    int cpu;
    loop_fn fn;
    double secs;
    pthread_barrier_t *bar;
    double gmacs;
    int32_t sink;
} job;

static void *worker(void *arg) {
    job *j = arg;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(j->cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    j->fn(1000, &j->sink); /* warm: clocks up, tiles configured once */
    pthread_barrier_wait(j->bar);
    uint64_t macs = 0, step = 20000;
    const double t0 = now();
    double t;
    while ((t = now()) - t0 < j->secs) macs += j->fn(step, &j->sink);
    j->gmacs = (double)macs / (t - t0) * 1e-9;
    return NULL;
}

/* threads on cpus[0..n), all started together; fills rates */
static void run(const int *cpus, int n, loop_fn fn, double secs, double *rates) {
    pthread_t th[n];
    job jobs[n];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        jobs[i] = (job){.cpu = cpus[i], .fn = fn, .secs = secs, .bar = &bar};
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        rates[i] = jobs[i].gmacs;
    }
    pthread_barrier_destroy(&bar);
}

int main(int argc, char **argv) {
    const double secs = argc > 1 ? atof(argv[1]) : 0.3;
    cpu_set_t mine;
    sched_getaffinity(0, sizeof mine, &mine);
    int cpus[CPU_SETSIZE], nc = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine)) cpus[nc++] = c;
    amx_init();
    __builtin_cpu_init();
    const bool vnni = __builtin_cpu_supports("avx512vnni");
    struct {
        const char *name;
        loop_fn fn;
        bool ok;
    } loops[3] = {{"clock", clock_rounds, true}, {"vnni", vnni_rounds, vnni}, {"amx", amx_rounds, amx_ok}};
    fprintf(stderr, "corebench: %d cpus, vnni %d, amx %d, %.2f s a measurement\n", nc, vnni, amx_ok, secs);
    double rates[CPU_SETSIZE];
    for (int l = 0; l < 3; l++) {
        if (!loops[l].ok) continue;
        for (int i = 0; i < nc; i++) {
            run(&cpus[i], 1, loops[l].fn, secs, rates);
            printf("{\"loop\": \"%s\", \"mode\": \"solo\", \"cpu\": %d, \"gmacs\": %.1f}\n", loops[l].name, cpus[i], rates[0]);
        }
        for (int i = 1; i < nc; i++) {
            int two[2] = {cpus[0], cpus[i]};
            run(two, 2, loops[l].fn, secs, rates);
            printf("{\"loop\": \"%s\", \"mode\": \"pair\", \"cpus\": [%d, %d], \"gmacs\": [%.1f, %.1f]}\n", loops[l].name,
                   two[0], two[1], rates[0], rates[1]);
        }
        for (int n = 1;; n = n * 2 > nc && n < nc ? nc : n * 2) {
            run(cpus, n, loops[l].fn, secs, rates);
            double sum = 0, lo = 1e30, hi = 0;
            for (int i = 0; i < n; i++) {
                sum += rates[i];
                lo = rates[i] < lo ? rates[i] : lo;
                hi = rates[i] > hi ? rates[i] : hi;
            }
            printf("{\"loop\": \"%s\", \"mode\": \"all\", \"threads\": %d, \"gmacs\": %.1f, \"per_thread_min\": %.1f, "
                   "\"per_thread_max\": %.1f}\n",
                   loops[l].name, n, sum, lo, hi);
            fflush(stdout);
            if (n == nc) break;
        }
    }
    return 0;
}
