/* mmproj_synth.c: seeded random vision projectors (`muser gen --mmproj`).
 * Owns: the keys and tensors of a Muse Glimmer projector in llama.cpp's
 * mmproj layout (clip.projector_type "muse-glimmer": the clip.vision.* keys
 * its loader reads, the v.* ViT tensors, mm.0 .. mm.2), two geometries
 * (the release's, and a tiny one of the same structure), and random weights.
 * Does not own: reading or running a projector (src/vision), converting a
 * real one (tools/).
 * Design: the file's bytes depend only on the options; every tensor is
 * seeded by its name, so two presets share no accidental structure. Norm
 * weights and biases are random too (near 1 and near 0), so a test that
 * drops one of them fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/muser_synth.h"
#include "../gguf/gguf.h"
#include "../kern/quant.h"
#include "gguf_write.h"
#include "quantize.h"

static const struct {
    const char *name;
    int n_layer, n_embd, n_ff, n_head, pos_side, mm_hidden, n_out;
} MM_PRESETS[] = {
    /* four layers: 0..2 windowed, 3 global ((il + 1) % 4 == 0 and the last) */
    {"tiny", 4, 64, 160, 2, 4, 128, 256},
    {"full", 50, 1536, 8960, 16, 32, 4096, 6656},
};

void mu_synth_mmproj_defaults(mu_synth_mmproj_opts *o) {
    memset(o, 0, sizeof *o);
    mu_synth_mmproj_preset(o, "tiny", NULL);
    o->type = MU_SYNTH_F16;
    o->seed = 1;
}

int mu_synth_mmproj_preset(mu_synth_mmproj_opts *o, const char *name, mu_err *err) {
    for (size_t k = 0; k < sizeof MM_PRESETS / sizeof MM_PRESETS[0]; k++)
        if (!strcmp(name, MM_PRESETS[k].name)) {
            o->preset = MM_PRESETS[k].name;
            o->n_layer = MM_PRESETS[k].n_layer;
            o->n_embd = MM_PRESETS[k].n_embd;
            o->n_ff = MM_PRESETS[k].n_ff;
            o->n_head = MM_PRESETS[k].n_head;
            o->pos_side = MM_PRESETS[k].pos_side;
            o->mm_hidden = MM_PRESETS[k].mm_hidden;
            o->n_out = MM_PRESETS[k].n_out;
            return 0;
        }
    return mu_fail(err, MU_E_ARG, "unknown projector preset (tiny, full): %.64s", name);
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* how a tensor's values are drawn */
enum { V_MAT, V_NORM_W, V_BIAS, V_POS };

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[4];
    uint32_t type;
    int kind;
    int64_t fan_in;
} tdesc;

#define MM_PATCH 14
#define MM_MERGE 2

