/* esc.c: escaping of untrusted bytes for messages (esc.h).
 * Owns: UTF-8 well-formedness (RFC 3629: no overlongs, no surrogates, at
 * most U+10FFFF) and the \xNN escape. Does not: quote, or escape the
 * backslash itself (the result is for people to read, not to parse).
 * Design: a single pass; a character or escape is written whole or not at
 * all, so a cut never leaves half a sequence. */
#include "esc.h"

#include <string.h>

size_t mu_utf8_seq(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    const unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned cp, min;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* true for U+0080..U+009F, the C1 controls (0xc2 0x80..0x9f) */
static int is_c1(const unsigned char *s, size_t len) { return len == 2 && s[0] == 0xc2 && s[1] < 0xa0; }

char *mu_esc(char *dst, size_t cap, const char *src, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (cap == 0) return dst;
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0, i = 0;
    while (i < n) {
        char tmp[16];
        size_t tl = 0, adv;
        size_t len = mu_utf8_seq(s + i, n - i);
        if (len == 1 && s[i] >= 0x20 && s[i] != 0x7f) {
            tmp[tl++] = (char)s[i];
            adv = 1;
        } else if (len > 1 && !is_c1(s + i, len)) {
            memcpy(tmp, s + i, len);
            tl = adv = len;
        } else { /* a control character or ill-formed bytes: escape the sequence's bytes (or one) */
            adv = len ? len : 1;
            for (size_t k = 0; k < adv; k++) {
                tmp[tl++] = '\\';
                tmp[tl++] = 'x';
                tmp[tl++] = hex[s[i + k] >> 4];
                tmp[tl++] = hex[s[i + k] & 15];
            }
        }
        if (o + tl + 1 > cap) { /* does not fit: cut, with "..." if it fits */
            while (o > 0 && o + 4 > cap) { /* make room for "..." by dropping whole characters */
                o--;
                while (o > 0 && ((unsigned char)dst[o] & 0xc0) == 0x80) o--;
            }
            if (o + 4 <= cap) memcpy(dst + o, "...", 3), o += 3;
            break;
        }
        memcpy(dst + o, tmp, tl);
        o += tl;
        i += adv;
    }
    dst[o] = 0;
    return dst;
}

char *mu_esc_str(char *dst, size_t cap, const char *s) {
    if (!s) s = "(null)";
    return mu_esc(dst, cap, s, strlen(s));
}
