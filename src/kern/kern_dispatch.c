/* kern_dispatch.c: picks the kernel table at start-up.
 * Owns: CPU feature detection and the fill-from-below rule: each ISA table
 * starts as a copy of the next lower one, so entries an ISA file leaves
 * untouched fall back automatically. $MUSER_KERN forces a table.
 * The ISA fill functions are called directly (strong references, under
 * HAVE_X86 / HAVE_ARM), so a static link of libmuser.a keeps the SIMD
 * tables without help from the program.
 * AMX: the "amx" table (the AVX-512 table plus gemm_amx.c's tile gemms)
 * exists when CPUID has AMX-TILE and AMX-INT8, the OS enables the tile
 * state in XCR0 and Linux grants this process the tile data
 * (arch_prctl ARCH_REQ_XCOMP_PERM); it is chosen only by name (--kern amx,
 * MUSER_KERN=amx): it passes the parity tiers on AMX Xeons (the GPU
 * machine's, the development machine) but is slower there than avx512
 * (docs/benchmarks.md, "AMX tiles").
 * "amxsim" is the same table with the tile instructions emulated in C: on
 * any AVX-512 machine, by name only, for tests (slow). */
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

static mu_kern T_AVX2, T_AVX512, T_AMX, T_AMXSIM, T_NEON;
static int ok_avx2, ok_avx512, ok_amx, ok_neon;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if HAVE_X86
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* CPU and OS support (XSAVE-enabled register state) from cpuid/xgetbv, so the
 * check does not depend on which feature names a compiler's
 * __builtin_cpu_supports knows. */
static unsigned long long xcr0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void x86_features(int *avx2, int *avx512) {
    unsigned a, b, c, d;
    *avx2 = *avx512 = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave) return;
    const unsigned long long x = xcr0();
    const int ymm_os = (x & 0x6) == 0x6, zmm_os = (x & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    const int avx2_cpu = (b >> 5) & 1;
    const int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    const int vnni = (c >> 11) & 1;
    unsigned a1 = 0, b1, c1, d1;
    __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    const int bf16 = (a1 >> 5) & 1;
    *avx2 = ymm_os && avx2_cpu && fma && f16c;
    *avx512 = *avx2 && zmm_os && f && dq && bw && vl && vnni && bf16;
}

/* AMX-TILE and AMX-INT8 (CPUID 7.0 EDX bits 24, 25), the tile config and
 * data state enabled by the OS (XCR0 bits 17, 18), and Linux's permission
 * for this process to use the tile data (without it the first tile
 * instruction faults). */
static int x86_amx(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return 0;
    if ((xcr0() & (3ull << 17)) != (3ull << 17)) return 0;
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) return 0;
    unsigned long granted = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &granted)) return 0;
    return (granted >> XFEATURE_XTILEDATA) & 1;
#else
    return 0;
#endif
}
#endif

static void init(void) {
#if HAVE_X86
    int avx2, avx512;
    x86_features(&avx2, &avx512);
    if (avx2) {
        T_AVX2 = *mu_kern_ref();
        T_AVX2.name = "avx2";
        mu_kern_fill_avx2(&T_AVX2);
        mu_kern_fill_attn_avx2(&T_AVX2);
        mu_kern_fill_gemm_avx2(&T_AVX2);
        ok_avx2 = 1;
    }
    if (avx512) {
        T_AVX512 = T_AVX2;
        T_AVX512.name = "avx512";
        mu_kern_fill_avx512(&T_AVX512);
        mu_kern_fill_attn_avx512(&T_AVX512);
        mu_kern_fill_gemm_avx512(&T_AVX512);
        ok_avx512 = 1;
        T_AMXSIM = T_AVX512;
        T_AMXSIM.name = "amxsim";
        mu_kern_fill_gemm_amx(&T_AMXSIM, 1);
        if (x86_amx()) {
            T_AMX = T_AVX512;
            T_AMX.name = "amx";
            mu_kern_fill_gemm_amx(&T_AMX, 0);
            ok_amx = 1;
        }
    }
#endif
#if HAVE_ARM
    T_NEON = *mu_kern_ref();
    T_NEON.name = "neon";
    mu_kern_fill_neon(&T_NEON);
    mu_kern_fill_attn_neon(&T_NEON);
    mu_kern_fill_gemm_neon(&T_NEON);
    ok_neon = 1;
#endif
}

const mu_kern *mu_kern_select(const char *name) {
    pthread_once(&once, init);
    if (!name || !*name) name = getenv("MUSER_KERN");
    if (name && *name) {
        if (!strcmp(name, "ref")) return mu_kern_ref();
        if (!strcmp(name, "avx2")) return ok_avx2 ? &T_AVX2 : NULL;
        if (!strcmp(name, "avx512")) return ok_avx512 ? &T_AVX512 : NULL;
        if (!strcmp(name, "amx")) return ok_amx ? &T_AMX : NULL;
        if (!strcmp(name, "amxsim")) return ok_avx512 ? &T_AMXSIM : NULL;
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
    if (ok_avx512 && n < cap) out[n++] = &T_AMXSIM;
    if (ok_amx && n < cap) out[n++] = &T_AMX;
    if (ok_neon && n < cap) out[n++] = &T_NEON;
    return n;
}
