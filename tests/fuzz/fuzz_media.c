/* fuzz_media.c: image references in request bodies (src/http/api_media.c).
 * Input: any text, read as an image_url.url (data URL, bare base64, or a
 * refused URL) and as a bare base64 string, then counted for media
 * markers. An accepted image is non-empty and no bigger than 3/4 of the
 * text; a refusal is one line naming the field. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    for (int url = 0; url < 2; url++) {
        api_images im = {0};
        char msg[320];
        int rc = api_image_add(&im, s, size, url, "f", msg, sizeof msg);
        if (rc == 0) {
            if (im.n != 1 || im.v[0].size == 0 || im.v[0].size > size / 4 * 3 + 2) abort();
        } else if (rc == MU_E_ARG) {
            if (im.n != 0 || strncmp(msg, "field 'f': ", 11) || strchr(msg, '\n')) abort();
        } else if (rc != MU_E_NOMEM) {
            abort();
        }
        api_images_free(&im);
    }
    char *z = malloc(size + 1);
    if (!z) return 0;
    memcpy(z, data, size);
    z[size] = 0;
    if (api_count_markers(z) < 0) abort();
    free(z);
    return 0;
}
