/* test_image.c: src/vision/image.c against llama.cpp's own preprocessing.
 * The images of image_gen.h (every PNG kind, JPEG kinds, WebP stills and an
 * animation; sizes from 1x1 to past the 4096-token limit, wide and tall)
 * are decoded and preprocessed here and compared with
 * tests/data/image/ref.tsv, which tools/image_ref/make_ref.sh made with
 * stb_image and mtmd's muse-glimmer preprocessor: PNG pixels and every
 * float tensor bit for bit (SHA-256); JPEG pixels within the stated
 * difference of two decoders, and the floats bit for bit from stb's own
 * pixels. An animated PNG gives its default image. Then the odd inputs: empty, foreign formats, every truncation
 * and byte flip of small files (an error or an image, never a crash),
 * oversized headers, and the grid rule on its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "../../src/vision/image.h"
#include "unit/image_gen.h"

#define DATA "tests/data/image/"

/* the largest difference between libjpeg-turbo's and stb_image's pixels,
 * in at most a tenth of the bytes (measured: README.md there) */
#define JPEG_MAX_DIFF 3

static const mu_image_pp glimmer_pp = {
    .patch_size = 14, .merge = 2, .min_tokens = 1, .max_tokens = 4096,
    .mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}, .image_size = 448,
};

static void sha256_hex(const void *p, size_t n, char out[65]) {
    unsigned char md[32];
    unsigned int ml = 0;
    assert_true(EVP_Digest(p, n, md, &ml, EVP_sha256(), NULL));
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", md[i]);
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    p[len] = 0;
    *n = (size_t)len;
    return p;
}

static const ig_case *find_case(const char *name) {
    for (size_t i = 0; i < IG_N_CASES; i++)
        if (!strcmp(ig_cases[i].name, name)) return &ig_cases[i];
    return NULL;
}

/* ---- against llama.cpp ---------------------------------------------------- */

