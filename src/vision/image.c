/* image.c: PNG, JPEG and WebP bytes to RGB8, and RGB8 to the normalized
 * CHW floats Muse Glimmer's vision tower reads.
 *
 * Owns: format sniffing, the three decoders' glue (libpng, libjpeg-turbo,
 * libwebp + demux for animations), the size limits, llama.cpp's token-grid
 * choice and its Pillow-compatible Lanczos resize, normalization.
 * Not here: the projector and encoder (the rest of src/vision), where the
 * bytes come from (src/http, cmd).
 *
 * Key choice: llama.cpp decodes with stb_image (3 channels requested) and
 * preprocesses with its own integer resampler; every step below is chosen
 * to give the same bytes and the same floats. PNG decoding is lossless, so
 * it is bit-identical to stb (CRC and Adler-32 are not checked, as stb does
 * not check them; 16-bit samples keep the high byte; alpha is dropped, not
 * composited). JPEG goes through libjpeg-turbo's accurate integer IDCT and
 * fancy upsampling, which can differ from stb's decoder by a unit in a
 * few pixels (tests/data/image/README.md has the measurement). WebP, which
 * stb does not read, is decoded as libwebp gives it. The resize and the
 * normalization are bit-identical to llama.cpp's (same double-precision
 * weights, same 22-bit fixed point, same float ops), checked against its
 * own code by tests/unit/test_image.c's reference data. */
#include "image.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h> /* before jpeglib.h, which needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include "../base/mem.h"

/* ---- limits ------------------------------------------------------------ */

static int image_check_size(const char *fmt, long w, long h, mu_err *err) {
    if (w <= 0 || h <= 0) return mu_fail(err, MU_E_ARG, "image: %s has no pixels: %ldx%ld", fmt, w, h);
    if (w > MU_IMAGE_MAX_SIDE || h > MU_IMAGE_MAX_SIDE || w * h > MU_IMAGE_MAX_PIXELS)
        return mu_fail(err, MU_E_ARG, "image: %s too large: %ldx%ld (at most %d per side and %ld pixels)", fmt, w,
                       h, MU_IMAGE_MAX_SIDE, (long)MU_IMAGE_MAX_PIXELS);
    return 0;
}

/* w, h already checked: w * h * 3 fits */
static unsigned char *image_pixels(int w, int h) { return malloc((size_t)w * (size_t)h * 3); }

/* ---- PNG (libpng) ------------------------------------------------------ */

typedef struct {
    jmp_buf jb;
    const unsigned char *p;
    size_t n, off;
    char msg[160];
} png_src;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    longjmp(s->jb, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) {}

static void png_on_read(png_structp png, png_bytep out, size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->n - s->off) png_error(png, "truncated");
    memcpy(out, s->p + s->off, n);
    s->off += n;
}

static int image_decode_png(const unsigned char *buf, size_t n, mu_image *out, mu_err *err) {
    png_src s = {.p = buf, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_on_error, png_on_warning);
    if (!png) return mu_fail(err, MU_E_NOMEM, "image: out of memory: PNG reader");
    png_infop info = png_create_info_struct(png);
    /* volatile: assigned between setjmp and a longjmp that may return to it */
    unsigned char *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return mu_fail(err, MU_E_NOMEM, "image: out of memory: PNG reader");
    }
    if (setjmp(s.jb)) {
        png_destroy_read_struct(&png, &info, NULL);
        free(rgb);
        free(rows);
        return mu_fail(err, MU_E_ARG, "image: PNG is corrupt: %s", s.msg);
    }
    png_set_read_fn(png, &s, png_on_read);
    /* stb_image checks neither chunk CRCs nor the zlib checksum */
    png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
