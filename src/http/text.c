/* text.c: binds the server's text interface (api.h mu_http_text) to the
 * model's tokenizer (tok/tokenizer.h) and chat template (chat/jinja.h).
 * Owns: which tokenizer and template the server uses (the GGUF's template,
 * or the built-in Muse template when it has none) and the bos/eos texts.
 * Does not own: tokenization, template semantics or output parsing
 * (tok/tokenizer.h, chat/chat.h).
 * Design: a thin adapter, so a richer chat module (chat/chat.h) replaces
 * render() in one place. */
#include <stdlib.h>
#include <string.h>

#include "../chat/chat.h"
#include "../model/model.h"
#include "../tok/tokenizer.h"
#include "api.h"
#include "server.h"

typedef struct {
    const mu_tok *tok; /* the model's; lives as long as the model */
    char *tmpl;
    size_t tmpl_len;
    char bos[64], eos[64];
} text_ctx;

static int t_encode(void *ctx, const char *s, size_t n, bool parse_special, int32_t **ids, int *n_ids, mu_err *err) {
    text_ctx *t = ctx;
    int32_t *o = NULL;
    int k = 0;
    int rc = mu_tok_encode(t->tok, s, n, parse_special, &o, &k, err);
    if (rc) return rc;
    *ids = o;
    *n_ids = k;
    return 0;
}

static int t_piece(void *ctx, int32_t id, char *buf, size_t cap) {
    text_ctx *t = ctx;
    if (id < 0 || id >= mu_tok_n_vocab(t->tok)) return -1;
    int n = mu_tok_piece(t->tok, id, true, buf, cap);
    return n < 0 ? 0 : n;
}

static bool t_special(void *ctx, int32_t id) {
    text_ctx *t = ctx;
    return (mu_tok_attr(t->tok, id) & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_UNKNOWN)) != 0;
}

static int t_render(void *ctx, const json_t *msgs, const json_t *tools, const char *reasoning, bool add_gen, char **out,
                    mu_err *err) {
    text_ctx *t = ctx;
    return mu_chat_render(t->tmpl, msgs, tools, reasoning, add_gen, t->bos[0] ? t->bos : NULL,
                          t->eos[0] ? t->eos : NULL, out, err);
}

int mu_http_text_init(mu_http_text *out, const mu_model *m, mu_err *err) {
    const mu_gguf *g = mu_model_gguf(m);
    if (!mu_model_tokenizer(m)) return mu_fail(err, MU_E_MODEL, "server: the model has no tokenizer");
    text_ctx *t = calloc(1, sizeof *t);
    if (!t) return mu_fail(err, MU_E_NOMEM, "server: out of memory");
    t->tok = mu_model_tokenizer(m);
    if (mu_gguf_find(g, "tokenizer.chat_template") >= 0) {
        const char *s;
        size_t n;
        if (!mu_gguf_get_str(g, "tokenizer.chat_template", &s, &n, err)) {
            t->tmpl = malloc(n + 1);
            if (t->tmpl) {
                memcpy(t->tmpl, s, n);
                t->tmpl[n] = 0;
                t->tmpl_len = n;
            }
        }
    }
    mu_tok_text_copy(t->tok, mu_tok_bos(t->tok), t->bos, sizeof t->bos);
    mu_tok_text_copy(t->tok, mu_tok_eos(t->tok), t->eos, sizeof t->eos);
    *out = (mu_http_text){.ctx = t,
                          .encode = t_encode,
                          .piece = t_piece,
                          .is_special = t_special,
                          .render = t_render,
                          .chat_template = t->tmpl};
    return 0;
}

void mu_http_text_deinit(mu_http_text *x) {
    if (!x || !x->ctx) return;
    text_ctx *t = x->ctx;
    free(t->tmpl);
    free(t);
    x->ctx = NULL;
}
