/* image_gen.h: deterministic test images, encoded in memory with the same
 * libraries muser decodes with (libpng, libjpeg-turbo, libwebp). Shared by
 * tests/unit/test_image.c and tools/image_ref/gen_images.c, which writes
 * the same images to files for llama.cpp's reference preprocessing, so the
 * reference data in tests/data/image names images, not files. */
#ifndef MU_TEST_IMAGE_GEN_H
#define MU_TEST_IMAGE_GEN_H

#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <webp/encode.h>
#include <webp/mux.h>

/* sample c of pixel (x, y): a gradient, a pattern with edges (Lanczos
 * overshoot hits the clamps) and hashed noise, 0..maxv */
static inline unsigned ig_sample(int x, int y, int c, unsigned seed, unsigned maxv) {
    uint32_t h = (uint32_t)x * 73856093u ^ (uint32_t)y * 19349663u ^ (uint32_t)c * 83492791u ^ seed * 2654435761u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    unsigned v = (unsigned)(x * 5 + y * 3 + c * 60) % 256;
    if (((x / 9) + (y / 7)) % 3 == 0) v = (c == 1) ? 255 : 0;
    v = (v * 3 + (h % 256)) / 4;
    return maxv == 255 ? v : (unsigned)(((uint64_t)v * 257 + (h >> 16) % 257) * maxv / 65535);
}

typedef struct {
    unsigned char *p;
    size_t n, cap;
} ig_buf;

static inline void ig_put(ig_buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 1024;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static inline void ig_png_write(png_structp png, png_bytep d, size_t n) { ig_put(png_get_io_ptr(png), d, n); }
static inline void ig_png_flush(png_structp png) { (void)png; }

/* PNG of color type ct (PNG_COLOR_TYPE_*), bit depth, Adam7 when interlace */
static inline ig_buf ig_png(int w, int h, int ct, int depth, int interlace, unsigned seed) {
    ig_buf b = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) abort();
    png_set_write_fn(png, &b, ig_png_write, ig_png_flush);
    png_set_IHDR(png, info, w, h, depth, ct, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    int nc = ct == PNG_COLOR_TYPE_GRAY ? 1 : ct == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : ct == PNG_COLOR_TYPE_RGB ? 3
           : ct == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 1;
    if (ct == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[256];
        png_byte trns[256];
        int np = 1 << depth;
        for (int i = 0; i < np; i++) {
            pal[i].red = (png_byte)ig_sample(i, 0, 0, seed, 255);
            pal[i].green = (png_byte)ig_sample(i, 1, 1, seed, 255);
            pal[i].blue = (png_byte)ig_sample(i, 2, 2, seed, 255);
            trns[i] = (png_byte)(i * 37);
        }
        png_set_PLTE(png, info, pal, np);
        png_set_tRNS(png, info, trns, np, NULL);
    }
    png_write_info(png, info);
    if (interlace) png_set_interlace_handling(png);
    int passes = interlace ? 7 : 1;
    unsigned maxv = ct == PNG_COLOR_TYPE_PALETTE ? (1u << depth) - 1 : (1u << depth) - 1;
    size_t rowbytes = ((size_t)w * nc * depth + 7) / 8;
    unsigned char *row = calloc(rowbytes, 1);
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < h; y++) {
            memset(row, 0, rowbytes);
            for (int x = 0; x < w; x++)
                for (int c = 0; c < nc; c++) {
                    unsigned v = ig_sample(x, y, c, seed, maxv);
                    size_t bit = ((size_t)x * nc + c) * depth;
                    if (depth == 16) {
                        row[bit / 8] = (unsigned char)(v >> 8);
                        row[bit / 8 + 1] = (unsigned char)v;
                    } else if (depth == 8) {
                        row[bit / 8] = (unsigned char)v;
                    } else {
                        row[bit / 8] |= (unsigned char)(v << (8 - depth - bit % 8));
                    }
                }
            png_write_row(png, row);
        }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    free(row);
    return b;
}

/* JPEG: nc 1 (gray), 3 (YCbCr from RGB) or 4 (Adobe CMYK, or YCCK when
 * ycck); sub 1 = 4:4:4, 2 = 4:2:0; progressive */
static inline ig_buf ig_jpeg(int w, int h, int nc, int sub, int progressive, int ycck, int quality, unsigned seed) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *out = NULL;
    unsigned long outn = 0;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, &outn);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = nc;
    c.in_color_space = nc == 1 ? JCS_GRAYSCALE : nc == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    if (nc == 4) jpeg_set_colorspace(&c, ycck ? JCS_YCCK : JCS_CMYK);
    jpeg_set_quality(&c, quality, TRUE);
    if (nc >= 3) {
        c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = sub;
        for (int i = 1; i < c.num_components; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
        if (nc == 4) c.comp_info[3].h_samp_factor = c.comp_info[3].v_samp_factor = sub;
    }
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)w * nc);
    while (c.next_scanline < c.image_height) {
        int y = (int)c.next_scanline;
        for (int x = 0; x < w; x++)
            for (int k = 0; k < nc; k++) row[x * nc + k] = (unsigned char)ig_sample(x, y, k, seed, 255);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    ig_buf b = {0};
    ig_put(&b, out, outn);
    free(out);
    return b;
}

