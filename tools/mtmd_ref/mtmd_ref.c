/* mtmd_ref.c: reference image embeddings from llama.cpp's mtmd (libmtmd's
 * public C API), for the vision tests (tests/data/vision/README.md says how
 * it is built and run). For each W H SEED triple: the seeded test image of
 * tests/unit/vision_img.h, through mtmd_tokenize (the default marker alone)
 * and mtmd_encode_chunk; writes OUT/img_WxH_sSEED.emb (the output rows,
 * float32 little-endian, n_tokens x n_embd) and prints the token count and
 * the encode's wall time (bench/vision/run.sh reads it). Threads: 2, or
 * $MTMD_THREADS. $MTMD_GPU=1 encodes on llama.cpp's GPU backend (a CUDA
 * build); $MTMD_REPEAT=N encodes each image N times, a time line each (the
 * first GPU encode pays the device's warm-up).
 * Images whose sides are multiples of 28 px (and within the token limit)
 * are not resized by mtmd, so the encoder's input is just the normalized
 * pixels. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"
#include "mtmd.h"
#include "../../tests/unit/vision_img.h"

int main(int argc, char **argv) {
    if (argc < 5 || (argc - 4) % 3) {
        fprintf(stderr, "usage: mtmd_ref MODEL.gguf MMPROJ.gguf OUTDIR W H SEED [W H SEED ...]\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    const int gpu = getenv("MTMD_GPU") && atoi(getenv("MTMD_GPU")) > 0;
    const int repeat = getenv("MTMD_REPEAT") && atoi(getenv("MTMD_REPEAT")) > 1 ? atoi(getenv("MTMD_REPEAT")) : 1;
    mp.n_gpu_layers = gpu ? 999 : 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "mtmd_ref: cannot load %s\n", argv[1]), 1;
    struct mtmd_context_params cp = mtmd_context_params_default();
    cp.use_gpu = gpu;
    cp.n_threads = getenv("MTMD_THREADS") ? atoi(getenv("MTMD_THREADS")) : 2;
    cp.print_timings = false;
    mtmd_context *ctx = mtmd_init_from_file(argv[2], model, cp);
    if (!ctx) return fprintf(stderr, "mtmd_ref: cannot load %s\n", argv[2]), 1;
    const int n_embd = llama_model_n_embd_inp(model);
    for (int a = 4; a < argc; a += 3) {
        const int w = atoi(argv[a]), h = atoi(argv[a + 1]);
        const unsigned long long seed = strtoull(argv[a + 2], NULL, 10);
        unsigned char *rgb = malloc((size_t)w * h * 3);
        vision_test_image(w, h, seed, rgb);
        mtmd_bitmap *bm = mtmd_bitmap_init((uint32_t)w, (uint32_t)h, rgb);
        mtmd_input_chunks *chunks = mtmd_input_chunks_init();
        mtmd_input_text txt = {mtmd_default_marker(), strlen(mtmd_default_marker()), false, true};
        const mtmd_bitmap *bms[1] = {bm};
        if (mtmd_tokenize(ctx, chunks, &txt, bms, 1)) return fprintf(stderr, "mtmd_ref: tokenize failed\n"), 1;
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
            const mtmd_input_chunk *ch = mtmd_input_chunks_get(chunks, i);
            if (mtmd_input_chunk_get_type(ch) != MTMD_INPUT_CHUNK_TYPE_IMAGE) continue;
            for (int r = 0; r < repeat; r++) {
                struct timespec t0, t1, c0, c1;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
                if (mtmd_encode_chunk(ctx, ch)) return fprintf(stderr, "mtmd_ref: encode failed\n"), 1;
                clock_gettime(CLOCK_MONOTONIC, &t1);
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
                const size_t nt = mtmd_input_chunk_get_n_tokens(ch);
                const float *e = mtmd_get_output_embd(ctx);
                char path[4096];
                snprintf(path, sizeof path, "%s/img_%dx%d_s%llu.emb", argv[3], w, h, seed);
                FILE *f = fopen(path, "wb");
                if (!f || fwrite(e, sizeof(float), nt * (size_t)n_embd, f) != nt * (size_t)n_embd)
                    return fprintf(stderr, "mtmd_ref: cannot write %s\n", path), 1;
                fclose(f);
                printf("%s %zu tokens x %d, encoded in %.3f s (process CPU %.3f s)\n", path, nt, n_embd,
                       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
                       (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9);
                fflush(stdout);
            }
        }
        mtmd_input_chunks_free(chunks);
        mtmd_bitmap_free(bm);
        free(rgb);
    }
    mtmd_free(ctx);
    llama_model_free(model);
    return 0;
}
