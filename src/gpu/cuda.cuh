/* cuda.cuh: what the CUDA plugin's files share: device block layouts, the
 * CPU's scalar arithmetic as device functions, the cp.async helpers, and
 * the launchers one file offers another. Compiled with -fmad=false: no
 * product is fused into an add unless the code says fmaf, as in
 * kern_ref.c, whose rounding every device function here follows (see the
 * comments there for the why). */
#ifndef MU_GPU_CUDA_CUH
#define MU_GPU_CUDA_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../kern/quant.h"
#include "gpu.h"

/* A comparison switch (docs/cuda.md, "Switches for comparisons"): the
 * first character of the environment variable name as a digit, else dflt
 * (unset, or not a digit). Read once by each caller. */
static inline int cu_env_digit(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v >= '0' && *v <= '9' ? *v - '0' : dflt;
}

/* ---- errors (host) -------------------------------------------------------
 * cu_fail fills err (when given) and returns code; cu_cuda_fail_in names a
 * CUDA error with the part and what failed ("PART: WHAT: ERROR"), out of
 * memory as MU_E_NOMEM; cu_cuda_fail is the part "cuda"; CU_CK returns it
 * from the calling function. */
static inline int cu_fail(mu_err *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}
static inline int cu_cuda_fail_in(mu_err *err, cudaError_t e, const char *part, const char *what) {
    return cu_fail(err, e == cudaErrorMemoryAllocation ? MU_E_NOMEM : MU_E_IO, "%s: %s: %s", part, what,
                   cudaGetErrorString(e));
}
static inline int cu_cuda_fail(mu_err *err, cudaError_t e, const char *what) {
    return cu_cuda_fail_in(err, e, "cuda", what);
}
/* cudaMalloc of n bytes (at least 1) into *out; out of memory is
 * MU_E_NOMEM naming what, the bytes needed and the bytes free ("PART: out of
 * device memory for WHAT: ..."), any other failure cu_cuda_fail_in's. */
static inline int cu_malloc(size_t n, void **out, const char *part, const char *what, mu_err *err) {
    cudaError_t e = cudaMalloc(out, n ? n : 1);
    if (e == cudaSuccess) return 0;
    cudaGetLastError();
    *out = NULL;
    if (e != cudaErrorMemoryAllocation) return cu_cuda_fail_in(err, e, part, what);
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return cu_fail(err, MU_E_NOMEM, "%s: out of device memory for %s: need %zu bytes, %zu free of %zu", part, what, n,
                   fr, tot);
}

#define CU_CK(call, what)                                          \
    do {                                                           \
        cudaError_t e_ = (call);                                   \
        if (e_ != cudaSuccess) return cu_cuda_fail(err, e_, what); \
    } while (0)

/* ---- device block layouts ----------------------------------------------
 * Weights keep their GGUF bytes except the two types whose blocks are not
 * 4-byte multiples: Q8_0 (34) and Q6_K (210) are padded at upload so every
 * block starts 4-byte aligned and can be read as ints. Activations use the
 * same Q8_0 layout and Q8_K's (292 bytes, 4-aligned). */
typedef struct {
    uint16_t d, pad;
    int8_t qs[32];
} dq8_0; /* 36 bytes */

typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d, pad;
} dq6_K; /* 212 bytes */

static_assert(sizeof(dq8_0) == 36, "dq8_0");
static_assert(sizeof(dq6_K) == 212, "dq6_K");
static_assert(sizeof(mu_block_q8_K) == 292, "q8_K");
static_assert(sizeof(mu_block_q4_K) == 144, "q4_K");
static_assert(sizeof(mu_block_q5_K) == 176, "q5_K");

/* Device bytes of one block of weight type t (0: not a weight type). */
static inline int dev_block_bytes(uint32_t t) {
    switch (t) {
    case MU_T_F32: return 4;
    case MU_T_F16: case MU_T_BF16: return 2;
    case MU_T_Q8_0: return 36;
    case MU_T_Q4_K: return 144;
    case MU_T_Q5_K: return 176;
    case MU_T_Q6_K: return 212;
    case MU_T_NVFP4: return 36;
    default: return 0;
    }
}
/* GGUF bytes of one block of weight type t (dev_block_bytes but for the
 * two padded types). */