static inline unsigned char *ig_rgba(int w, int h, unsigned seed) {
    unsigned char *px = malloc((size_t)w * h * 4);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < 4; k++) px[((size_t)y * w + x) * 4 + k] = (unsigned char)ig_sample(x, y, k, seed, 255);
    return px;
}

/* WebP still: lossless or lossy (quality 80), with alpha when alpha */
static inline ig_buf ig_webp(int w, int h, int lossless, int alpha, unsigned seed) {
    unsigned char *px = ig_rgba(w, h, seed);
    if (!alpha)
        for (size_t i = 0; i < (size_t)w * h; i++) px[4 * i + 3] = 255;
    uint8_t *out = NULL;
    size_t n = lossless ? WebPEncodeLosslessRGBA(px, w, h, w * 4, &out) : WebPEncodeRGBA(px, w, h, w * 4, 80, &out);
    free(px);
    if (!n) abort();
    ig_buf b = {0};
    ig_put(&b, out, n);
    WebPFree(out);
    return b;
}

/* animated WebP of n_frames lossless frames (different seeds) */
static inline ig_buf ig_webp_anim(int w, int h, int n_frames, unsigned seed) {
    WebPAnimEncoderOptions ao;
    WebPConfig cfg;
    if (!WebPAnimEncoderOptionsInit(&ao) || !WebPConfigInit(&cfg)) abort();
    cfg.lossless = 1;
    WebPAnimEncoder *enc = WebPAnimEncoderNew(w, h, &ao);
    int ts = 0;
    for (int f = 0; f < n_frames; f++, ts += 100) {
        WebPPicture pic;
        if (!WebPPictureInit(&pic)) abort();
        pic.width = w;
        pic.height = h;
        pic.use_argb = 1;
        unsigned char *px = ig_rgba(w, h, seed + (unsigned)f);
        for (size_t i = 0; i < (size_t)w * h; i++) px[4 * i + 3] = 255;
        if (!WebPPictureImportRGBA(&pic, px, w * 4)) abort();
        free(px);
        if (!WebPAnimEncoderAdd(enc, &pic, ts, &cfg)) abort();
        WebPPictureFree(&pic);
    }
    WebPAnimEncoderAdd(enc, NULL, ts, NULL);
    WebPData d;
    WebPDataInit(&d);
    if (!WebPAnimEncoderAssemble(enc, &d)) abort();
    ig_buf b = {0};
    ig_put(&b, d.bytes, d.size);
    WebPDataClear(&d);
    WebPAnimEncoderDelete(enc);
    return b;
}

/* The named test images: every kind the decoder distinguishes, several
 * sizes and aspect ratios (one over the 4096-token limit). */
typedef struct {
    const char *name;
    ig_buf (*make)(void);
} ig_case;