#ifdef PNG_IGNORE_ADLER32
    png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
    png_set_user_limits(png, MU_IMAGE_MAX_SIDE, MU_IMAGE_MAX_SIDE);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int rc = image_check_size("PNG", (long)w, (long)h, err);
    if (rc) {
        png_destroy_read_struct(&png, &info, NULL);
        return rc;
    }
    int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (depth == 16) png_set_strip_16(png); /* the high byte, as stb's 16-to-8 */
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3) png_error(png, "unexpected row layout");
    rgb = image_pixels((int)w, (int)h);
    rows = malloc(sizeof(png_bytep) * h);
    if (!rgb || !rows) {
        png_destroy_read_struct(&png, &info, NULL);
        free(rgb);
        free(rows);
        return mu_fail(err, MU_E_NOMEM, "image: out of memory: %ux%u PNG", (unsigned)w, (unsigned)h);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    /* like stb, the chunks after the image data (and IEND) are not needed */
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    out->w = (int)w;
    out->h = (int)h;
    out->rgb = rgb;
    return 0;
}

/* ---- JPEG (libjpeg-turbo) ---------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int truncated;
} jpeg_err;

static void jpeg_on_error(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    longjmp(e->jb, 1);
}
static void jpeg_on_message(j_common_ptr c, int level) {
    /* level -1: a warning about corrupt data; a file cut short is refused
     * (libjpeg would pad it with gray), others are decoded as libjpeg can */
    jpeg_err *e = (jpeg_err *)c->err;
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) e->truncated = 1;
}

/* stb_image's rounded x * y / 255 for CMYK, so the pixels match its */
static unsigned char jpeg_mul255(unsigned x, unsigned y) {
    unsigned t = x * y + 128;
    return (unsigned char)((t + (t >> 8)) >> 8);
}

static int image_decode_jpeg(const unsigned char *buf, size_t n, mu_image *out, mu_err *err) {
    struct jpeg_decompress_struct c;
    jpeg_err je;
    unsigned char *volatile rgb = NULL;
    unsigned char *volatile row = NULL;
    c.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    je.pub.emit_message = jpeg_on_message;
    je.truncated = 0;
    if (setjmp(je.jb)) {
        char msg[JMSG_LENGTH_MAX];
        je.pub.format_message((j_common_ptr)&c, msg);
        jpeg_destroy_decompress(&c);
        free(rgb);
        free(row);
        return mu_fail(err, MU_E_ARG, "image: JPEG is corrupt: %s", msg);
    }
    jpeg_create_decompress(&c);
    /* a progressive file keeps every coefficient: bound what a request can make it hold */
    c.mem->max_memory_to_use = 1L << 30;
    if (n > (unsigned long)-1) n = (unsigned long)-1;
    jpeg_mem_src(&c, buf, (unsigned long)n);
    jpeg_read_header(&c, TRUE);
    int rc = image_check_size("JPEG", (long)c.image_width, (long)c.image_height, err);
    if (rc) {
        jpeg_destroy_decompress(&c);
        return rc;
    }
    int cmyk = 0;
    if (c.num_components == 4) {
        /* stb_image: Adobe transform 0 is CMYK, 2 is YCCK; a 4-component
         * file without an Adobe marker is YCbCr with a fourth channel it
         * ignores. libjpeg gives all three as CMYK once told what they are,
         * and stb's RGB is C*K (or 255-C with K = 255 for the last). */
        if (!c.saw_Adobe_marker) {
            c.jpeg_color_space = JCS_YCCK;
            cmyk = 2;
        } else {
            cmyk = 1;
        }
        c.out_color_space = JCS_CMYK;
    } else {
        c.out_color_space = JCS_RGB;
    }
    c.dct_method = JDCT_ISLOW;
    c.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&c);
    int w = (int)c.output_width, h = (int)c.output_height, nc = c.output_components;
    rgb = image_pixels(w, h);
    row = malloc((size_t)w * (size_t)nc);
    if (!rgb || !row) {
        jpeg_destroy_decompress(&c);
        free(rgb);
        free(row);
        return mu_fail(err, MU_E_NOMEM, "image: out of memory: %dx%d JPEG", w, h);
    }
    while (c.output_scanline < c.output_height && !je.truncated) {
        unsigned char *dst = rgb + (size_t)c.output_scanline * w * 3;
        JSAMPROW r = nc == 3 ? dst : row;
        jpeg_read_scanlines(&c, &r, 1);
        if (nc == 4) {
            for (int x = 0; x < w; x++) {
                const unsigned char *p = row + 4 * x;
                for (int k = 0; k < 3; k++)
                    dst[3 * x + k] = cmyk == 1 ? jpeg_mul255(p[k], p[3]) : (unsigned char)(255 - p[k]);
            }
        }
    }
    if (je.truncated) {
        jpeg_destroy_decompress(&c);
        free(rgb);
        free(row);
        return mu_fail(err, MU_E_ARG, "image: JPEG is truncated: %zu bytes", n);
    }
    jpeg_destroy_decompress(&c); /* no jpeg_finish_decompress: what follows the image is not needed */
    free(row);
    out->w = w;
    out->h = h;
    out->rgb = rgb;
    return 0;
}