static inline int src_block_bytes(uint32_t t) {
    return t == MU_T_Q8_0 ? 34 : t == MU_T_Q6_K ? 210 : dev_block_bytes(t);
}

static inline int dev_block_elems(uint32_t t) {
    switch (t) {
    case MU_T_F32: case MU_T_F16: case MU_T_BF16: return 1;
    case MU_T_Q8_0: return 32;
    case MU_T_NVFP4: return 64;
    default: return 256;
    }
}

/* The dot type of weight type t (kern.h: llama.cpp's vec_dot_type). */
static inline uint32_t dev_dot_type(uint32_t t) {
    switch (t) {
    case MU_T_Q8_0: case MU_T_NVFP4: return MU_T_Q8_0;
    case MU_T_Q4_K: case MU_T_Q5_K: case MU_T_Q6_K: return MU_T_Q8_K;
    default: return t;
    }
}
/* Bytes of one activation row of n elements in dot type t. */
static inline size_t dev_act_row_bytes(uint32_t t, int n) {
    switch (t) {
    case MU_T_F32: return (size_t)n * 4;
    case MU_T_F16: case MU_T_BF16: return (size_t)n * 2;
    case MU_T_Q8_0: return (size_t)(n / 32) * sizeof(dq8_0);
    default: return (size_t)(n / 256) * sizeof(mu_block_q8_K);
    }
}

/* A weight on the device. */
typedef struct {
    void *d;
    uint32_t type;
    int ne0, ne1;
    size_t row_bytes; /* device bytes */
} dtensor;

/* griddepcontrol (sm_90): wait until the kernel before has finished and
 * its writes are visible (at once without a programmatic dependent
 * launch); let the next kernel start before this one ends */
__device__ __forceinline__ void pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

/* Programmatic dependent launches on (sm_90+, MUSER_CUDA_PDL=0 turns them
 * off; gpu_cuda_mm.cu). */
bool cu_pdl(void);

/* Launches kernel k so that it may start while the kernel before it still
 * runs (an ordinary launch where cu_pdl() is off): k must call pdl_wait()
 * before it touches memory, and every kernel that starts this way does. */