static inline ig_buf ig_c_png_rgb_1x1(void) { return ig_png(1, 1, PNG_COLOR_TYPE_RGB, 8, 0, 1); }
static inline ig_buf ig_c_png_rgb_7x5(void) { return ig_png(7, 5, PNG_COLOR_TYPE_RGB, 8, 0, 2); }
static inline ig_buf ig_c_png_rgb_56x56(void) { return ig_png(56, 56, PNG_COLOR_TYPE_RGB, 8, 0, 3); }
static inline ig_buf ig_c_png_rgb_100x37(void) { return ig_png(100, 37, PNG_COLOR_TYPE_RGB, 8, 0, 4); }
static inline ig_buf ig_c_png_rgb_640x480(void) { return ig_png(640, 480, PNG_COLOR_TYPE_RGB, 8, 0, 5); }
static inline ig_buf ig_c_png_rgb_37x1000(void) { return ig_png(37, 1000, PNG_COLOR_TYPE_RGB, 8, 0, 6); }
static inline ig_buf ig_c_png_rgb_3000x20(void) { return ig_png(3000, 20, PNG_COLOR_TYPE_RGB, 8, 0, 7); }
static inline ig_buf ig_c_png_rgb_2400x1800(void) { return ig_png(2400, 1800, PNG_COLOR_TYPE_RGB, 8, 0, 8); }
static inline ig_buf ig_c_png_rgb_896x896(void) { return ig_png(896, 896, PNG_COLOR_TYPE_RGB, 8, 0, 9); }
static inline ig_buf ig_c_png_gray8(void) { return ig_png(90, 61, PNG_COLOR_TYPE_GRAY, 8, 0, 10); }
static inline ig_buf ig_c_png_gray1(void) { return ig_png(45, 30, PNG_COLOR_TYPE_GRAY, 1, 0, 11); }
static inline ig_buf ig_c_png_gray4(void) { return ig_png(45, 30, PNG_COLOR_TYPE_GRAY, 4, 0, 12); }
static inline ig_buf ig_c_png_gray_alpha(void) { return ig_png(64, 40, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, 13); }
static inline ig_buf ig_c_png_rgba(void) { return ig_png(77, 51, PNG_COLOR_TYPE_RGB_ALPHA, 8, 0, 14); }
static inline ig_buf ig_c_png_palette8(void) { return ig_png(50, 70, PNG_COLOR_TYPE_PALETTE, 8, 0, 15); }
static inline ig_buf ig_c_png_palette2(void) { return ig_png(33, 33, PNG_COLOR_TYPE_PALETTE, 2, 0, 16); }
static inline ig_buf ig_c_png_rgb16(void) { return ig_png(60, 45, PNG_COLOR_TYPE_RGB, 16, 0, 17); }
static inline ig_buf ig_c_png_rgba16(void) { return ig_png(60, 45, PNG_COLOR_TYPE_RGB_ALPHA, 16, 0, 18); }
static inline ig_buf ig_c_png_gray16(void) { return ig_png(60, 45, PNG_COLOR_TYPE_GRAY, 16, 0, 19); }
static inline ig_buf ig_c_png_interlaced(void) { return ig_png(83, 59, PNG_COLOR_TYPE_RGB, 8, 1, 20); }
static inline ig_buf ig_c_jpeg_420(void) { return ig_jpeg(120, 90, 3, 2, 0, 0, 90, 21); }
static inline ig_buf ig_c_jpeg_444(void) { return ig_jpeg(97, 61, 3, 1, 0, 0, 95, 22); }
static inline ig_buf ig_c_jpeg_progressive(void) { return ig_jpeg(120, 90, 3, 2, 1, 0, 85, 23); }
static inline ig_buf ig_c_jpeg_gray(void) { return ig_jpeg(70, 50, 1, 1, 0, 0, 90, 24); }
static inline ig_buf ig_c_jpeg_cmyk(void) { return ig_jpeg(64, 48, 4, 1, 0, 0, 90, 25); }
static inline ig_buf ig_c_jpeg_ycck(void) { return ig_jpeg(64, 48, 4, 1, 0, 1, 90, 26); }
static inline ig_buf ig_c_jpeg_1000x700(void) { return ig_jpeg(1000, 700, 3, 2, 0, 0, 90, 27); }
static inline ig_buf ig_c_webp_lossless(void) { return ig_webp(80, 60, 1, 0, 28); }
static inline ig_buf ig_c_webp_lossy(void) { return ig_webp(80, 60, 0, 0, 29); }
static inline ig_buf ig_c_webp_alpha(void) { return ig_webp(80, 60, 1, 1, 30); }
static inline ig_buf ig_c_webp_anim(void) { return ig_webp_anim(40, 30, 3, 31); }

static const ig_case ig_cases[] = {
    {"png_rgb_1x1", ig_c_png_rgb_1x1},         {"png_rgb_7x5", ig_c_png_rgb_7x5},
    {"png_rgb_56x56", ig_c_png_rgb_56x56},     {"png_rgb_100x37", ig_c_png_rgb_100x37},
    {"png_rgb_640x480", ig_c_png_rgb_640x480}, {"png_rgb_37x1000", ig_c_png_rgb_37x1000},
    {"png_rgb_3000x20", ig_c_png_rgb_3000x20}, {"png_rgb_2400x1800", ig_c_png_rgb_2400x1800},
    {"png_rgb_896x896", ig_c_png_rgb_896x896}, {"png_gray8", ig_c_png_gray8},
    {"png_gray1", ig_c_png_gray1},             {"png_gray4", ig_c_png_gray4},
    {"png_gray_alpha", ig_c_png_gray_alpha},   {"png_rgba", ig_c_png_rgba},
    {"png_palette8", ig_c_png_palette8},       {"png_palette2", ig_c_png_palette2},
    {"png_rgb16", ig_c_png_rgb16},             {"png_rgba16", ig_c_png_rgba16},
    {"png_gray16", ig_c_png_gray16},           {"png_interlaced", ig_c_png_interlaced},
    {"jpeg_420", ig_c_jpeg_420},               {"jpeg_444", ig_c_jpeg_444},
    {"jpeg_progressive", ig_c_jpeg_progressive}, {"jpeg_gray", ig_c_jpeg_gray},
    {"jpeg_cmyk", ig_c_jpeg_cmyk},             {"jpeg_ycck", ig_c_jpeg_ycck},
    {"jpeg_1000x700", ig_c_jpeg_1000x700},     {"webp_lossless", ig_c_webp_lossless},
    {"webp_lossy", ig_c_webp_lossy},           {"webp_alpha", ig_c_webp_alpha},
    {"webp_anim", ig_c_webp_anim},
};
#define IG_N_CASES (sizeof ig_cases / sizeof ig_cases[0])

#endif