/* ---- WebP (libwebp) ---------------------------------------------------- */

static const char *webp_status(VP8StatusCode st) {
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated";
    default: return "decoder error";
    }
}

static int image_decode_webp(const unsigned char *buf, size_t n, mu_image *out, mu_err *err) {
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(buf, n, &f);
    if (st != VP8_STATUS_OK) return mu_fail(err, MU_E_ARG, "image: WebP is corrupt: %s", webp_status(st));
    int rc = image_check_size("WebP", f.width, f.height, err);
    if (rc) return rc;
    unsigned char *rgb = image_pixels(f.width, f.height);
    if (!rgb) return mu_fail(err, MU_E_NOMEM, "image: out of memory: %dx%d WebP", f.width, f.height);
    if (!f.has_animation) {
        size_t stride = (size_t)f.width * 3;
        if (!WebPDecodeRGBInto(buf, n, rgb, stride * (size_t)f.height, (int)stride)) {
            free(rgb);
            return mu_fail(err, MU_E_ARG, "image: WebP is corrupt: its image data does not decode");
        }
    } else {
        /* the first frame on the canvas, alpha dropped as for stills */
        WebPData data = {buf, n};
        WebPAnimDecoderOptions o;
        if (!WebPAnimDecoderOptionsInit(&o)) {
            free(rgb);
            return mu_fail(err, MU_E_ARG, "image: WebP animation decoder unavailable");
        }
        o.color_mode = MODE_RGBA;
        o.use_threads = 0;
        WebPAnimDecoder *d = WebPAnimDecoderNew(&data, &o);
        WebPAnimInfo ai;
        uint8_t *frame = NULL;
        int ts = 0;
        if (!d || !WebPAnimDecoderGetInfo(d, &ai) || (int)ai.canvas_width != f.width ||
            (int)ai.canvas_height != f.height || !WebPAnimDecoderGetNext(d, &frame, &ts)) {
            WebPAnimDecoderDelete(d);
            free(rgb);
            return mu_fail(err, MU_E_ARG, "image: animated WebP is corrupt: its first frame does not decode");
        }
        size_t np = (size_t)f.width * (size_t)f.height;
        for (size_t i = 0; i < np; i++) memcpy(rgb + 3 * i, frame + 4 * i, 3);
        WebPAnimDecoderDelete(d);
    }
    out->w = f.width;
    out->h = f.height;
    out->rgb = rgb;
    return 0;
}

/* ---- entry ------------------------------------------------------------- */

static const char *image_other_format(const unsigned char *p, size_t n) {
    if (n >= 4 && !memcmp(p, "GIF8", 4)) return "GIF";
    if (n >= 2 && !memcmp(p, "BM", 2)) return "BMP";
    if (n >= 4 && (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4))) return "TIFF";
    if (n >= 4 && !memcmp(p, "8BPS", 4)) return "PSD";
    if (n >= 12 && !memcmp(p + 4, "ftyp", 4)) return "HEIF/AVIF";
    if (n >= 10 && !memcmp(p, "#?RADIANCE", 10)) return "HDR";
    if (n >= 2 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6') return "PNM";
    return NULL;
}

