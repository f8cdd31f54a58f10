/* driver.c: the kernel checks (tests/unit/kern_checks.h) for AArch64, run
 * under qemu-user by tests/neon/run.sh. Self-contained: no test framework,
 * the static binary links only libc and libm. Exit status 0 = all passed. */
#include <stdio.h>

#include "../unit/kern_checks.h"

int mu_kern_neon_has_sdot(void);

int main(void) {
    const mu_kern *tabs[8];
    const int n = mu_kern_available(tabs, 8);
    int fails = 0, have_neon = 0;
    for (int i = 0; i < n; i++) {
        const mu_kern *k = tabs[i];
        if (!strcmp(k->name, "neon")) have_neon = 1;
        const struct {
            const char *name;
            int (*fn)(const mu_kern *);
        } checks[] = {{"complete", check_complete}, {"quant", check_quant}, {"quant_nonfinite", check_quant_nonfinite}, {"dequant", check_dequant},
                      {"nvfp4_nonfinite", check_nvfp4_nonfinite}, {"nvfp4_cancel", check_nvfp4_cancel},
                      {"vec_dot", check_vec_dot},   {"gemm", check_gemm},         {"gemm_wide", check_gemm_wide},
                      {"bf16_tiny", check_bf16_tiny},
                      {"vec_dot2", check_vec_dot2}, {"mm_f16", check_mm_f16},     {"softmax_swiglu", check_softmax_swiglu},
                      {"sumsq", check_sumsq}};
        for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++) {
            const int f = checks[c].fn(k);
            printf("%-4s %s %s%s\n", f ? "FAIL" : "ok", k->name, checks[c].name,
                   !strcmp(k->name, "neon") ? (mu_kern_neon_has_sdot() ? " (sdot)" : " (no sdot)") : "");
            fails += f;
        }
    }
    if (!have_neon) {
        printf("FAIL: the neon table is not available\n");
        fails++;
    }
    printf("%s: %d failure(s)\n", fails ? "FAILED" : "PASSED", fails);
    return fails ? 1 : 0;
}
