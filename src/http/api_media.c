/* api_media.c: images in request bodies, each protocol's way, into one list
 * of encoded files and prompt text that holds MU_MEDIA_MARKER once per
 * image, in order.
 * Owns: reading an image reference (a data: URL or bare base64, as
 * llama.cpp's server reads image_url.url; Ollama's and llama.cpp's base64
 * strings), refusing remote and file URLs (never fetched), OpenAI content
 * parts flattened as llama.cpp flattens them when media is present, the
 * error for an image sent to a server without a projector.
 * Not here: decoding the bytes (src/vision, behind mu_mprompt_new), the
 * route handlers (api_openai.c, api_ollama.c, api_llamacpp.c). */
#include "api.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void api_images_free(api_images *im) {
    if (!im) return;
    for (int i = 0; i < im->n; i++) free(im->v[i].data);
    free(im->v);
    memset(im, 0, sizeof *im);
}

/* ---- base64 ---------------------------------------------------------------- */

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int api_base64_decode(const char *s, size_t n, unsigned char **out, size_t *out_n, size_t *bad_at) {
    unsigned char *o = malloc(n / 4 * 3 + 3);
    if (!o) return MU_E_NOMEM;
    size_t k = 0, nsig = 0, npad = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue; /* line-wrapped base64 */
        int v = c == '=' ? -2 : b64_val(c);
        if (v == -1 || (v >= 0 && npad) || (v == -2 && (npad == 2 || nsig % 4 < 2))) {
            free(o);
            *bad_at = i;
            return MU_E_ARG;
        }
        if (v == -2) {
            npad++;
            continue;
        }
        acc = acc << 6 | (uint32_t)v;
        if (++nsig % 4 == 0) {
            o[k++] = (unsigned char)(acc >> 16);
            o[k++] = (unsigned char)(acc >> 8);
            o[k++] = (unsigned char)acc;
            acc = 0;
        }
    }
    size_t rest = nsig % 4;
    if (rest == 1 || (npad && rest + npad != 4)) { /* a lone sextet, or padding that does not fill the group */
        free(o);
        *bad_at = n;
        return MU_E_ARG;
    }
    if (rest == 2) o[k++] = (unsigned char)(acc >> 4);
    if (rest == 3) {
        o[k++] = (unsigned char)(acc >> 10);
        o[k++] = (unsigned char)(acc >> 2);
    }
    *out = o;
    *out_n = k;
    return 0;
}

/* ---- one image ------------------------------------------------------------- */

static bool prefix_ci(const char *s, size_t n, const char *p) {
    size_t k = strlen(p);
    return n >= k && !strncasecmp(s, p, k);
}

int api_image_add(api_images *im, const char *s, size_t n, bool url, const char *field, char *msg, size_t cap) {
    if (im->n >= API_MAX_IMAGES) {
        snprintf(msg, cap, "field '%s': too many images: at most %d per request", field, API_MAX_IMAGES);
        return MU_E_ARG;
    }
    if (url) {
        if (prefix_ci(s, n, "http://") || prefix_ci(s, n, "https://")) {
            snprintf(msg, cap,
                     "field '%s': remote image URLs are not fetched: send the image inline as a data URL "
                     "(data:image/png;base64,...)",
                     field);
            return MU_E_ARG;
        }
        if (prefix_ci(s, n, "file:")) {
            snprintf(msg, cap, "field '%s': file URLs are not read: send the image inline as a data URL "
                               "(data:image/png;base64,...)", field);
            return MU_E_ARG;
        }
        if (prefix_ci(s, n, "data:")) {
            const char *comma = memchr(s, ',', n);
            size_t hl = comma ? (size_t)(comma - s) : n;
            if (!prefix_ci(s, hl, "data:image/")) {
                char head[65];
                size_t k;
                for (k = 0; k < hl && k < 64; k++) head[k] = isprint((unsigned char)s[k]) ? s[k] : '?';
                head[k] = 0;
                snprintf(msg, cap, "field '%s': not an image data URL: %s", field, head);
                return MU_E_ARG;
            }
            if (!comma || hl < 7 || strncasecmp(s + hl - 7, ";base64", 7)) {
                snprintf(msg, cap, "field '%s': the data URL must be base64-encoded (data:image/png;base64,...)",
                         field);
                return MU_E_ARG;
            }
            s = comma + 1;
            n -= hl + 1;
        }
    }
    unsigned char *data = NULL;
    size_t dn = 0, bad = 0;
    int rc = api_base64_decode(s, n, &data, &dn, &bad);
    if (rc == MU_E_NOMEM) {
        snprintf(msg, cap, "server: out of memory");
        return rc;
    }
    if (rc) {
        if (bad < n)
            snprintf(msg, cap, "field '%s': invalid base64: character 0x%02x at offset %zu", field,
                     (unsigned char)s[bad], bad);
        else
            snprintf(msg, cap, "field '%s': invalid base64: the data ends mid-group (%zu characters)", field, n);
        return MU_E_ARG;
    }
    if (dn == 0) {
        free(data);
        snprintf(msg, cap, "field '%s': the image is empty", field);
        return MU_E_ARG;
    }
    if (im->n == im->cap) {
        int nc = im->cap ? im->cap * 2 : 4;
        api_image *v = realloc(im->v, (size_t)nc * sizeof *v);
        if (!v) {
            free(data);
            snprintf(msg, cap, "server: out of memory");
            return MU_E_NOMEM;
        }
        im->v = v;
        im->cap = nc;
    }
    im->v[im->n].data = data;
    im->v[im->n].size = dn;
    im->n++;
    return 0;
}

