/* fuzz_cookie.c: the Cookie header parser (src/http/session.c).
 * Input: a cookie name line, then the header value. The parser must not
 * read past the value's NUL, and a value it finds lies inside the header
 * and holds no ';'. A found value of session-id length is then looked up in
 * a table with one session (it must not match unless it is that id). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    const char *nl = memchr(p, '\n', size);
    if (!nl || nl - p > 64) return 0;
    char name[65];
    memcpy(name, p, (size_t)(nl - p));
    name[nl - p] = 0;
    size_t n = size - (size_t)(nl - p) - 1;
    char *hdr = malloc(n + 1);
    if (!hdr) return 0;
    memcpy(hdr, nl + 1, n);
    hdr[n] = 0;
    const char *v = NULL;
    size_t vl = 0;
    if (mu_http_cookie_get(hdr, name, &v, &vl)) {
        if (v < hdr || v + vl > hdr + strlen(hdr) || memchr(v, ';', vl)) abort();
        mu_http_sessions *s = NULL;
        mu_err err;
        char id[MU_SESS_TOKEN_LEN + 1], csrf[MU_SESS_TOKEN_LEN + 1];
        if (!mu_http_sessions_new(&s, &err) && !mu_http_session_create(s, 1, id, csrf, &err)) {
            bool same = vl == MU_SESS_TOKEN_LEN && !memcmp(v, id, vl);
            if (mu_http_session_find(s, 2, v, vl, NULL) != same) abort();
        }
        mu_http_sessions_free(s);
    }
    free(hdr);
    return 0;
}
