/* quant.c: the ggml type table (facts of the GGUF format). */
#include "quant.h"

static const mu_type_info TYPES[MU_T_COUNT] = {
    [MU_T_F32] = {"F32", 1, 4, 1},
    [MU_T_F16] = {"F16", 1, 2, 1},
    [MU_T_Q4_0] = {"Q4_0", 32, 18, 0},
    [MU_T_Q4_1] = {"Q4_1", 32, 20, 0},
    [MU_T_Q5_0] = {"Q5_0", 32, 22, 0},
    [MU_T_Q5_1] = {"Q5_1", 32, 24, 0},
    [MU_T_Q8_0] = {"Q8_0", 32, 34, 1},
    [MU_T_Q8_1] = {"Q8_1", 32, 36, 0},
    [MU_T_Q2_K] = {"Q2_K", 256, 84, 0},
    [MU_T_Q3_K] = {"Q3_K", 256, 110, 0},
    [MU_T_Q4_K] = {"Q4_K", 256, 144, 1},
    [MU_T_Q5_K] = {"Q5_K", 256, 176, 1},
    [MU_T_Q6_K] = {"Q6_K", 256, 210, 1},
    [MU_T_Q8_K] = {"Q8_K", 256, 292, 0},
    [MU_T_BF16] = {"BF16", 1, 2, 1},
    [MU_T_NVFP4] = {"NVFP4", 64, 36, 1},
};

static const mu_type_info UNKNOWN = {"unknown", 0, 0, 0};

const mu_type_info *mu_type_get(uint32_t type) {
    if (type >= MU_T_COUNT || TYPES[type].blck == 0) return &UNKNOWN;
    return &TYPES[type];
}

size_t mu_type_row_bytes(uint32_t type, int64_t n) {
    const mu_type_info *t = mu_type_get(type);
    if (t->blck == 0 || n < 0 || n % t->blck) return 0;
    return (size_t)(n / t->blck) * (size_t)t->type_bytes;
}