int mu_image_decode(const void *buf, size_t n, mu_image *out, mu_err *err) {
    const unsigned char *p = buf;
    if (!p || n == 0) return mu_fail(err, MU_E_ARG, "image: empty input: 0 bytes");
    mu_image img = {0};
    int rc;
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
        rc = image_decode_png(p, n, &img, err);
    else if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        rc = image_decode_jpeg(p, n, &img, err);
    else if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4))
        rc = image_decode_webp(p, n, &img, err);
    else {
        const char *other = image_other_format(p, n);
        if (other)
            return mu_fail(err, MU_E_ARG, "image: unsupported format: %s (PNG, JPEG and WebP are read)", other);
        return mu_fail(err, MU_E_ARG, "image: not a PNG, JPEG or WebP file: %zu bytes starting %02x %02x %02x %02x",
                       n, p[0], n > 1 ? p[1] : 0, n > 2 ? p[2] : 0, n > 3 ? p[3] : 0);
    }
    if (rc) return rc;
    *out = img;
    return 0;
}

void mu_image_free(mu_image *img) {
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

/* ---- token grid ---------------------------------------------------------- */

/* llama.cpp's muse-glimmer grid (transformers' aspect-ratio-preserving
 * size): the fractional cell counts, scaled down to max_tokens if over,
 * then the floor/ceil candidate closest to the aspect ratio (ties: more
 * tokens). Double precision, as there. */
int mu_image_grid(int w, int h, int cell, int max_tokens, int *gx, int *gy) {
    if (w <= 0 || h <= 0 || cell <= 0 || max_tokens <= 0) return -1;
    double i_nph = (double)h / cell, i_npw = (double)w / cell;
    const double ratio = i_nph > 0.0 ? i_npw / i_nph : 1.0;
    if (i_nph * i_npw > (double)max_tokens) {
        i_nph = sqrt((double)max_tokens / ratio);
        i_npw = i_nph * ratio;
    }
    const int hs[2] = {(int)floor(i_nph), (int)ceil(i_nph)};
    const int ws[2] = {(int)floor(i_npw), (int)ceil(i_npw)};
    const double target = (double)h / (double)w;
    int bh = -1, bw = -1;
    double bd = 0.0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int ph = hs[a], pw = ws[b];
            if (ph < 1 || pw < 1 || (long)ph * pw > max_tokens) continue;
            double d = fabs((double)ph / (double)pw - target);
            if (bh < 0 || d < bd || (d == bd && (long)ph * pw > (long)bh * bw)) {
                bh = ph;
                bw = pw;
                bd = d;
            }
        }
    if (bh < 0) { /* nothing fits under the cap: round, at least one */
        long rh = lround(i_nph), rw = lround(i_npw);
        bh = rh < 1 ? 1 : rh > INT32_MAX ? INT32_MAX : (int)rh;
        bw = rw < 1 ? 1 : rw > INT32_MAX ? INT32_MAX : (int)rw;
    }
    *gx = bw;
    *gy = bh;
    return 0;
}

/* ---- resize: Pillow's separable fixed-point filter, Lanczos-3 ------------- */

#define RS_BITS 22 /* fractional bits of the integer weights: 32 - 8 - 2 */

typedef struct {
    int ksize;
    int *bounds;     /* [out][2]: first input index, count */
    int32_t *weights; /* [out][ksize] */
} rs_coeffs;

static double rs_lanczos3(double x) {
    if (!(-3.0 <= x && x < 3.0)) return 0.0;
    double a = 1.0, b = 1.0;
    if (x != 0.0) {
        double v = x * 3.141592653589793238462643383279502884;
        a = sin(v) / v;
    }
    double x3 = x / 3.0;
    if (x3 != 0.0) {
        double v = x3 * 3.141592653589793238462643383279502884;
        b = sin(v) / v;
    }
    return a * b;
}