static void test_reference(void **state) {
    size_t n;
    char *tsv = (char *)read_file(DATA "ref.tsv", &n);
    if (!tsv) fail_msg("cannot open " DATA "ref.tsv (run the tests from the repository root)");
    int n_lines = 0, n_png = 0, n_jpeg = 0, n_webp = 0;
    for (char *save = NULL, *line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') continue;
        char name[64], result[16], rest[256];
        int max_tokens;
        assert_int_equal(sscanf(line, "%63s %d %15s %255[^\n]", name, &max_tokens, result, rest), 4);
        const ig_case *c = find_case(name);
        if (!c) fail_msg("ref.tsv names an image image_gen.h does not make: %s", name);
        n_lines++;
        ig_buf b = c->make();
        mu_image img;
        mu_err err = {0};
        int rc = mu_image_decode(b.p, b.n, &img, &err);
        if (!strcmp(result, "error")) {
            /* stb_image does not read WebP; muser does (libwebp) */
            assert_true(!strncmp(name, "webp_", 5));
            assert_int_equal(rc, 0);
            assert_true(img.w > 0 && img.h > 0);
            n_webp++;
            mu_image_free(&img);
            free(b.p);
            continue;
        }
        int w, h, nx, ny;
        char rgb_sha[65], f32_sha[65];
        assert_int_equal(sscanf(rest, "%d %d %d %d %64s %64s", &w, &h, &nx, &ny, rgb_sha, f32_sha), 6);
        if (rc) fail_msg("%s: %s", name, err.msg);
        assert_int_equal(img.w, w);
        assert_int_equal(img.h, h);
        char got[65];
        sha256_hex(img.rgb, (size_t)w * h * 3, got);
        mu_image_pp pp = glimmer_pp;
        pp.max_tokens = max_tokens;
        int exact = 1; /* whether the floats must match llama.cpp's bit for bit */
        if (!strncmp(name, "png_", 4)) {
            if (strcmp(got, rgb_sha)) fail_msg("%s: decoded pixels differ from stb_image's", name);
            n_png++;
        } else {
            /* two JPEG decoders: libjpeg-turbo's against stb_image's; the
             * floats are then checked from stb's own pixels where the data
             * keeps them (the small images), the grid alone otherwise */
            char path[256];
            snprintf(path, sizeof path, DATA "%s.stb.rgb", name);
            size_t sn;
            unsigned char *stb = read_file(path, &sn);
            exact = stb != NULL;
            if (stb) {
                assert_int_equal(sn, (size_t)w * h * 3);
                int maxd = 0;
                size_t nd = 0;
                for (size_t i = 0; i < sn; i++) {
                    int d = abs((int)stb[i] - (int)img.rgb[i]);
                    if (d > maxd) maxd = d;
                    nd += d != 0;
                }
                /* the bound measured when the data was made: tests/data/image/README.md */
                if (maxd > JPEG_MAX_DIFF || nd * 10 > sn)
                    fail_msg("%s: JPEG pixels differ from stb's by up to %d (%zu of %zu bytes)", name, maxd, nd, sn);
                free(img.rgb);
                img.rgb = stb;
            }
            n_jpeg++;
        }
        float *chw = NULL;
        rc = mu_image_preprocess(&img, &pp, &chw, &nx, &ny, &err);
        if (rc) fail_msg("%s: %s", name, err.msg);
        int rnx, rny;
        assert_int_equal(sscanf(rest, "%*d %*d %d %d", &rnx, &rny), 2);
        assert_int_equal(nx, rnx);
        assert_int_equal(ny, rny);
        assert_int_equal(nx % 28, 0);
        assert_int_equal(ny % 28, 0);
        sha256_hex(chw, (size_t)nx * ny * 3 * sizeof(float), got);
        if (exact && strcmp(got, f32_sha))
            fail_msg("%s (max %d tokens): preprocessed floats differ from llama.cpp's", name, max_tokens);
        free(chw);
        mu_image_free(&img);
        free(b.p);
    }
    free(tsv);
    /* the reference covers what it says it covers */
    assert_true(n_lines >= 30);
    assert_true(n_png >= 20);
    assert_true(n_jpeg >= 6);
    assert_int_equal(n_webp, 4);
}

/* ---- decoding details ------------------------------------------------------ */

static void test_webp(void **state) {
    /* lossless WebP decodes to exactly the pixels encoded (alpha dropped) */
    ig_buf b = ig_webp(80, 60, 1, 1, 30);
    mu_image img;
    mu_err err;
    assert_int_equal(mu_image_decode(b.p, b.n, &img, &err), 0);
    assert_int_equal(img.w, 80);
    assert_int_equal(img.h, 60);
    unsigned char *px = ig_rgba(80, 60, 30);
    size_t bad = 0;
    for (size_t i = 0; i < 80 * 60; i++)
        for (int k = 0; k < 3; k++)
            /* libwebp's lossless encoder may change the colour of fully transparent pixels */
            bad += px[4 * i + 3] != 0 && px[4 * i + k] != img.rgb[3 * i + k];
    assert_int_equal(bad, 0);
    free(px);
    mu_image_free(&img);
    free(b.p);
    /* an animation gives its first frame */
    b = ig_webp_anim(40, 30, 3, 31);
    assert_int_equal(mu_image_decode(b.p, b.n, &img, &err), 0);
    px = ig_rgba(40, 30, 31);
    for (size_t i = 0; i < 40 * 30; i++)
        for (int k = 0; k < 3; k++) assert_int_equal(px[4 * i + k], img.rgb[3 * i + k]);
    free(px);
    mu_image_free(&img);
    free(b.p);
}

