/* esc.h: bytes from untrusted sources (file names, GGUF keys, strings and
 * tensor names, tokenizer texts) made safe for a one-line message on a
 * terminal: always valid UTF-8, no control characters. */
#ifndef MU_BASE_ESC_H
#define MU_BASE_ESC_H

#include <stddef.h>

/* Writes src[0..n) to dst (cap >= 1 bytes, NUL-terminated): printable ASCII
 * and well-formed UTF-8 sequences of printable characters as they are;
 * control characters (C0, DEL, C1), bytes of an ill-formed sequence
 * (overlong, surrogate, above U+10FFFF, truncated) as \xNN per byte. Output
 * that does not fit is cut before a whole character or escape and ends with
 * "..." when cap allows. Returns dst. */
char *mu_esc(char *dst, size_t cap, const char *src, size_t n);
/* The same for a NUL-terminated string (NULL prints as "(null)"). */
char *mu_esc_str(char *dst, size_t cap, const char *s);
/* Length of the well-formed UTF-8 sequence at s[0..n), 0 when ill-formed. */
size_t mu_utf8_seq(const unsigned char *s, size_t n);

#endif
