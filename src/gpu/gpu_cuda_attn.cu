/* gpu_cuda_attn.cu: attention of one layer over sessions' F16 cells, with
 * the CPU's rounding (attn.c, kern_ref.c mm_f16 and softmax_f16).
 *
 * A row is one (token, query head). Its span is the cells attn.c would
 * cover for it: aligned to 64 cells for a lone token (ggml_vec_dot_f16's
 * order), to 16 when its session has more tokens in the chunk (tinyBLAS's
 * order). Cells outside the token's window inside the span get weight 0,
 * which adds nothing, so the accumulator lanes (cell index mod 16 or 64)
 * and the softmax's 16-cell chunks are those of the CPU. Three kernels:
 * K.Q scores, the softmax (F16 weights), and V times the weights with the
 * sigmoid gate. */
#include "cuda.cuh"

/* The span [c_lo, c_hi) of a row (attn.c cell_range). */
__device__ __forceinline__ void row_span(int pos, int nc, bool swa, int n_swa, bool batch, int *c_lo, int *c_hi,
                                         int *p0) {
    const int u0 = swa && pos - n_swa + 1 > 0 ? pos - n_swa + 1 : 0;
    const int al = batch ? 16 : 64;
    const int a = u0 % nc, span = pos - u0 + 1;
    *p0 = u0;
    if (!swa || a + span <= nc) {
        *c_lo = a / al * al;
        int hi = (a + span + al - 1) / al * al;
        *c_hi = hi > nc ? nc : hi;
    } else {
        *c_lo = 0;
        *c_hi = nc;
    }
}

/* scores[row][c - c_lo] = (q16 . k16[c]) * scale, -inf outside the window. */
__global__ void k_scores(cu_attn_args a) {
    const int row = blockIdx.y, t = row / a.n_head, h = row % a.n_head;
    const int pos = a.pos[t];
    const bool batch = a.batch[t];
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(pos, kv.rows, a.swa, a.n_swa, batch, &c_lo, &c_hi, &p0);
    const int hd = a.head_dim, n_kv = a.n_head_kv * hd, g = h / (a.n_head / a.n_head_kv);
    extern __shared__ float q16[];
    for (int i = threadIdx.x; i < hd; i += blockDim.x) q16[i] = f16_round(a.q[(size_t)t * a.n_head * hd + (size_t)h * hd + i]);
    __syncthreads();
    const int c = c_lo + blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= c_hi) return;
    float *out = a.scores + (size_t)row * a.max_span + (c - c_lo);
    /* the position cell c holds, if it is in [p0, pos] */
    const int p = pos - ((pos - c) % kv.rows + kv.rows) % kv.rows;
    if (p < p0 || p < 0) {
        *out = -INFINITY;
        return;
    }
    const uint16_t *k = kv.k + (size_t)c * n_kv + (size_t)g * hd;
    float s;
    if (batch && hd % 16 == 0) {
        float acc[16];
#pragma unroll
        for (int l = 0; l < 16; l++) acc[l] = 0;
        for (int i = 0; i < hd; i += 16)
#pragma unroll
            for (int l = 0; l < 16; l++) acc[l] += h2f(k[i + l]) * q16[i + l];
        s = hsum16(acc);
    } else {
        float acc[4][16];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int l = 0; l < 16; l++) acc[j][l] = 0;
        const int np = hd & ~63;
        for (int i = 0; i < np; i += 64)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int l = 0; l < 16; l++) acc[j][l] += h2f(k[i + 16 * j + l]) * q16[i + 16 * j + l];
#pragma unroll
        for (int l = 0; l < 16; l++) {
            acc[0][l] += acc[2][l];
            acc[1][l] += acc[3][l];
            acc[0][l] += acc[1][l];
        }
        double d = hsum16(acc[0]);
        for (int i = np; i < hd; i++) d += (double)(h2f(k[i]) * q16[i]);
        s = (float)d;
    }
    *out = s * (1.0f / sqrtf((float)hd));
}

/* Softmax of a row into F16-exact weights: e = expf_ggml(x - max), each
 * 16 cells' sum as hsum16, the chunks added in double in cell order. One
 * block per row. */
