// mtmd_preproc_ref: dumps what llama.cpp's mtmd does to an image file before
// the vision tower sees it, for muse-glimmer projectors: the decoded RGB8
// pixels (stb_image, as mtmd-helper decodes) and the float CHW tensor that
// clip_image_batch_encode copies into inp_raw.
//
// Not part of muser: it is built outside the repo against llama.cpp's own
// mtmd-image.cpp (see tools/image_ref/build.sh and
// tests/data/image/README.md). Only the hyperparameters that clip.cpp sets
// for PROJECTOR_TYPE_MUSE_GLIMMER are filled in here; the resize, the token
// grid and the normalization are llama.cpp's code, compiled unchanged.
//
//   mtmd_preproc_ref IMAGE OUT_PREFIX [max_tokens]
// writes OUT_PREFIX.rgb (w*h*3 bytes), OUT_PREFIX.f32 (3*nx*ny floats,
// little-endian, channel-major) and prints "decoded W H resized NX NY".
// A decode failure prints "decode-error: <stb reason>" and exits 2.

#include "clip-model.h"
#include "mtmd-image.h"

#define STB_IMAGE_IMPLEMENTATION
#include "stb/stb_image.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static clip_hparams g_hp;

// clip.cpp owns the logger; its debug lines go nowhere here
static void log_none(enum ggml_log_level, const char *, void *) {}
struct clip_logger_state g_logger_state = {log_none, NULL};

const clip_hparams * clip_get_hparams(const struct clip_ctx *) { return &g_hp; }

// mtmd-image.cpp's asserts end here when they fire
extern "C" void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "abort: %s:%d %s\n", file, line, fmt);
    exit(3);
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s IMAGE OUT_PREFIX [max_tokens]\n", argv[0]);
        return 1;
    }
    FILE * f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    std::vector<unsigned char> buf;
    unsigned char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) buf.insert(buf.end(), tmp, tmp + n);
    fclose(f);

    // as clip.cpp: patch_size from the GGUF (14), n_merge = 2, Lanczos,
    // set_limit_image_tokens(1, 4096), mean = std = 0.5 from the GGUF
    g_hp.patch_size = 14;
    g_hp.image_size = 448;
    g_hp.n_merge = 2;
    g_hp.image_resize_algo = RESIZE_ALGO_LANCZOS;
    if (argc > 3) g_hp.custom_image_max_tokens = atoi(argv[3]);
    g_hp.set_limit_image_tokens(1, 4096);
    for (int i = 0; i < 3; i++) { g_hp.image_mean[i] = 0.5f; g_hp.image_std[i] = 0.5f; }

    int nx, ny, nc;
    unsigned char * data = stbi_load_from_memory(buf.data(), (int) buf.size(), &nx, &ny, &nc, 3);
    if (!data) {
        printf("decode-error: %s\n", stbi_failure_reason());
        return 2;
    }
    std::string prefix = argv[2];
    FILE * o = fopen((prefix + ".rgb").c_str(), "wb");
    fwrite(data, 1, (size_t) nx * ny * 3, o);
    fclose(o);

    clip_image_u8 img;
    img.set_size({nx, ny}, false);
    img.cpy_buf(std::vector<uint8_t>(data, data + (size_t) nx * ny * 3));
    stbi_image_free(data);

    mtmd_image_preprocessor_muse_glimmer pre(nullptr);
    mtmd_image_preproc_out out;
    try {
        out = pre.preprocess(img);
    } catch (const std::exception & e) {
        printf("preprocess-error: %s\n", e.what());
        return 2;
    }
    const clip_image_f32 & e = out.entries.at(0);
    const int w = e.nx(), h = e.ny(), np = w * h;
    const std::vector<float> & hwc = e.get_ro_buf();
    std::vector<float> chw((size_t) 3 * np);
    for (int i = 0; i < np; i++)
        for (int c = 0; c < 3; c++) chw[(size_t) c * np + i] = hwc[(size_t) 3 * i + c];
    o = fopen((prefix + ".f32").c_str(), "wb");
    fwrite(chw.data(), sizeof(float), chw.size(), o);
    fclose(o);
    printf("decoded %d %d resized %d %d\n", nx, ny, w, h);
    return 0;
}