int mu_synth_mmproj_write(const mu_synth_mmproj_opts *o, const char *path, mu_err *err) {
    const int E = o->n_embd, F = o->n_ff, H = o->n_head, L = o->n_layer, S = o->pos_side, M = o->mm_hidden,
              O = o->n_out;
    if (L < 1 || L > 256) return mu_fail(err, MU_E_ARG, "projector layers must be 1..256: %d", L);
    if (E < 2 || F < 1 || H < 1 || S < 1 || S > 256 || M < 1 || O < 1 || E % H || (E / H) % 4)
        return mu_fail(err, MU_E_ARG,
                       "bad projector geometry: width %d, heads %d (head dim a multiple of 4), ff %d, grid %d, "
                       "adapter %d, output %d",
                       E, H, F, S, M, O);
    if (o->type != MU_SYNTH_F32 && o->type != MU_SYNTH_F16 && o->type != MU_SYNTH_BF16 && o->type != MU_SYNTH_Q8_0)
        return mu_fail(err, MU_E_ARG, "projector type must be f32, f16, bf16 or q8_0");
    static const uint32_t wtype[] = {[MU_SYNTH_F32] = MU_T_F32, [MU_SYNTH_F16] = MU_T_F16,
                                     [MU_SYNTH_BF16] = MU_T_BF16, [MU_SYNTH_Q8_0] = MU_T_Q8_0};
    const uint32_t wt = wtype[o->type];
    if (wt == MU_T_Q8_0 && (E % 32 || F % 32 || M % 32 || (4 * E) % 32))
        return mu_fail(err, MU_E_ARG, "q8_0 needs widths that are multiples of 32");
    const int n_t = 8 + 16 * L + 3;
    tdesc *td = calloc((size_t)n_t, sizeof *td);
    mu_gguf_writer *w = NULL;
    float *row = NULL;
    uint8_t *qrow = NULL;
    int rc = 0;
    if (!td) return mu_fail(err, MU_E_NOMEM, "out of memory");

    /* keys: what clip.cpp's load_hparams reads for this projector */
    const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
    char name[96];
    snprintf(name, sizeof name, "%s", o->name ? o->name : "muse-glimmer-mmproj-random");
    static const uint32_t ftype[] = {[MU_SYNTH_F32] = 0, [MU_SYNTH_F16] = 1, [MU_SYNTH_BF16] = 32, [MU_SYNTH_Q8_0] = 7};
    if ((rc = mu_gguf_writer_new(&w, err))) goto out;
    if ((rc = mu_gguf_writer_set_str(w, "general.architecture", "clip", 4, err)) ||
        (rc = mu_gguf_writer_set_str(w, "general.name", name, strlen(name), err)) ||
        (rc = mu_gguf_writer_set_u32(w, "general.file_type", ftype[o->type], err)) ||
        (rc = mu_gguf_writer_set_bool(w, "clip.has_vision_encoder", true, err)) ||
        (rc = mu_gguf_writer_set_str(w, "clip.projector_type", "muse-glimmer", 12, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)(S * MM_PATCH * MM_MERGE), err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.patch_size", MM_PATCH, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)E, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)F, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.projection_dim", (uint32_t)O, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.block_count", (uint32_t)L, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.attention.head_count", (uint32_t)H, err)) ||
        (rc = mu_gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f, err)) ||
        (rc = mu_gguf_writer_set_arr(w, "clip.vision.image_mean", MU_GGUF_F32, mean, 3, err)) ||
        (rc = mu_gguf_writer_set_arr(w, "clip.vision.image_std", MU_GGUF_F32, std, 3, err)) ||
        (rc = mu_gguf_writer_set_u32(w, "clip.vision.spatial_merge_size", MM_MERGE, err)))
        goto out;

    int nt = 0;
