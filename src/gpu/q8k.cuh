/* q8k.cuh: the Q8_K quantization of one block of 256 floats by a warp,
 * kern_ref.c's rounding bit for bit: k_quant_q8_K (gpu_cuda_mm.cu) and the
 * norm kernels that quantize their output rows (gpu_cuda.cu) share it. */
#ifndef MU_GPU_Q8K_CUH
#define MU_GPU_Q8K_CUH

#include "cuda.cuh"

/* nearest_int of ggml-quants.c (kern_ref.c) */
__device__ __forceinline__ int nearest_int(float v) {
    const float t = v + 12582912.f;
    return (int)(__float_as_uint(t) & 0x007fffffu) - 0x00400000;
}

/* One Q8_K block of 256 floats by one warp, as kern_ref.c quantizes it:
 * lane l holds elements l + 32 k in v[k]. */
__device__ __forceinline__ void q8K_block_warp_v(const float v[8], mu_block_q8_K *y, int lane) {
    /* the first element of largest magnitude; NaN never wins */
    float amax = 0;
    int idx = 0x7fffffff;
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (fabsf(v[k]) > amax) {
            amax = fabsf(v[k]);
            idx = lane + 32 * k;
        }
    for (int o = 16; o; o >>= 1) {
        const float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        if (a2 > amax || (a2 == amax && i2 < idx)) {
            amax = a2;
            idx = i2;
        }
    }
    /* the element itself, from the lane that holds it */
    const int src = idx == 0x7fffffff ? 0 : idx & 31, ks = idx == 0x7fffffff ? 0 : idx >> 5;
    float mine = v[0];
#pragma unroll
    for (int k = 1; k < 8; k++)
        if (k == ks) mine = v[k];
    const float xmax = __shfl_sync(0xffffffffu, mine, src);
    if (amax == 0.f) {
#pragma unroll
        for (int k = 0; k < 8; k++) y->qs[lane + 32 * k] = 0;
        if (lane < 16) y->bsums[lane] = 0;
        if (lane == 0) y->d = 0;
        return;
    }
    const float iscale = -127.f / xmax;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int q = nearest_int(iscale * v[k]);
        q = q > 127 ? 127 : q;
        y->qs[lane + 32 * k] = (int8_t)(q & 0xff);
        /* group 2k + (lane >= 16): the 16 lanes of a half warp */
        int s = (int)(int8_t)(q & 0xff);
        s += __shfl_xor_sync(0xffffffffu, s, 8);
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if ((lane & 15) == 0) y->bsums[2 * k + (lane >> 4)] = (int16_t)s;
    }
    if (lane == 0) y->d = 1.f / iscale;
}

/* the same for the 256 floats at xb */
__device__ __forceinline__ void q8K_block_warp(const float *xb, mu_block_q8_K *y, int lane) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = xb[lane + 32 * k];
    q8K_block_warp_v(v, y, lane);
}

#endif
