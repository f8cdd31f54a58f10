/* gen.c: one sequence's way from logits to events (gen.h).
 * Text path: token -> detokenizer (whole UTF-8 characters; control tokens
 * rendered as their text only for chat, where the channel markers are
 * control tokens) -> chat parser (chat only) -> answer text held back while
 * it may still become a stop string -> TEXT events. Reasoning is released at
 * once (stop strings apply to the answer only); tool calls are released
 * when complete. */
#include "gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chat/chat.h"
#include "../tok/tokenizer.h"
#include "constrain.h"

struct mu_gen {
    const mu_model *model;
    int n_vocab;
    mu_gen_req r;              /* stops, forced point into owned copies below */
    char *stops[MU_GEN_MAX_STOPS];
    int32_t *forced;
    int max_new;
    bool by_ctx;
    int n_acc;                 /* tokens accepted */
    mu_sampler *smp;
    mu_constrain *cons;
    mu_detok *detok;           /* NULL with no_text or a model without a tokenizer */
    mu_chat_parser *cp;        /* chat only */
    /* answer text not yet released (at most a stop string's length after
     * each token) */
    char *held;
    size_t n_held, cap_held;
    bool cut;                  /* a stop string matched: nothing more is released */
    const char *stop_word;     /* the stop string that matched (one of stops) */
    /* probability scratch for TOKEN events */
    int32_t *top_ids;
    float *top_probs, *top_logprobs;
    /* the current emit target (for the chat parser's callback) */
    mu_gen_emit_fn emit;
    void *user;
    mu_finish finish;          /* set when a stop string matched */
};