static int rs_coeffs_make(int in, int out, rs_coeffs *c) {
    double scale = (double)in / out, fscale = scale < 1.0 ? 1.0 : scale;
    double support = 3.0 * fscale;
    int ksize = (int)ceil(support) * 2 + 1;
    size_t nw;
    if (!mu_mul_ok((size_t)out, (size_t)ksize, &nw)) return -1;
    double *pre = malloc(nw * sizeof *pre);
    c->bounds = malloc((size_t)out * 2 * sizeof *c->bounds);
    c->weights = malloc(nw * sizeof *c->weights);
    c->ksize = ksize;
    if (!pre || !c->bounds || !c->weights) {
        free(pre);
        return -1;
    }
    for (int xx = 0; xx < out; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / fscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in) xmax = in;
        xmax -= xmin;
        double *k = pre + (size_t)xx * ksize;
        int x;
        for (x = 0; x < xmax; x++) {
            double w = rs_lanczos3((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) k[x] /= ww;
        for (; x < ksize; x++) k[x] = 0;
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax;
    }
    const double fxp = ldexp(1.0, RS_BITS);
    /* +-0.5 then truncation toward zero, as Pillow */
    for (size_t i = 0; i < nw; i++) c->weights[i] = (int32_t)(pre[i] * fxp + (pre[i] < 0 ? -0.5 : 0.5));
    free(pre);
    return 0;
}

static void rs_coeffs_free(rs_coeffs *c) {
    free(c->bounds);
    free(c->weights);
}

static unsigned char rs_clip8(int32_t v) { return v < 0 ? 0 : v > 255 ? 255 : (unsigned char)v; }

/* [ny][in_nx][3] -> [ny][out_nx][3] */
static void rs_horizontal(const unsigned char *src, int in_nx, int ny, int out_nx, const rs_coeffs *c,
                          unsigned char *dst) {
    for (int y = 0; y < ny; y++) {
        const unsigned char *row = src + (size_t)y * in_nx * 3;
        unsigned char *o = dst + (size_t)y * out_nx * 3;
        for (int xx = 0; xx < out_nx; xx++) {
            int xmin = c->bounds[2 * xx], xcnt = c->bounds[2 * xx + 1];
            const int32_t *k = c->weights + (size_t)xx * c->ksize;
            const unsigned char *p = row + (size_t)xmin * 3;
            int32_t s0 = 1 << (RS_BITS - 1), s1 = s0, s2 = s0;
            for (int x = 0; x < xcnt; x++, p += 3) {
                s0 += p[0] * k[x];
                s1 += p[1] * k[x];
                s2 += p[2] * k[x];
            }
            o[3 * xx] = rs_clip8(s0 >> RS_BITS);
            o[3 * xx + 1] = rs_clip8(s1 >> RS_BITS);
            o[3 * xx + 2] = rs_clip8(s2 >> RS_BITS);
        }
    }
}

/* [in_ny][nx][3] -> [out_ny][nx][3]; acc: nx * 3 ints */
static void rs_vertical(const unsigned char *src, int nx, int out_ny, const rs_coeffs *c, int32_t *acc,
                        unsigned char *dst) {
    size_t n = (size_t)nx * 3;
    for (int yy = 0; yy < out_ny; yy++) {
        int ymin = c->bounds[2 * yy], ycnt = c->bounds[2 * yy + 1];
        const int32_t *k = c->weights + (size_t)yy * c->ksize;
        for (size_t i = 0; i < n; i++) acc[i] = 1 << (RS_BITS - 1);
        for (int y = 0; y < ycnt; y++) {
            const unsigned char *row = src + (size_t)(ymin + y) * n;
            int32_t w = k[y];
            for (size_t i = 0; i < n; i++) acc[i] += row[i] * w;
        }
        unsigned char *o = dst + (size_t)yy * n;
        for (size_t i = 0; i < n; i++) o[i] = rs_clip8(acc[i] >> RS_BITS);
    }
}

/* img stretched to tw x th: a new malloc'd RGB8 buffer, or NULL (memory) */
static unsigned char *rs_resize(const mu_image *img, int tw, int th) {
    int sw = img->w, sh = img->h;
    size_t n_out = (size_t)tw * th * 3;
    unsigned char *out = malloc(n_out);
    if (!out) return NULL;
    if (tw == sw && th == sh) {
        memcpy(out, img->rgb, n_out);
        return out;
    }
    rs_coeffs ch = {0}, cv = {0};
    unsigned char *tmp = NULL;
    int32_t *acc = NULL;
    int ok = 1;
    if (tw != sw) ok = ok && !rs_coeffs_make(sw, tw, &ch);
    if (th != sh) ok = ok && !rs_coeffs_make(sh, th, &cv);
    const unsigned char *src = img->rgb;
    if (ok && tw != sw && th != sh) {
        size_t nt;
        ok = mu_mul_ok((size_t)tw * 3, (size_t)sh, &nt) && (tmp = malloc(nt)) != NULL;
        if (ok) {
            rs_horizontal(src, sw, sh, tw, &ch, tmp);
            src = tmp;
        }
    } else if (ok && tw != sw) {
        rs_horizontal(src, sw, sh, tw, &ch, out);
    }
    if (ok && th != sh) {
        ok = (acc = malloc((size_t)tw * 3 * sizeof *acc)) != NULL;
        if (ok) rs_vertical(src, tw, th, &cv, acc, out);
    }
    rs_coeffs_free(&ch);
    rs_coeffs_free(&cv);
    free(tmp);
    free(acc);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- preprocess ---------------------------------------------------------- */

int mu_image_preprocess(const mu_image *img, const mu_image_pp *pp, float **chw, int *nx, int *ny,
                        mu_err *err) {
    if (!img || !img->rgb || img->w <= 0 || img->h <= 0 || img->w > MU_IMAGE_MAX_SIDE || img->h > MU_IMAGE_MAX_SIDE)
        return mu_fail(err, MU_E_ARG, "image: no pixels to preprocess: %dx%d", img ? img->w : 0, img ? img->h : 0);
    if (pp->patch_size <= 0 || pp->merge <= 0 || pp->max_tokens <= 0 || pp->patch_size > 4096 || pp->merge > 64)
        return mu_fail(err, MU_E_ARG, "image: preprocessing parameters out of range: patch %d, merge %d, max tokens %d",
                       pp->patch_size, pp->merge, pp->max_tokens);
    for (int c = 0; c < 3; c++)
        if (!isfinite(pp->mean[c]) || !isfinite(pp->std[c]) || pp->std[c] == 0.0f)
            return mu_fail(err, MU_E_ARG, "image: normalization out of range: mean %g, std %g", pp->mean[c], pp->std[c]);
    int cell = pp->patch_size * pp->merge, gx, gy;
    mu_image_grid(img->w, img->h, cell, pp->max_tokens, &gx, &gy);
    long tw = (long)gx * cell, th = (long)gy * cell;
    if (tw > MU_IMAGE_MAX_SIDE || th > MU_IMAGE_MAX_SIDE)
        return mu_fail(err, MU_E_ARG, "image: resize target out of range: %ldx%ld for a %dx%d image (at most %d per side)",
                       tw, th, img->w, img->h, MU_IMAGE_MAX_SIDE);
    size_t np = (size_t)tw * (size_t)th, nf;
    if (!mu_mul_ok(np, 3 * sizeof(float), &nf))
        return mu_fail(err, MU_E_NOMEM, "image: out of memory: %ldx%ld tensor", tw, th);
    unsigned char *rs = rs_resize(img, (int)tw, (int)th);
    float *f = rs ? malloc(nf) : NULL;
    if (!f) {
        free(rs);
        return mu_fail(err, MU_E_NOMEM, "image: out of memory: resizing %dx%d to %ldx%ld", img->w, img->h, tw, th);
    }
    /* llama.cpp: u8 / 255 in float, then (x - mean) / std; HWC to CHW */
    for (size_t i = 0; i < np; i++)
        for (int c = 0; c < 3; c++) {
            float v = (float)rs[3 * i + c] / 255.0f;
            f[(size_t)c * np + i] = (v - pp->mean[c]) / pp->std[c];
        }
    free(rs);
    *chw = f;
    *nx = (int)tw;
    *ny = (int)th;
    return 0;
}