static bool reply_media_err(mu_http_req *r, int rc, const char *msg, const char *param) {
    mu_http_reply_error(r, rc == MU_E_NOMEM ? 503 : 400, msg, param);
    return false;
}

/* ---- per protocol ---------------------------------------------------------- */

/* llama.cpp's flattening of content parts when media is present: parts
 * joined with '\n', except next to a media marker */
static json_t *openai_flatten(const json_t *parts) {
    mu_http_buf b = {0};
    bool last_marker = false;
    size_t k;
    const json_t *p;
    json_array_foreach(parts, k, p) {
        const char *type = mu_jc_str(p, "type", "");
        if (!strcmp(type, "image_url")) {
            mu_http_buf_str(&b, MU_MEDIA_MARKER);
            last_marker = true;
        } else {
            const json_t *t = json_object_get(p, "text");
            if (!last_marker && b.n) mu_http_buf_add(&b, "\n", 1);
            mu_http_buf_add(&b, json_string_value(t), json_string_length(t));
            last_marker = false;
        }
    }
    json_t *s = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.n);
    mu_http_buf_free(&b);
    return s;
}

bool api_openai_images(mu_http_req *r, const json_t *msgs, json_t **msgs_out, api_images *im) {
    *msgs_out = NULL;
    char msg[320], field[96];
    size_t i, k;
    const json_t *m, *p;
    json_array_foreach(msgs, i, m) {
        json_array_foreach(json_object_get(m, "content"), k, p) {
            const char *type = mu_jc_str(p, "type", "");
            if (!strcmp(type, "image_url")) {
                snprintf(field, sizeof field, "messages[%zu].content[%zu].image_url.url", i, k);
                const json_t *u = json_object_get(json_object_get(p, "image_url"), "url");
                if (!json_is_string(u)) {
                    snprintf(msg, sizeof msg, "field '%s': required for an image_url part", field);
                    return reply_media_err(r, MU_E_ARG, msg, field);
                }
                int rc = api_image_add(im, json_string_value(u), json_string_length(u), true, field, msg, sizeof msg);
                if (rc) return reply_media_err(r, rc, msg, field);
            } else if (!json_is_string(json_object_get(p, "text"))) {
                snprintf(field, sizeof field, "messages[%zu].content[%zu].text", i, k);
                snprintf(msg, sizeof msg, "field '%s': required for a text part", field);
                return reply_media_err(r, MU_E_ARG, msg, field);
            }
        }
    }
    if (!im->n) return true;
    json_t *out = json_deep_copy(msgs);
    json_array_foreach(out, i, m) {
        json_t *c = json_object_get(m, "content");
        if (!json_is_array(c)) continue;
        json_t *s = openai_flatten(c);
        if (!s) {
            json_decref(out);
            return reply_media_err(r, MU_E_NOMEM, "server: out of memory", NULL);
        }
        json_object_set_new((json_t *)m, "content", s);
    }
    *msgs_out = out;
    return true;
}

bool api_b64_images(mu_http_req *r, const json_t *arr, const char *field, api_images *im) {
    char msg[320], f[96];
    size_t k;
    const json_t *s;
    json_array_foreach(arr, k, s) {
        snprintf(f, sizeof f, "%s[%zu]", field, k);
        int rc = api_image_add(im, json_string_value(s), json_string_length(s), false, f, msg, sizeof msg);
        if (rc) return reply_media_err(r, rc, msg, f);
    }
    return true;
}