template <typename... P, typename... A>
static inline void launch_pdl(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = cu_pdl() ? 1 : 0;
    cudaLaunchKernelEx(&cfg, k, args...);
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
/* 16 bytes, or zeros when !ok (src is not read then, but must be a valid
 * address) */
__device__ __forceinline__ void cp16z(void *dst, const void *src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* ---- scalar arithmetic of the CPU -------------------------------------- */

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ float f16_round(float f) { return h2f(f2h(f)); }

__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t f2bf(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* mu_hsum8 / mu_hsum16 */
__device__ __forceinline__ float hsum8(const float *a) {
    float h0 = a[0] + a[4], h1 = a[1] + a[5], h2 = a[2] + a[6], h3 = a[3] + a[7];
    return (h0 + h2) + (h1 + h3);
}
__device__ __forceinline__ float hsum16(const float *a) {
    float h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = a[i] + a[i + 8];
    return hsum8(h);
}

/* mu_expf_ggml, bit for bit */
__device__ __forceinline__ float expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.f) return n <= 0.f ? 0.f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

/* glibc's expf, bit for bit: its algorithm (a 32-entry table of 2^(i/32)
 * and a cubic in double) as x86-64's FMA build of it evaluates, with the
 * products fused into the adds. Checked against glibc 2.36 on every one of
 * the 2^32 inputs. The table: the bits of 2^(i/32) rounded to double,
 * minus i << 47 (added back with the exponent below). */
static __constant__ const uint64_t c_exp2_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};
__device__ __forceinline__ float expf_libm(float x) {
    const uint32_t ux = __float_as_uint(x), abstop = (ux >> 20) & 0x7ff;
    if (abstop >= 0x42b) {                          /* |x| >= 88 or not finite */
        if (ux == 0xff800000u) return 0.0f;         /* -inf */
        if (abstop >= 0x7f8) return x + x;          /* inf, nan */
        if (x > 0x1.62e42ep6f) return INFINITY;
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    const double InvLn2N = 0x1.71547652b82fep+0 * 32, SHIFT = 0x1.8p+52;
    const double C0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, C1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                 C2 = 0x1.62e42ff0c52d6p-1 / 32;
    const double xd = x;
    double kd = fma(InvLn2N, xd, SHIFT);
    const uint64_t ki = (uint64_t)__double_as_longlong(kd);
    kd -= SHIFT;
    const double r = fma(InvLn2N, xd, -kd);
    const double s = __longlong_as_double((long long)(c_exp2_tab[ki % 32] + (ki << 47)));
    const double z = fma(C0, r, C1), r2 = r * r;
    double y = fma(C2, r, 1.0);
    y = fma(z, r2, y);
    return (float)(y * s);
}
/* softcap's tanhf: in double, rounded once (glibc's may differ in the last
 * bit; it only touches logits, never a value a later layer reads). */
__device__ __forceinline__ float tanhf_libm(float x) { return (float)tanh((double)x); }


/* ---- launchers (gpu_cuda_mm.cu, gpu_cuda_attn.cu) ----------------------- */

/* x [T][n] f32 -> dot-type rows (row stride `stride` bytes) */
void cu_quantize(cudaStream_t st, uint32_t dot_type, const float *x, int T, int n, void *y, size_t stride);
/* y[t][r] = W row r . act row t for t < T; rows t < n_batch round as the
 * CPU's vec_dot_batch (kern.h), the rest as vec_dot. With logits: y *
 * scale, then softcap. */
void cu_matmul(cudaStream_t st, const dtensor *w, const void *act, size_t act_stride, int T, int n_batch, float *y,
               bool logits, float logit_scale, float softcap);
/* cu_matmul of n matrices over the same activation rows (no logits);
 * decode steps run runs of one type and width as one launch. */
void cu_matmul_n(cudaStream_t st, const dtensor *const *ws, int n, const void *act, size_t act_stride, int T,
                 int n_batch, float *const *ys);
/* frees what the prefill matmuls keep for stream st (gpu_cuda_mmw.cu); call
 * before the stream is destroyed */
void cu_mm_wg_release(cudaStream_t st);
/* on: the prefill matmuls this thread launches until cu_mm_wg_group(false)
 * take one activation input on one stream (cu_matmul_n), and the wgmma
 * kernel converts it once for all of them (gpu_cuda_mmw.cu) */
void cu_mm_wg_group(bool on);
/* Rows t < n_batch that the CPU computes with vec_dot_batch, for a matmul
 * of ll_rows activation rows (forward.c, matmul_ex). */
int cu_batch_rows(const dtensor *w, int ll_rows);
/* nb blocks of type t from GGUF bytes into the device layout, on the host:
 * the staging of an upload. Q8_0 and Q6_K are padded (dq8_0, dq6_K).
 * NVFP4 keeps its 36 bytes, but a scale byte of 0x7f becomes 0x00 (both
 * read as 0; 0xff still reads as 240) and code word q (bytes 4q .. 4q + 3
 * of qs) holds the low nibbles of its bytes in bits 0..15, byte n's at
 * bits 4n, and their high nibbles in bits 16..31: the codes of one lane
 * chain in each half (fp4_codes, fp4_mags in mm.cuh). */
void cu_dev_blocks(uint32_t type, const uint8_t *src, size_t nb, uint8_t *stage);
/* y[t] = rms(x[t]) * w (w NULL: unweighted) for T rows of n floats, the
 * forward's norm (in place is allowed); g = silu(g) * u, the forward's
 * SwiGLU; best[r] of logits-like rows [n_rows][n], the forward's k_best. */
void cu_rms_rows(cudaStream_t st, const float *x, const float *w, float *y, int T, int n, float eps);
void cu_swiglu(cudaStream_t st, float *g, const float *u, int n, int T);
void cu_best(cudaStream_t st, const float *lg, int n_rows, int n, int32_t *best);
/* Dequantized row `row` of w into y (n = w->ne0 floats), for every token. */
void cu_get_rows(cudaStream_t st, const dtensor *w, const int32_t *rows, int T, float *y);

/* Attention of one layer (gpu_cuda_attn.cu). Per token: its position, the
 * first cell index of its session's run, batch (the session has >= 2 tokens
 * in the chunk), and its session's K and V cells for this layer. */
typedef struct {
    const uint16_t *k, *v; /* [rows][n_kv] F16 */
    int rows;
} cu_kv_layer;
typedef struct {
    int T, n_head, n_head_kv, head_dim, n_swa;
    bool swa;
    const float *q;        /* [T][n_q], after norm and RoPE */
    const float *gate;     /* [T][n_q] */
    float *out;            /* [T][n_q] */
    const int *pos;        /* [T] (device) */
    const uint8_t *batch;  /* [T] (device) */
    const int *sess;       /* [T] session index (device) */
    const cu_kv_layer *kv; /* [n_sess] (device) */
    int max_span;          /* most cells any row spans */
    float *scores;         /* [T * n_head][max_span] scratch */
    float *chunk_sums;     /* [T * n_head][max_span / 16] scratch */
    int mode;              /* CU_ATTN_*: which kernels (cu_attn_mode) */
    float *lanes;          /* [CU_DECODE_MAX_T * n_head][64][128] scratch (decode) */
} cu_attn_args;
enum { CU_ATTN_ROWS, CU_ATTN_PREFILL, CU_ATTN_DECODE };
#define CU_DECODE_MAX_T 8 /* the most tokens of a CU_ATTN_DECODE pass */
/* The kernels for a pass: PREFILL when every row is a batch row, DECODE
 * when none is and T <= CU_DECODE_MAX_T (heads 128 wide, at most 16 query
 * heads per KV head), else ROWS. */
int cu_attn_mode(int T, const uint8_t *batch, int n_head, int n_head_kv, int head_dim);
void cu_attention(cudaStream_t st, const cu_attn_args *a);

/* The vision encoder (gpu_cuda_vit.cu): gpu.h's mu_gpu_vit_*. */
int cu_vit_new(int device, const mu_gpu_vit_desc *d, mu_gpu_vit **out, mu_err *err);
void cu_vit_free(mu_gpu_vit *v);
int cu_vit_encode(mu_gpu_vit *v, const mu_gpu_vit_image *im, mu_err *err);
int cu_vit_test_gemm(int device, int T, int N, int K, const uint16_t *a, const uint16_t *w, const float *bias,
                     const float *res, bool gelu, float *y, mu_err *err);
int cu_vit_test_attn(int device, int n, int n_head, int hd, const float *q, const uint16_t *k, const uint16_t *v,
                     const int *lo, const int *hi, bool global, uint16_t *out, mu_err *err);

/* The DFlash drafter (gpu_cuda_draft.cu): gpu.h's mu_gpu_draft_* and
 * mu_gpu_dseq_*. */
int cu_draft_new(int device, const mu_gpu_draft_desc *d, mu_gpu_draft **out, mu_err *err);
void cu_draft_free(mu_gpu_draft *d);
int cu_draft_set_head(mu_gpu_draft *d, const mu_gpu_tensor *head, mu_err *err);
int cu_dseq_new(mu_gpu_draft *d, int n_ctx, mu_gpu_dseq **out, mu_err *err);
void cu_dseq_free(mu_gpu_dseq *q);
int cu_dseq_inject(mu_gpu_dseq *q, int pos0, int n, const float *feat, const float *cs, const float *sn, mu_err *err);
int cu_dseq_truncate(mu_gpu_dseq *q, int n, int n_past, mu_err *err);
int cu_dseq_pass(mu_gpu_dseq *q, const float *x0, const float *cs, const float *sn, int pos, int n_ctx_rows,
                 int n_draft, mu_err *err);
int cu_dseq_head(mu_gpu_dseq *q, int from, int n, int32_t *best, float *scores, mu_err *err);

#endif