__global__ void k_softmax(cu_attn_args a) {
    const int row = blockIdx.x, t = row / a.n_head;
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, a.batch[t], &c_lo, &c_hi, &p0);
    const int m = c_hi - c_lo, nch = m / 16;
    float *x = a.scores + (size_t)row * a.max_span;
    float *cs = a.chunk_sums + (size_t)row * (a.max_span / 16);
    __shared__ float s_max[32];
    __shared__ double s_sum;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < m; i += blockDim.x) mx = fmaxf(mx, x[i]);
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) s_max[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < (int)blockDim.x / 32; w++) mx = fmaxf(mx, s_max[w]);
    for (int k = threadIdx.x; k < nch; k += blockDim.x) {
        float e[16];
#pragma unroll
        for (int l = 0; l < 16; l++) {
            e[l] = expf_ggml(x[16 * k + l] - mx);
            x[16 * k + l] = e[l];
        }
        cs[k] = hsum16(e);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0;
        for (int k = 0; k < nch; k++) sum += (double)cs[k];
        s_sum = sum;
    }
    __syncthreads();
    const float inv = (float)(1.0 / s_sum);
    for (int i = threadIdx.x; i < m; i += blockDim.x) x[i] = f16_round(x[i] * inv);
}

/* out[t][h][d] = (weights . V[:, d]) * sigmoid(gate). The CPU's
 * accumulator lanes (cell index mod 64, or mod 16 for a session with more
 * tokens in the chunk) become threads: thread (d, a) sums the cells of lane
 * a in order; the lanes are then combined as the CPU combines them. Block:
 * 32 values of d x 32 threads, each thread lanes a and a + 32. */
__global__ void k_pv(cu_attn_args a) {
    const int row = blockIdx.x, t = row / a.n_head, h = row % a.n_head;
    const int dx = threadIdx.x, ty = threadIdx.y, d = blockIdx.y * 32 + dx;
    const int hd = a.head_dim, n_kv = a.n_head_kv * hd, g = h / (a.n_head / a.n_head_kv);
    const bool batch = a.batch[t];
    const cu_kv_layer kv = a.kv[a.sess[t]];
    int c_lo, c_hi, p0;
    row_span(a.pos[t], kv.rows, a.swa, a.n_swa, batch, &c_lo, &c_hi, &p0);
    const int m = c_hi - c_lo, L = batch ? 16 : 64, np = m / L * L;
    const float *w = a.scores + (size_t)row * a.max_span;
    const uint16_t *v = kv.v + (size_t)c_lo * n_kv + (size_t)g * hd + d;
    __shared__ float acc[64][33];
    for (int ln = ty; ln < 64; ln += 32) {
        float s = 0;
        if (ln < L && d < hd)
            for (int c = ln; c < np; c += L) s += h2f(v[(size_t)c * n_kv]) * w[c];
        acc[ln][dx] = s;
    }
    __syncthreads();
    if (ty != 0 || d >= hd) return;
    float r;
    if (batch) { /* tinyBLAS: one 16-lane accumulator, hsum16 */
        float l16[16];
#pragma unroll
        for (int l = 0; l < 16; l++) l16[l] = acc[l][dx];
        r = hsum16(l16);
    } else { /* ggml: acc[j][l] = lane 16j + l; 0 += 2, 1 += 3, 0 += 1, hsum16; tail in double */
        float l16[16];
#pragma unroll
        for (int l = 0; l < 16; l++) {
            float a0 = acc[l][dx], a1 = acc[16 + l][dx], a2 = acc[32 + l][dx], a3 = acc[48 + l][dx];
            a0 += a2;
            a1 += a3;
            a0 += a1;
            l16[l] = a0;
        }
        double dd = hsum16(l16);
        for (int c = np; c < m; c++) dd += (double)(h2f(v[(size_t)c * n_kv]) * w[c]);
        r = (float)dd;
    }
    const size_t o = (size_t)t * a.n_head * hd + (size_t)h * hd + d;
    a.out[o] = r * (1.0f / (1.0f + expf_libm(-a.gate[o])));
}

void cu_attention(cudaStream_t st, const cu_attn_args *a) {
    const int R = a->T * a->n_head;
    const int nb = (a->max_span + 127) / 128;
    k_scores<<<dim3(nb, R), 128, (size_t)a->head_dim * sizeof(float), st>>>(*a);
    k_softmax<<<R, 256, 0, st>>>(*a);
    k_pv<<<dim3(R, (a->head_dim + 31) / 32), dim3(32, 32), 0, st>>>(*a);
}