#define T(nm, nd, a0, a1, a2, a3, ty, k, fi)                                                                        \
    td[nt] = (tdesc){.n_dims = nd, .ne = {a0, a1, a2, a3}, .type = ty, .kind = k, .fan_in = fi},                  \
    snprintf(td[nt].name, sizeof td[nt].name, "%s", nm), nt++
    /* the conv kernel [kw][kh][3][E] stays F16 (llama.cpp's im2col reads it so) unless F32 is asked */
    const uint32_t conv_t = wt == MU_T_F32 ? MU_T_F32 : MU_T_F16;
    T("v.patch_embd.weight", 4, MM_PATCH, MM_PATCH, 3, E, conv_t, V_MAT, 3 * MM_PATCH * MM_PATCH);
    T("v.patch_embd.bias", 1, E, 1, 1, 1, MU_T_F32, V_BIAS, 0);
    T("v.position_embd.weight", 2, E, (int64_t)S * S, 1, 1, MU_T_F32, V_POS, 0);
    T("v.pre_ln.weight", 1, E, 1, 1, 1, MU_T_F32, V_NORM_W, 0);
    T("v.pre_ln.bias", 1, E, 1, 1, 1, MU_T_F32, V_BIAS, 0);
    for (int il = 0; il < L; il++) {
        char nm[64];
#define LT(s, nd, a0, a1, ty, k, fi) snprintf(nm, sizeof nm, "v.blk.%d." s, il), T(nm, nd, a0, a1, 1, 1, ty, k, fi)
        LT("ln1.weight", 1, E, 1, MU_T_F32, V_NORM_W, 0);
        LT("ln1.bias", 1, E, 1, MU_T_F32, V_BIAS, 0);
        LT("attn_q.weight", 2, E, E, wt, V_MAT, E);
        LT("attn_q.bias", 1, E, 1, MU_T_F32, V_BIAS, 0);
        LT("attn_k.weight", 2, E, E, wt, V_MAT, E);
        LT("attn_k.bias", 1, E, 1, MU_T_F32, V_BIAS, 0);
        LT("attn_v.weight", 2, E, E, wt, V_MAT, E);
        LT("attn_v.bias", 1, E, 1, MU_T_F32, V_BIAS, 0);
        LT("attn_out.weight", 2, E, E, wt, V_MAT, E);
        LT("attn_out.bias", 1, E, 1, MU_T_F32, V_BIAS, 0);
        LT("ln2.weight", 1, E, 1, MU_T_F32, V_NORM_W, 0);
        LT("ln2.bias", 1, E, 1, MU_T_F32, V_BIAS, 0);
        LT("ffn_up.weight", 2, E, F, wt, V_MAT, E);
        LT("ffn_up.bias", 1, F, 1, MU_T_F32, V_BIAS, 0);
        LT("ffn_down.weight", 2, F, E, wt, V_MAT, F);
        LT("ffn_down.bias", 1, E, 1, MU_T_F32, V_BIAS, 0);
#undef LT
    }
    T("v.post_ln.weight", 1, E, 1, 1, 1, MU_T_F32, V_NORM_W, 0);
    T("v.post_ln.bias", 1, E, 1, 1, 1, MU_T_F32, V_BIAS, 0);
    T("mm.0.weight", 2, 4 * E, M, 1, 1, wt, V_MAT, 4 * E);
    T("mm.1.weight", 2, M, M, 1, 1, wt, V_MAT, M);
    T("mm.2.weight", 2, M, O, 1, 1, wt, V_MAT, M);
#undef T
    int64_t widest = 0;
    for (int i = 0; i < nt; i++) {
        if ((rc = mu_gguf_writer_add_tensor(w, td[i].name, td[i].type, td[i].n_dims, td[i].ne, err))) goto out;
        if (td[i].ne[0] > widest) widest = td[i].ne[0];
    }
    row = malloc((size_t)widest * sizeof *row);
    qrow = malloc(mu_type_row_bytes(MU_T_F32, widest));
    if (!row || !qrow) {
        rc = mu_fail(err, MU_E_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = mu_gguf_writer_open(w, path, err))) goto out;
    for (int i = 0; i < nt; i++) {
        const tdesc *t = &td[i];
        uint64_t s = o->seed * 0x9E3779B97F4A7C15ull;
        for (const char *c = t->name; *c; c++) s = (s ^ (uint8_t)*c) * 0x100000001B3ull;
        /* matrices uniform with std 1/sqrt(fan in); norm weights 1 +- 0.25;
         * biases and the position grid +- 0.1 and +- 0.5 */
        const float amp = t->kind == V_MAT ? sqrtf(3.0f / (float)t->fan_in)
                          : t->kind == V_POS ? 0.5f
                          : t->kind == V_NORM_W ? 0.25f
                                                 : 0.1f;
        const int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        for (int64_t r = 0; r < n_rows; r++) {
            for (int64_t c = 0; c < t->ne[0]; c++) {
                float u = 2.0f * (float)((splitmix(&s) >> 40) * (1.0 / 16777216.0)) - 1.0f;
                row[c] = (t->kind == V_NORM_W ? 1.0f : 0.0f) + amp * u;
            }
            const size_t rb = mu_type_row_bytes(t->type, t->ne[0]);
            mu_quantize_row(t->type, row, qrow, (int)t->ne[0]);
            if ((rc = mu_gguf_writer_write(w, qrow, rb, err))) goto out;
        }
    }
    rc = mu_gguf_writer_close(w, err);
out:
    mu_gguf_writer_free(w);
    free(td);
    free(row);
    free(qrow);
    return rc;
}