static void test_png_kinds(void **state) {
    /* gray is replicated, 16-bit keeps the high byte, alpha is dropped */
    ig_buf b = ig_png(60, 45, PNG_COLOR_TYPE_GRAY, 16, 0, 19);
    mu_image img;
    mu_err err;
    assert_int_equal(mu_image_decode(b.p, b.n, &img, &err), 0);
    for (int y = 0; y < 45; y++)
        for (int x = 0; x < 60; x++) {
            unsigned v = ig_sample(x, y, 0, 19, 65535) >> 8;
            const unsigned char *p = img.rgb + ((size_t)y * 60 + x) * 3;
            assert_int_equal(p[0], v);
            assert_int_equal(p[1], v);
            assert_int_equal(p[2], v);
        }
    mu_image_free(&img);
    free(b.p);
    /* as stb_image: a wrong chunk CRC and a missing IEND change nothing */
    b = ig_png(60, 45, PNG_COLOR_TYPE_GRAY, 16, 0, 19);
    mu_image again;
    b.p[29] ^= 0xff;   /* IHDR's CRC (8 signature + 8 head + 13 data) */
    b.n -= 12;         /* the IEND chunk */
    assert_int_equal(mu_image_decode(b.p, b.n, &again, &err), 0);
    assert_int_equal(again.w, 60);
    for (int x = 0; x < 60; x++) assert_int_equal(again.rgb[3 * (60 * 44 + x)], ig_sample(x, 44, 0, 19, 65535) >> 8);
    mu_image_free(&again);
    free(b.p);
    b = ig_png(77, 51, PNG_COLOR_TYPE_RGB_ALPHA, 8, 0, 14);
    assert_int_equal(mu_image_decode(b.p, b.n, &img, &err), 0);
    for (int k = 0; k < 3; k++) assert_int_equal(img.rgb[3 * 5 + k], ig_sample(5, 0, k, 14, 255));
    mu_image_free(&img);
    mu_image_free(NULL);
    free(b.p);
}

/* An animated PNG (APNG): acTL and fcTL before the image data, a second
 * frame in fdAT after it. Those chunks are ancillary, so libpng skips them
 * as stb_image does: the default image (IDAT) is what comes out. */
/* PNG's CRC-32 (ISO 3309), bit by bit */
static uint32_t crc32_png(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    return ~crc;
}

static void chunk_put(ig_buf *b, const char *type, const unsigned char *d, uint32_t n) {
    unsigned char h[8] = {n >> 24, n >> 16, n >> 8, n, type[0], type[1], type[2], type[3]};
    ig_put(b, h, 8);
    if (n) ig_put(b, d, n);
    uint32_t crc = crc32_png(0, h + 4, 4);
    crc = crc32_png(crc, d, n);
    unsigned char c[4] = {crc >> 24, crc >> 16, crc >> 8, crc};
    ig_put(b, c, 4);
}

static void test_apng(void **state) {
    ig_buf still = ig_png(20, 10, PNG_COLOR_TYPE_RGB, 8, 0, 50);
    ig_buf other = ig_png(20, 10, PNG_COLOR_TYPE_RGB, 8, 0, 51);
    /* the second frame's data: the other image's IDAT behind a sequence number */
    size_t off = 8 + 25, idat_n = 0;
    const unsigned char *idat = NULL;
    while (off + 12 <= other.n) {
        uint32_t n = (uint32_t)other.p[off] << 24 | other.p[off + 1] << 16 | other.p[off + 2] << 8 | other.p[off + 3];
        if (!memcmp(other.p + off + 4, "IDAT", 4)) {
            idat = other.p + off + 8;
            idat_n = n;
            break;
        }
        off += 12 + n;
    }
    assert_non_null(idat);
    ig_buf a = {0};
    ig_put(&a, still.p, 8 + 25); /* signature, IHDR */
    unsigned char actl[8] = {0, 0, 0, 2, 0, 0, 0, 0};
    chunk_put(&a, "acTL", actl, 8);
    unsigned char fctl[26] = {0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 10, 0, 0};
    chunk_put(&a, "fcTL", fctl, 26);
    ig_put(&a, still.p + 8 + 25, still.n - 8 - 25 - 12); /* IDAT... */
    fctl[3] = 1;
    chunk_put(&a, "fcTL", fctl, 26);
    unsigned char *fd = malloc(4 + idat_n);
    memcpy(fd, "\0\0\0\2", 4);
    memcpy(fd + 4, idat, idat_n);
    chunk_put(&a, "fdAT", fd, (uint32_t)(4 + idat_n));
    free(fd);
    ig_put(&a, still.p + still.n - 12, 12); /* IEND */
    mu_image x, y;
    mu_err err;
    assert_int_equal(mu_image_decode(still.p, still.n, &x, &err), 0);
    if (mu_image_decode(a.p, a.n, &y, &err)) fail_msg("APNG: %s", err.msg);
    assert_int_equal(y.w, 20);
    assert_memory_equal(x.rgb, y.rgb, 20 * 10 * 3);
    mu_image_free(&x);
    mu_image_free(&y);
    free(a.p);
    free(still.p);
    free(other.p);
}

