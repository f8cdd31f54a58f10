/* kern_dispatch.c: picks the kernel table at start-up.
 * Owns: CPU feature detection and the fill-from-below rule: each ISA table
 * starts as a copy of the next lower one, so entries an ISA file leaves
 * untouched fall back automatically. $MUSER_KERN forces a table. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kern.h"

#if defined(__x86_64__)
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif
#if defined(__aarch64__)
#define HAVE_ARM 1
#else
#define HAVE_ARM 0
#endif

static mu_kern T_AVX2, T_AVX512, T_NEON;
static int ok_avx2, ok_avx512, ok_neon;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Weak so a build without an ISA file still links; the flag stays 0. */
__attribute__((weak)) void mu_kern_fill_avx2(mu_kern *k);
__attribute__((weak)) void mu_kern_fill_avx512(mu_kern *k);
__attribute__((weak)) void mu_kern_fill_neon(mu_kern *k);

static void init(void) {
#if HAVE_X86
    __builtin_cpu_init();
    if (mu_kern_fill_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
        T_AVX2 = *mu_kern_ref();
        T_AVX2.name = "avx2";
        mu_kern_fill_avx2(&T_AVX2);
        ok_avx2 = 1;
        if (mu_kern_fill_avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16")) {
            T_AVX512 = T_AVX2;
            T_AVX512.name = "avx512";
            mu_kern_fill_avx512(&T_AVX512);
            ok_avx512 = 1;
        }
    }
#endif
#if HAVE_ARM
    if (mu_kern_fill_neon) {
        T_NEON = *mu_kern_ref();
        T_NEON.name = "neon";
        mu_kern_fill_neon(&T_NEON);
        ok_neon = 1;
    }
#endif
}

const mu_kern *mu_kern_select(const char *name) {
    pthread_once(&once, init);
    if (!name || !*name) name = getenv("MUSER_KERN");
    if (name && *name) {
        if (!strcmp(name, "ref")) return mu_kern_ref();
        if (!strcmp(name, "avx2")) return ok_avx2 ? &T_AVX2 : NULL;
        if (!strcmp(name, "avx512")) return ok_avx512 ? &T_AVX512 : NULL;
        if (!strcmp(name, "neon")) return ok_neon ? &T_NEON : NULL;
        return NULL;
    }
    if (ok_avx512) return &T_AVX512;
    if (ok_avx2) return &T_AVX2;
    if (ok_neon) return &T_NEON;
    return mu_kern_ref();
}

int mu_kern_available(const mu_kern **out, int cap) {
    pthread_once(&once, init);
    int n = 0;
    if (n < cap) out[n++] = mu_kern_ref();
    if (ok_avx2 && n < cap) out[n++] = &T_AVX2;
    if (ok_avx512 && n < cap) out[n++] = &T_AVX512;
    if (ok_neon && n < cap) out[n++] = &T_NEON;
    return n;
}