int api_count_markers(const char *s) {
    int n = 0;
    for (const char *p = strstr(s, MU_MEDIA_MARKER); p; p = strstr(p + sizeof MU_MEDIA_MARKER - 1, MU_MEDIA_MARKER)) n++;
    return n;
}

bool api_images_gate(mu_http_req *r, mu_http_app *a, const api_images *im) {
    if (!im->n) return true;
    if (!a->mmproj) {
        mu_http_reply_error(r, 400,
                            "image input is not supported: this server has no vision projector (start it with "
                            "--mmproj FILE)",
                            NULL);
        return false;
    }
    return true;
}

bool api_media_prompt(mu_http_req *r, mu_http_app *a, const char *text, const api_images *im, int32_t **ids,
                      int *n, const mu_mprompt **media) {
    mu_mprompt *mp = NULL;
    if (a->encoder) { /* on the encode thread: this request waits, its handler runs again */
        if (api_encode_take(r, a, text, im, &mp) <= 0) return false;
    } else {
        mu_media md[API_MAX_IMAGES];
        for (int i = 0; i < im->n; i++) md[i] = (mu_media){.data = im->v[i].data, .size = im->v[i].size};
        mu_err err = {0};
        /* the text was rendered or given as text: BOS by the model's rule, as api_tokenize_prompt */
        int rc = mu_mprompt_new(mu_sched_engine(a->sched), a->mmproj, text, strlen(text), true, md, im->n, &mp, &err);
        if (rc) {
            mu_http_reply_status(r, rc, &err);
            return false;
        }
    }
    int np = mu_mprompt_n(mp);
    int32_t *t = malloc((size_t)(np > 0 ? np : 1) * sizeof *t);
    if (!t) {
        mu_mprompt_free(mp);
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return false;
    }
    memcpy(t, mu_mprompt_tokens(mp), (size_t)np * sizeof *t);
    *ids = t;
    *n = np;
    *media = mp;
    return true;
}

bool api_chat_images(mu_http_req *r, mu_http_app *a, const json_t *msgs, json_t **flat, api_images *im) {
    *flat = NULL;
    if (api_openai_images(r, msgs, flat, im) && api_images_gate(r, a, im)) return true;
    json_decref(*flat);
    *flat = NULL;
    api_images_free(im);
    return false;
}

bool api_prompt_media(mu_http_req *r, mu_http_app *a, const json_t *prompt, const char *field, bool *has,
                      int32_t **ids, int *n, const mu_mprompt **media) {
    const json_t *md = json_object_get(prompt, "multimodal_data");
    *has = json_is_object(prompt) && json_array_size(md) > 0;
    if (!*has) return true;
    const char *text = json_string_value(json_object_get(prompt, "prompt_string"));
    api_images im = {0};
    char f[96], m[256];
    snprintf(f, sizeof f, "%s.multimodal_data", field);
    bool ok = api_b64_images(r, md, f, &im);
    int nm = ok ? api_count_markers(text) : 0;
    if (ok && nm != im.n) {
        snprintf(m, sizeof m, "field '%s': %d image%s but prompt_string holds %d " MU_MEDIA_MARKER " marker%s", f,
                 im.n, im.n == 1 ? "" : "s", nm, nm == 1 ? "" : "s");
        mu_http_reply_error(r, 400, m, f);
        ok = false;
    }
    ok = ok && api_images_gate(r, a, &im) && api_media_prompt(r, a, text, &im, ids, n, media);
    api_images_free(&im);
    return ok;
}

bool api_chat_prompt_media(mu_http_req *r, mu_http_app *a, const json_t *msgs, const json_t *tools, const char *effort,
                           const api_images *im, int32_t **ids, int *n, const mu_mprompt **media) {
    *media = NULL;
    if (!api_images_gate(r, a, im)) return false;
    char *text = NULL;
    if (!api_chat_prompt_ex(r, a, msgs, tools, effort, API_PROMPT_GEN, ids, n, im->n ? &text : NULL)) return false;
    if (!im->n) return true;
    free(*ids);
    *ids = NULL;
    bool ok = api_media_prompt(r, a, text, im, ids, n, media);
    free(text);
    return ok;
}

bool api_image_part(mu_http_req *r, api_images *im, const char *s, size_t n, bool url, const char *field,
                    mu_http_buf *text) {
    char msg[400];
    int rc = api_image_add(im, s, n, url, field, msg, sizeof msg);
    if (rc) return reply_media_err(r, rc, msg, field);
    mu_http_buf_str(text, MU_MEDIA_MARKER);
    return true;
}