int mu_gen_new(const mu_model *m, const mu_gen_req *r, int max_new, bool by_ctx, mu_gen **out, mu_err *err) {
    if (r->n_stops < 0 || r->n_stops > MU_GEN_MAX_STOPS)
        return mu_fail(err, MU_E_ARG, "gen: at most %d stop strings: %d", MU_GEN_MAX_STOPS, r->n_stops);
    if (r->n_forced < 0 || (r->n_forced > 0 && !r->forced)) return mu_fail(err, MU_E_ARG, "gen: bad forced tokens");
    const mu_model_info *I = mu_model_get_info(m);
    if (r->n_top < 0 || r->n_top > I->n_vocab)
        return mu_fail(err, MU_E_ARG, "gen: top alternatives must be 0..%d: %d", I->n_vocab, r->n_top);
    mu_gen *g = calloc(1, sizeof *g);
    if (!g) return mu_fail(err, MU_E_NOMEM, "gen: out of memory");
    g->model = m;
    g->n_vocab = I->n_vocab;
    g->r = *r;
    g->r.prompt = NULL;
    g->r.n_prompt = 0;
    g->max_new = max_new;
    g->by_ctx = by_ctx;
    int rc = 0;
    for (int i = 0; i < r->n_stops && !rc; i++) {
        size_t l = r->stops[i] ? strlen(r->stops[i]) : 0;
        if (l == 0) rc = mu_fail(err, MU_E_ARG, "gen: a stop string is empty");
        else if (!(g->stops[i] = strdup(r->stops[i]))) rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
    }
    g->r.stops = (const char *const *)g->stops;
    if (!rc && r->n_forced) {
        g->forced = malloc((size_t)r->n_forced * sizeof *g->forced);
        if (!g->forced) rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
        else memcpy(g->forced, r->forced, (size_t)r->n_forced * sizeof *g->forced);
        g->r.forced = g->forced;
    }
    if (!rc) rc = mu_sampler_new_model(&r->sp, m, &g->smp, err);
    /* the sampler's history starts with the prompt, as llama.cpp's server
     * feeds it (penalties and DRY see prompt tokens too) */
    for (int i = 0; !rc && i < r->n_prompt; i++) mu_sampler_accept(g->smp, r->prompt[i]);
    if (!rc && r->schema) rc = mu_constrain_new(m, r->schema, r->schema_chat, &g->cons, err);
    if (!rc && r->schema) mu_schema_ref(r->schema);
    else g->r.schema = NULL;
    const mu_tok *tok = mu_model_tokenizer(m);
    if (!rc && !r->no_text) {
        if (!tok) rc = mu_fail(err, MU_E_UNSUPPORTED, "gen: the model has no tokenizer; ask for token ids only");
        else
            rc = mu_detok_new(tok, (r->chat ? MU_DETOK_SPECIAL : 0) | (r->valid_utf8 ? MU_DETOK_VALID_UTF8 : 0),
                              &g->detok, err);
        if (!rc && r->chat) rc = mu_chat_parser_new(&g->cp, err);
    }
    if (!rc && r->n_top > 0) {
        g->top_ids = malloc((size_t)r->n_top * sizeof *g->top_ids);
        g->top_probs = malloc((size_t)r->n_top * sizeof *g->top_probs);
        g->top_logprobs = malloc((size_t)r->n_top * sizeof *g->top_logprobs);
        if (!g->top_ids || !g->top_probs || !g->top_logprobs) rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
    }
    if (rc) {
        mu_gen_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void mu_gen_free(mu_gen *g) {
    if (!g) return;
    for (int i = 0; i < MU_GEN_MAX_STOPS; i++) free(g->stops[i]);
    free(g->forced);
    mu_sampler_free(g->smp);
    mu_constrain_free(g->cons);
    mu_schema_unref(g->r.schema);
    mu_detok_free(g->detok);
    mu_chat_parser_free(g->cp);
    free(g->held);
    free(g->top_ids);
    free(g->top_probs);
    free(g->top_logprobs);
    free(g);
}

int mu_gen_n_accepted(const mu_gen *g) { return g->n_acc; }

double mu_gen_constrain_s(const mu_gen *g) {
    if (!g->cons) return 0;
    uint64_t np, nc;
    double s;
    mu_constrain_stats(g->cons, &np, &nc, &s);
    return s;
}

int32_t mu_gen_pick(mu_gen *g, const float *logits, const char **why) {
    /* NaN or infinity in the logits comes from broken weights (or a broken
     * kernel): end with an error, never sample garbage */
    for (int i = 0; i < g->n_vocab; i++)
        if (!isfinite(logits[i])) {
            *why = "engine: the model produced a non-finite logit (broken weights?)";
            return -1;
        }
    int32_t id;
    if (g->n_acc < g->r.n_forced) id = g->forced[g->n_acc];
    else if (g->cons) id = mu_constrain_pick(g->cons, g->smp, &g->r.sp, logits);
    else id = mu_sampler_sample(g->smp, logits);
    if (id < 0) *why = "structured output: no token can continue the value";
    return id;
}

/* ---- text ------------------------------------------------------------- */

static void emit_text(mu_gen *g, mu_channel ch, const char *s, size_t n) {
    if (!n) return;
    mu_gen_event ev = {.kind = MU_EV_TEXT, .channel = ch, .text = s, .len = n};
    g->emit(g->user, &ev);
}

/* Longest k < the stop's length such that the last k bytes of s[0..n) are
 * a prefix of some stop string: what must be held back. */
static size_t stop_hold(const mu_gen *g, const char *s, size_t n) {
    size_t hold = 0;
    for (int i = 0; i < g->r.n_stops; i++) {
        size_t l = strlen(g->stops[i]);
        for (size_t k = (l - 1 < n ? l - 1 : n); k > hold; k--)
            if (!memcmp(s + n - k, g->stops[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Answer text: append to the held bytes, cut at the first stop string, and
 * release what can no longer be part of one. final: release everything. */
static void answer_text(mu_gen *g, const char *s, size_t n, bool final) {
    if (g->cut) return;
    if (!g->r.n_stops) {
        emit_text(g, MU_CH_CONTENT, s, n);
        return;
    }
    if (g->n_held + n > g->cap_held) {
        size_t cap = (g->n_held + n) * 2 + 64;
        char *p = realloc(g->held, cap);
        if (!p) { /* out of memory: release unchecked rather than lose text */
            emit_text(g, MU_CH_CONTENT, g->held, g->n_held);
            emit_text(g, MU_CH_CONTENT, s, n);
            g->n_held = 0;
            return;
        }
        g->held = p;
        g->cap_held = cap;
    }
    memcpy(g->held + g->n_held, s, n);
    g->n_held += n;
    size_t best = SIZE_MAX;
    int which = -1;
    for (int i = 0; i < g->r.n_stops; i++) {
        const char *hit = memmem(g->held, g->n_held, g->stops[i], strlen(g->stops[i]));
        if (hit && (size_t)(hit - g->held) < best) {
            best = (size_t)(hit - g->held);
            which = i;
        }
    }
    if (which >= 0) {
        emit_text(g, MU_CH_CONTENT, g->held, best);
        g->stop_word = g->stops[which];
        g->n_held = 0;
        g->cut = true;
        g->finish = MU_FINISH_WORD;
        return;
    }
    size_t keep = final ? 0 : stop_hold(g, g->held, g->n_held);
    emit_text(g, MU_CH_CONTENT, g->held, g->n_held - keep);
    memmove(g->held, g->held + g->n_held - keep, keep);
    g->n_held = keep;
}

static int chat_event(void *user, const mu_chat_event *ev) {
    mu_gen *g = user;
    if (ev->kind == MU_CHAT_REASONING) {
        emit_text(g, MU_CH_REASONING, ev->text, ev->len);
    } else if (ev->kind == MU_CHAT_CONTENT) {
        answer_text(g, ev->text, ev->len, false);
    } else if (ev->kind == MU_CHAT_TOOL_CALL && !g->cut) {
        mu_gen_event e = {.kind = MU_EV_TOOL_CALL, .name = ev->name, .text = ev->arguments,
                          .len = strlen(ev->arguments)};
        g->emit(g->user, &e);
    }
    return 0;
}

/* Decoded bytes of the output, in order. */
static void out_text(mu_gen *g, const char *s, size_t n) {
    if (!n) return;
    if (g->cp) {
        mu_err err;
        mu_chat_parser_feed(g->cp, s, n, chat_event, g, &err);
    } else {
        answer_text(g, s, n, false);
    }
}

/* ---- tokens ----------------------------------------------------------- */

mu_finish mu_gen_accept(mu_gen *g, int32_t id, const float *logits, mu_gen_emit_fn emit, void *user) {
    g->emit = emit;
    g->user = user;
    if (g->cons) mu_constrain_accept(g->cons, id);
    mu_sampler_accept(g->smp, id);
    g->n_acc++;
    mu_gen_event ev = {.kind = MU_EV_TOKEN};
    ev.tok.id = id;
    if (g->r.logprobs || g->r.n_top > 0) {
        mu_token_probs(logits, g->n_vocab, id, g->r.n_top, &ev.tok.logprob, g->top_ids, g->top_probs,
                       g->top_logprobs);
        ev.tok.n_top = g->r.n_top;
        ev.tok.top_ids = g->top_ids;
        ev.tok.top_probs = g->top_probs;
        ev.tok.top_logprobs = g->top_logprobs;
    }
    emit(user, &ev);
    if (g->detok) {
        const char *s;
        size_t n;
        mu_err err;
        if (mu_detok_push(g->detok, id, &s, &n, &err) == 0) out_text(g, s, n);
    }
    if (g->finish) return g->finish;
    if (!g->r.ignore_eos && mu_model_is_stop(g->model, id)) return MU_FINISH_STOP;
    if (g->cons && mu_constrain_done(g->cons)) return MU_FINISH_STOP;
    if (g->n_acc >= g->max_new) return g->by_ctx ? MU_FINISH_CTX : MU_FINISH_LENGTH;
    return MU_FINISH_NONE;
}

void mu_gen_end(mu_gen *g, mu_finish f, const char *why, const mu_gen_stats *st, mu_gen_emit_fn emit, void *user) {
    g->emit = emit;
    g->user = user;
    if (g->detok && !g->cut) {
        const char *s;
        size_t n;
        mu_detok_flush(g->detok, &s, &n);
        out_text(g, s, n);
        if (g->cp) {
            mu_err err;
            mu_chat_parser_finish(g->cp, chat_event, g, &err);
        }
        answer_text(g, "", 0, true);
    }
    if (g->finish == MU_FINISH_WORD && (f == MU_FINISH_STOP || f == MU_FINISH_LENGTH || f == MU_FINISH_CTX))
        f = MU_FINISH_WORD;
    mu_gen_event ev = {.kind = MU_EV_FINISH, .finish = f, .err = why ? why : ""};
    if (f == MU_FINISH_WORD) ev.stop_word = g->stop_word;
    if (st) ev.stats = *st;
    emit(user, &ev);
}