/* ---- odd inputs ------------------------------------------------------------ */

static void expect_error(const void *p, size_t n, const char *needle) {
    mu_image img = {7, 7, (unsigned char *)"untouched"};
    mu_err err = {0};
    int rc = mu_image_decode(p, n, &img, &err);
    assert_true(rc < 0);
    assert_int_equal(img.w, 7); /* *out is written only on success */
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" does not say \"%s\"", err.msg, needle);
    assert_non_null(strchr(err.msg, ':'));
    assert_null(strchr(err.msg, '\n'));
}

static void test_bad_inputs(void **state) {
    expect_error("", 0, "empty input");
    expect_error(NULL, 5, "empty input");
    expect_error("GIF89a\1\0\1\0", 10, "unsupported format: GIF");
    expect_error("BM\0\0\0\0\0\0", 8, "unsupported format: BMP");
    expect_error("hello world", 11, "not a PNG, JPEG or WebP file");
    expect_error("\x89PNG\r\n\x1a\n", 8, "PNG is corrupt");
    expect_error("\xff\xd8\xff", 3, "JPEG is corrupt");
    expect_error("RIFF\0\0\0\0WEBP", 12, "WebP is corrupt");
    /* a PNG header that claims more pixels than the limit, before any allocation */
    ig_buf b = ig_png(8, 8, PNG_COLOR_TYPE_RGB, 8, 0, 1);
    unsigned char *big = malloc(b.n);
    memcpy(big, b.p, b.n);
    big[16] = 0x00, big[17] = 0x01, big[18] = 0x11, big[19] = 0x70; /* width 70000 */
    expect_error(big, b.n, "PNG is corrupt"); /* libpng's own limit (user limits) */
    big[16] = 0x00, big[17] = 0x00, big[18] = 0x40, big[19] = 0x00; /* 16384 x 16384 */
    big[20] = 0x00, big[21] = 0x00, big[22] = 0x40, big[23] = 0x00;
    expect_error(big, b.n, "too large");
    free(big);
    free(b.p);
}

/* every truncation and every byte flip of a small file of each format:
 * an error or an image, never a crash; truncations of PNG and JPEG inside
 * the image data are errors */
static void test_truncate_flip(void **state) {
    ig_buf bufs[] = {
        ig_png(9, 7, PNG_COLOR_TYPE_RGB, 8, 0, 40), ig_png(9, 7, PNG_COLOR_TYPE_PALETTE, 4, 1, 41),
        ig_jpeg(17, 9, 3, 2, 0, 0, 80, 42), ig_jpeg(17, 9, 3, 2, 1, 0, 80, 43),
        ig_jpeg(16, 8, 4, 1, 0, 0, 80, 44), ig_webp(9, 7, 0, 1, 45),
        ig_webp(9, 7, 1, 0, 46), ig_webp_anim(8, 6, 2, 47),
    };
    size_t n_ok = 0, n_err = 0;
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) {
        ig_buf b = bufs[k];
        unsigned char *p = malloc(b.n);
        for (size_t cut = 0; cut < b.n; cut++) {
            memcpy(p, b.p, cut);
            mu_image img;
            mu_err err;
            int rc = mu_image_decode(p, cut, &img, &err);
            if (rc == 0) {
                n_ok++;
                mu_image_free(&img);
            } else {
                n_err++;
                assert_non_null(strstr(err.msg, "image: "));
            }
        }
        for (size_t i = 0; i < b.n; i++) {
            memcpy(p, b.p, b.n);
            p[i] ^= (unsigned char)(0x5a + i);
            mu_image img;
            mu_err err;
            if (mu_image_decode(p, b.n, &img, &err) == 0) {
                float *chw = NULL;
                int nx, ny;
                assert_int_equal(mu_image_preprocess(&img, &glimmer_pp, &chw, &nx, &ny, &err), 0);
                free(chw);
                mu_image_free(&img);
            }
        }
        free(p);
        free(b.p);
    }
    assert_true(n_err > 0);
    (void)n_ok;
}

