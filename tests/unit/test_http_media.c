/* test_http_media.c: reading images out of request bodies (src/http/api_media.c):
 * base64 against RFC 4648's vectors and its failure modes (bad
 * characters, misplaced or excess padding, a lone trailing character),
 * data URLs and bare base64 in image_url.url, remote and file URLs refused
 * with their reason, the per-request image cap, the marker count, and
 * OpenAI part arrays flattened as llama.cpp flattens them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/http/api.h"

static void b64_ok(const char *in, const char *want) {
    unsigned char *out = NULL;
    size_t n = 0, bad = 0;
    assert_int_equal(api_base64_decode(in, strlen(in), &out, &n, &bad), 0);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(out, want, n);
    free(out);
}

static void b64_bad(const char *in, size_t at) {
    unsigned char *out = NULL;
    size_t n = 0, bad = 99;
    assert_int_equal(api_base64_decode(in, strlen(in), &out, &n, &bad), MU_E_ARG);
    assert_null(out);
    assert_int_equal(bad, at);
}

static void test_base64(void **st) {
    (void)st;
    /* RFC 4648 section 10 */
    b64_ok("", "");
    b64_ok("Zg==", "f");
    b64_ok("Zm8=", "fo");
    b64_ok("Zm9v", "foo");
    b64_ok("Zm9vYg==", "foob");
    b64_ok("Zm9vYmE=", "fooba");
    b64_ok("Zm9vYmFy", "foobar");
    /* padding may be left out; line breaks and spaces are skipped */
    b64_ok("Zm9vYg", "foob");
    b64_ok("Zm9v\r\nYmFy\n", "foobar");
    b64_ok(" Zm 9v ", "foo");
    b64_bad("Zm9*", 3);       /* not in the alphabet */
    b64_bad("Zm9v-_", 4);     /* the URL-safe alphabet is not standard base64 */
    b64_bad("Z===", 1);       /* padding after one character */
    b64_bad("Zg==Zg==", 4);   /* data after padding */
    b64_bad("Zg===", 4);      /* three pad characters */
    b64_bad("Zm9vY", 5);      /* a lone sextet at the end */
    b64_ok("Zm8", "fo");      /* three characters without padding: two bytes */
}

static void add_bad(const char *s, bool url, const char *needle) {
    api_images im = {0};
    char msg[320];
    assert_int_not_equal(api_image_add(&im, s, strlen(s), url, "f", msg, sizeof msg), 0);
    assert_int_equal(im.n, 0);
    if (!strstr(msg, needle)) fail_msg("\"%s\" does not say \"%s\"", msg, needle);
    assert_non_null(strstr(msg, "field 'f': "));
    api_images_free(&im);
}

static void test_image_refs(void **st) {
    (void)st;
    api_images im = {0};
    char msg[320];
    assert_int_equal(api_image_add(&im, "data:image/png;base64,aGk=", 26, true, "f", msg, sizeof msg), 0);
    assert_int_equal(api_image_add(&im, "DATA:image/jpeg;BASE64,aGk=", 27, true, "f", msg, sizeof msg), 0);
    assert_int_equal(api_image_add(&im, "aGk=", 4, true, "f", msg, sizeof msg), 0); /* bare base64, as llama.cpp */
    assert_int_equal(api_image_add(&im, "aGk=", 4, false, "f", msg, sizeof msg), 0);
    assert_int_equal(im.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(im.v[i].size, 2);
        assert_memory_equal(im.v[i].data, "hi", 2);
    }
    api_images_free(&im);
    api_images_free(&im); /* twice is fine */
    add_bad("https://example.com/a.png", true, "remote image URLs are not fetched");
    add_bad("HTTP://example.com/a.png", true, "not fetched");
    add_bad("file:///etc/passwd", true, "file URLs are not read");
    add_bad("data:text/plain;base64,aGk=", true, "not an image data URL: data:text/plain;base64");
    add_bad("data:image/png,aGk=", true, "must be base64-encoded");
    add_bad("data:image/png;base64", true, "must be base64-encoded");
    add_bad("data:image/png;base64,", true, "the image is empty");
    add_bad("data:image/png;base64,a", true, "ends mid-group");
    add_bad("https://x", false, "invalid base64: character 0x3a at offset 5"); /* not a URL where base64 is due */
    add_bad("", false, "the image is empty");
    /* at most API_MAX_IMAGES per request */
    for (int i = 0; i < API_MAX_IMAGES; i++) assert_int_equal(api_image_add(&im, "aGk=", 4, false, "f", msg, sizeof msg), 0);
    assert_int_equal(api_image_add(&im, "aGk=", 4, false, "f", msg, sizeof msg), MU_E_ARG);
    assert_non_null(strstr(msg, "too many images"));
    api_images_free(&im);
}

static void test_markers(void **st) {
    (void)st;
    assert_int_equal(api_count_markers(""), 0);
    assert_int_equal(api_count_markers("<__media__>"), 1);
    assert_int_equal(api_count_markers("a<__media__><__media__>b <__media_ _>"), 2);
    assert_int_equal(api_count_markers("<__media__media__>"), 0);
}

/* llama.cpp's flattening: parts joined by '\n', none next to an image */
static void test_flatten(void **st) {
    (void)st;
    json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":["
                              "{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"},"
                              "{\"type\":\"image_url\",\"image_url\":{\"url\":\"aGk=\"}},{\"type\":\"text\",\"text\":\"c\"},"
                              "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,aGk=\"}},"
                              "{\"type\":\"image_url\",\"image_url\":{\"url\":\"aGk=\"}},{\"type\":\"text\",\"text\":\"d\"}]}]",
                              0, NULL);
    assert_non_null(msgs);
    json_t *flat = NULL;
    api_images im = {0};
    assert_true(api_openai_images(NULL, msgs, &flat, &im)); /* no reply on success: no request needed */
    assert_int_equal(im.n, 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(flat, 1), "content")),
                        "a\nb<__media__>c<__media__><__media__>d");
    assert_string_equal(json_string_value(json_object_get(json_array_get(flat, 0), "content")), "s");
    json_decref(flat);
    api_images_free(&im);
    /* without images: nothing to flatten */
    json_t *plain = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]", 0, NULL);
    assert_true(api_openai_images(NULL, plain, &flat, &im));
    assert_null(flat);
    assert_int_equal(im.n, 0);
    json_decref(plain);
    json_decref(msgs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_image_refs),
        cmocka_unit_test(test_markers),
        cmocka_unit_test(test_flatten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
