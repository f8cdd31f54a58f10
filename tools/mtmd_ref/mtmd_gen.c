/* mtmd_gen.c: greedy tokens after images from llama.cpp (libllama + libmtmd
 * public C API), as llama-mtmd-cli evaluates a prompt: mtmd_tokenize (the
 * text split at the media markers, BOS when the vocabulary adds one), the
 * chunks through mtmd_helper_eval_chunks in batches of 2048 (ubatch 512),
 * then one token per decode; greedy = the first maximal logit. Prints the
 * generated ids, comma-separated, on one line (tests/data/vision/README.md).
 *   mtmd_gen MODEL.gguf MMPROJ.gguf N_PREDICT PROMPT IMAGE...
 * The text model runs without flash attention (muser's engine computes
 * llama.cpp's non-flash path); the projector as mtmd chooses (flash on the
 * CPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: mtmd_gen MODEL.gguf MMPROJ.gguf N_PREDICT PROMPT IMAGE...\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "mtmd_gen: cannot load %s\n", argv[1]), 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 4096;
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *lctx = llama_init_from_model(model, cp);
    if (!lctx) return fprintf(stderr, "mtmd_gen: cannot make a context\n"), 1;
    struct mtmd_context_params mcp = mtmd_context_params_default();
    mcp.use_gpu = false;
    mcp.n_threads = 2;
    mcp.print_timings = false;
    mtmd_context *ctx = mtmd_init_from_file(argv[2], model, mcp);
    if (!ctx) return fprintf(stderr, "mtmd_gen: cannot load %s\n", argv[2]), 1;
    const int n_predict = atoi(argv[3]);
    const int n_img = argc - 5;
    mtmd_bitmap **bms = calloc((size_t)n_img, sizeof *bms);
    for (int i = 0; i < n_img; i++)
        if (!(bms[i] = mtmd_helper_bitmap_init_from_file(ctx, argv[5 + i], false, mtmd_helper_init_opt_default()).bitmap))
            return fprintf(stderr, "mtmd_gen: cannot read %s\n", argv[5 + i]), 1;
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    mtmd_input_text txt = {argv[4], strlen(argv[4]), true, true};
    if (mtmd_tokenize(ctx, chunks, &txt, (const mtmd_bitmap **)bms, (size_t)n_img))
        return fprintf(stderr, "mtmd_gen: tokenize failed\n"), 1;
    llama_pos n_past = 0;
    if (mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, 2048, true, &n_past))
        return fprintf(stderr, "mtmd_gen: eval failed\n"), 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_batch b = llama_batch_init(1, 0, 1);
    for (int k = 0; k < n_predict; k++) {
        const float *lg = llama_get_logits_ith(lctx, -1);
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (lg[i] > lg[best]) best = i;
        printf("%s%d", k ? "," : "", best);
        if (llama_vocab_is_eog(vocab, best)) break;
        b.n_tokens = 1;
        b.token[0] = best;
        b.pos[0] = n_past++;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        if (llama_decode(lctx, b)) return fprintf(stderr, "mtmd_gen: decode failed\n"), 1;
    }
    printf("\n");
    llama_batch_free(b);
    mtmd_input_chunks_free(chunks);
    for (int i = 0; i < n_img; i++) mtmd_bitmap_free(bms[i]);
    mtmd_free(ctx);
    llama_free(lctx);
    llama_model_free(model);
    return 0;
}