/* ---- the grid rule and preprocessing arguments ------------------------------ */

static void test_grid(void **state) {
    int gx, gy;
    assert_int_equal(mu_image_grid(896, 896, 28, 4096, &gx, &gy), 0);
    assert_int_equal(gx, 32);
    assert_int_equal(gy, 32);
    /* 4096 tokens exactly and one more: the cap scales the grid */
    assert_int_equal(mu_image_grid(1792, 1792, 28, 4096, &gx, &gy), 0);
    assert_true(gx == 64 && gy == 64);
    assert_int_equal(mu_image_grid(1793, 1793, 28, 4096, &gx, &gy), 0);
    assert_true(gx * gy <= 4096);
    /* every size: a positive grid within the cap unless the aspect ratio
     * forces llama.cpp's fallback (one row or column) */
    for (int w = 1; w < 4000; w += 37)
        for (int h = 1; h < 4000; h += 41) {
            assert_int_equal(mu_image_grid(w, h, 28, 4096, &gx, &gy), 0);
            assert_true(gx >= 1 && gy >= 1);
            assert_true(gx * gy <= 4096 || gx == 1 || gy == 1);
        }
    assert_int_equal(mu_image_grid(0, 5, 28, 4096, &gx, &gy), -1);
    assert_int_equal(mu_image_grid(5, 5, 0, 4096, &gx, &gy), -1);

    unsigned char px[3] = {1, 2, 3};
    mu_image img = {1, 1, px};
    mu_image_pp pp = glimmer_pp;
    float *chw;
    int nx, ny;
    mu_err err;
    pp.std[1] = 0.0f;
    assert_int_equal(mu_image_preprocess(&img, &pp, &chw, &nx, &ny, &err), MU_E_ARG);
    pp = glimmer_pp;
    pp.max_tokens = 0;
    assert_int_equal(mu_image_preprocess(&img, &pp, &chw, &nx, &ny, &err), MU_E_ARG);
    /* a 1-pixel-tall, very wide image: the resize target passes 65536 columns */
    unsigned char *row = calloc(65536 * 3, 1);
    img = (mu_image){65536, 1, row};
    pp = glimmer_pp;
    pp.max_tokens = 4;
    assert_int_equal(mu_image_preprocess(&img, &pp, &chw, &nx, &ny, &err), 0); /* 1 x 512 cells: 14336 px */
    assert_int_equal(nx, 512 * 28);
    free(chw);
    free(row);
    /* a uniform image normalizes to (v/255 - 0.5) / 0.5 everywhere */
    unsigned char *u = malloc(50 * 30 * 3);
    memset(u, 200, 50 * 30 * 3);
    img = (mu_image){50, 30, u};
    assert_int_equal(mu_image_preprocess(&img, &glimmer_pp, &chw, &nx, &ny, &err), 0);
    for (int i = 0; i < nx * ny * 3; i++) assert_true(chw[i] == (200.0f / 255.0f - 0.5f) / 0.5f);
    free(chw);
    free(u);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference), cmocka_unit_test(test_webp),
        cmocka_unit_test(test_png_kinds), cmocka_unit_test(test_apng), cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_truncate_flip), cmocka_unit_test(test_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
