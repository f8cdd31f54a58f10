/* mm.cuh: device helpers shared by the matmul files (gpu_cuda_mm.cu: the
 * quantization, decode and generic matmuls; gpu_cuda_mmq.cu: prefill on the
 * tensor cores), and the prefill entry point. */
#ifndef MU_GPU_MM_CUH
#define MU_GPU_MM_CUH

#include "cuda.cuh"

__device__ __forceinline__ int ld32(const void *p) { return *(const int *)p; }

/* scale_min_k4 on the 12 scale bytes held as 3 words */
__device__ __forceinline__ int ubyte(const int w[3], int i) {
    const int x = i < 4 ? w[0] : i < 8 ? w[1] : w[2]; /* selects: no local memory for a lane-dependent i */
    return (x >> (8 * (i & 3))) & 0xFF;
}
__device__ __forceinline__ int scale_k4w(int j, const int w[3]) {
    return j < 4 ? ubyte(w, j) & 63 : (ubyte(w, j + 4) & 0xF) | ((ubyte(w, j - 4) >> 6) << 4);
}
__device__ __forceinline__ int min_k4w(int j, const int w[3]) {
    return j < 4 ? ubyte(w, j + 4) & 63 : (ubyte(w, j + 4) >> 4) | ((ubyte(w, j) >> 6) << 4);
}

/* Asynchronous copies to shared memory (cp.async, sm_80+): 4 bytes, or
 * zeros when !ok (src is not read then). */
__device__ __forceinline__ void cp4(void *dst, const void *src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
}
/* 16 bytes, through L2 only (weights streamed once) */
__device__ __forceinline__ void cp16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* Prefill matmul of w on the int8 tensor cores (gpu_cuda_mmq.cu), for the
 * types and sizes that have one (T > the decode kernels' tokens); false:
 * not taken, the caller runs another kernel. */
bool cu_matmul_mma(cudaStream_t st, const dtensor *w, const void *act, size_t act_stride, int T, int n_batch, float *y);

#endif
