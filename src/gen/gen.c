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
#include <time.h>

#include "../chat/chat.h"
#include "../tok/tokenizer.h"
#include "constrain.h"
#include "grammar.h"

struct mu_gen {
    const mu_model *model;
    int n_vocab;
    mu_gen_req r;              /* stops, forced point into owned copies below */
    char *stops[MU_GEN_MAX_STOPS];
    int32_t *forced;
    int32_t *preserved;        /* r.preserved copied */
    int max_new;
    bool by_ctx;
    int n_acc;                 /* tokens accepted */
    mu_sampler *smp;
    mu_constrain *cons;
    mu_gmatch *gm;             /* a GBNF grammar (r.grammar referenced) */
    char gm_err[256];          /* the grammar refused an accepted token: the next pick fails */
    bool sampled;              /* the last pick came from the sampler (post-sampling probabilities) */
    double gm_seconds;         /* spent in the grammar's checks (not in the sampler chain) */
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
    /* which tokens are answer text (chat jobs with logprobs): tok_start[i]
     * is where token i's bytes begin in the decoded output, tok_cpos[i]
     * where they begin in the answer text (-1: not answer text) */
    bool track;
    size_t *tok_start;
    long long *tok_cpos;
    int cap_tok;
    int n_assigned, n_shown;   /* tokens placed by the parser's events; tokens reported */
    size_t raw_out;            /* decoded bytes fed to the chat parser */
    size_t content_in, content_out; /* answer bytes received from the parser; released */
    /* a forced call (call_one_of): " to=" forced, then the name (masked to
     * the names' prefixes, <|message|> once one is complete), then the call
     * block's opening forced; afterwards the model writes */
    char **calls;
    int n_calls;
    int call_phase;            /* CALL_* */
    char call_name[264];
    size_t n_call_name;
    int32_t *call_forced;      /* the tokens being forced now */
    int n_call_forced, call_pos;
    int32_t msg_id;
    float *masked;             /* [n_vocab] */
};

enum { CALL_OFF, CALL_PREFIX, CALL_NAME, CALL_BODY, CALL_FREE };

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
    if (!rc && r->n_preserved > 0 && r->preserved) {
        if (!(g->preserved = malloc((size_t)r->n_preserved * sizeof *g->preserved)))
            rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
        else memcpy(g->preserved, r->preserved, (size_t)r->n_preserved * sizeof *g->preserved);
    }
    g->r.preserved = g->preserved;
    if (!g->preserved) g->r.n_preserved = 0;
    if (!rc && r->n_forced) {
        g->forced = malloc((size_t)r->n_forced * sizeof *g->forced);
        if (!g->forced) rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
        else memcpy(g->forced, r->forced, (size_t)r->n_forced * sizeof *g->forced);
        g->r.forced = g->forced;
    }
    if (!rc) rc = mu_sampler_new_model(&r->sp, m, &g->smp, err);
    /* the sampler's history starts with the prompt, as llama.cpp's server
     * feeds it (penalties and DRY see prompt tokens too) */
    for (int i = 0; !rc && i < r->n_prompt; i++)
        if (r->prompt[i] >= 0) mu_sampler_accept(g->smp, r->prompt[i]); /* image rows are not tokens */
    if (!rc && r->schema) rc = mu_constrain_new(m, r->schema, r->schema_chat, &g->cons, err);
    if (!rc && r->schema) mu_schema_ref(r->schema);
    else g->r.schema = NULL;
    const mu_tok *tok = mu_model_tokenizer(m);
    if (!rc && r->grammar) {
        if (r->schema || r->n_forced || r->n_call_one_of || !tok)
            rc = mu_fail(err, MU_E_ARG, "gen: a grammar needs a tokenizer and excludes a schema, forced tokens "
                                        "and a forced call");
        else if (!(rc = mu_gmatch_new(r->grammar, tok, m, &g->gm, err)) &&
                 !(g->masked = malloc((size_t)g->n_vocab * sizeof *g->masked)))
            rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
        if (!rc) mu_grammar_ref(r->grammar);
    }
    if (rc || !r->grammar) g->r.grammar = NULL;
    if (!rc && !r->no_text) {
        if (!tok) rc = mu_fail(err, MU_E_UNSUPPORTED, "gen: the model has no tokenizer; ask for token ids only");
        else
            rc = mu_detok_new(tok, (r->chat ? MU_DETOK_SPECIAL : 0) | (r->valid_utf8 ? MU_DETOK_VALID_UTF8 : 0),
                              &g->detok, err);
        if (!rc && r->chat) rc = mu_chat_parser_new(&g->cp, err);
        g->track = r->chat && (r->logprobs || r->n_top > 0);
    }
    if (!rc && r->n_call_one_of) {
        if (r->n_call_one_of < 0 || r->n_call_one_of > MU_GEN_MAX_CALLS || !tok || !r->chat)
            rc = mu_fail(err, MU_E_ARG, "gen: a forced call needs a chat job, a tokenizer and 1..%d names",
                         MU_GEN_MAX_CALLS);
        else if ((g->msg_id = mu_tok_find(tok, "<|message|>")) < 0)
            rc = mu_fail(err, MU_E_UNSUPPORTED, "gen: the vocabulary has no <|message|> token: cannot force a call");
        else if (!(g->calls = calloc((size_t)r->n_call_one_of, sizeof *g->calls)) ||
                 !(g->masked = malloc((size_t)g->n_vocab * sizeof *g->masked)))
            rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
        for (int i = 0; !rc && i < r->n_call_one_of; i++) {
            size_t l = r->call_one_of[i] ? strlen(r->call_one_of[i]) : 0;
            if (l == 0 || l >= sizeof g->call_name) rc = mu_fail(err, MU_E_ARG, "gen: a function name is empty or too long");
            else if (!(g->calls[i] = strdup(r->call_one_of[i]))) rc = mu_fail(err, MU_E_NOMEM, "gen: out of memory");
            else g->n_calls = i + 1;
        }
        if (!rc) rc = mu_tok_encode(tok, " to=", 4, false, &g->call_forced, &g->n_call_forced, err);
        if (!rc) g->call_phase = g->n_call_forced ? CALL_PREFIX : CALL_NAME;
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
    free(g->preserved);
    mu_sampler_free(g->smp);
    mu_constrain_free(g->cons);
    mu_schema_unref(g->r.schema);
    mu_gmatch_free(g->gm);
    mu_grammar_unref(g->r.grammar);
    mu_detok_free(g->detok);
    mu_chat_parser_free(g->cp);
    free(g->held);
    free(g->top_ids);
    free(g->top_probs);
    free(g->top_logprobs);
    free(g->tok_start);
    free(g->tok_cpos);
    for (int i = 0; i < g->n_calls; i++) free(g->calls[i]);
    free(g->calls);
    free(g->call_forced);
    free(g->masked);
    free(g);
}

int mu_gen_n_accepted(const mu_gen *g) { return g->n_acc; }

double mu_gen_constrain_s(const mu_gen *g) {
    if (!g->cons) return g->gm_seconds;
    uint64_t np, nc;
    double s;
    mu_constrain_stats(g->cons, &np, &nc, &s);
    return s;
}

/* ---- a forced call ----------------------------------------------------- */

/* The next token of the function name: one whose bytes keep the name a
 * prefix of a listed name, or <|message|> once it is one. */
static int32_t call_name_pick(mu_gen *g, const float *logits) {
    const mu_tok *tok = mu_model_tokenizer(g->model);
    bool any = false;
    for (int v = 0; v < g->n_vocab; v++) {
        bool ok = false;
        if (v == g->msg_id) {
            for (int i = 0; i < g->n_calls && !ok; i++)
                ok = strlen(g->calls[i]) == g->n_call_name && !memcmp(g->calls[i], g->call_name, g->n_call_name);
        } else if (!(mu_tok_attr(tok, v) & (MU_TOK_ATTR_CONTROL | MU_TOK_ATTR_UNKNOWN))) {
            char piece[64];
            int n = mu_tok_piece(tok, v, false, piece, sizeof piece);
            for (int i = 0; n > 0 && i < g->n_calls && !ok; i++) {
                size_t l = strlen(g->calls[i]);
                ok = g->n_call_name + (size_t)n <= l && !memcmp(g->calls[i], g->call_name, g->n_call_name) &&
                     !memcmp(g->calls[i] + g->n_call_name, piece, (size_t)n);
            }
        }
        g->masked[v] = ok ? logits[v] : -INFINITY;
        any |= ok;
    }
    return any ? mu_sampler_sample(g->smp, g->masked) : -1;
}

/* Advances the forced call past id. */
static void call_accept(mu_gen *g, int32_t id) {
    if (g->call_phase == CALL_PREFIX || g->call_phase == CALL_BODY) {
        if (++g->call_pos < g->n_call_forced) return;
        free(g->call_forced);
        g->call_forced = NULL;
        g->call_pos = g->n_call_forced = 0;
        g->call_phase = g->call_phase == CALL_PREFIX ? CALL_NAME : CALL_FREE;
        return;
    }
    if (g->call_phase != CALL_NAME) return;
    const mu_tok *tok = mu_model_tokenizer(g->model);
    if (id != g->msg_id) {
        int n = mu_tok_piece(tok, id, false, g->call_name + g->n_call_name, sizeof g->call_name - 1 - g->n_call_name);
        if (n > 0) g->n_call_name += (size_t)n;
        return;
    }
    /* the header is complete: open the call block for the chosen name */
    char open[sizeof g->call_name + 64];
    int n = snprintf(open, sizeof open, "<atem:function_calls><atem:invoke name=\"%.*s\">", (int)g->n_call_name,
                     g->call_name);
    mu_err err;
    if (mu_tok_encode(tok, open, (size_t)n, false, &g->call_forced, &g->n_call_forced, &err) || !g->n_call_forced) {
        free(g->call_forced);
        g->call_forced = NULL;
        g->n_call_forced = 0;
        g->call_phase = CALL_FREE;
        return;
    }
    g->call_pos = 0;
    g->call_phase = CALL_BODY;
}

/* llama.cpp's common_sampler_sample with a grammar: the chain draws from
 * the unconstrained logits; a token the grammar refuses is dropped and the
 * chain runs again (its generators advance again) over the logits with
 * every refused token at -inf. */
static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int32_t grammar_pick(mu_gen *g, const float *logits, int32_t best, const char **why) {
    int32_t id = mu_sampler_sample_best(g->smp, logits, best); /* the unmasked row: its best holds */
    double t0 = mono_s();
    bool ok = id >= 0 && mu_gmatch_allows(g->gm, id);
    if (ok) {
        g->gm_seconds += mono_s() - t0;
        return id;
    }
    memcpy(g->masked, logits, (size_t)g->n_vocab * sizeof *g->masked);
    int n = mu_gmatch_mask(g->gm, g->masked);
    g->gm_seconds += mono_s() - t0;
    if (n <= 0) {
        *why = n < 0 ? "grammar: out of memory (or too many parse stacks)" : "grammar: no token can continue the text";
        return -1;
    }
    return mu_sampler_sample(g->smp, g->masked);
}

int32_t mu_gen_pick(mu_gen *g, const float *logits, int32_t best, const char **why) {
    /* NaN or infinity in the logits comes from broken weights (or a broken
     * kernel): end with an error, never sample garbage (best >= 0: the
     * device found every value finite) */
    if (best < 0 && !mu_logits_finite(logits, g->n_vocab)) {
        *why = "engine: the model produced a non-finite logit (broken weights?)";
        return -1;
    }
    int32_t id;
    g->sampled = true;
    if (g->gm_err[0]) {
        *why = g->gm_err;
        return -1;
    }
    if (g->n_acc < g->r.n_forced) id = g->forced[g->n_acc], g->sampled = false;
    else if (g->call_phase == CALL_PREFIX || g->call_phase == CALL_BODY) id = g->call_forced[g->call_pos], g->sampled = false;
    else if (g->call_phase == CALL_NAME) id = call_name_pick(g, logits);
    else if (g->gm) return grammar_pick(g, logits, best, why);
    else if (g->cons) {
        id = mu_constrain_pick(g->cons, g->smp, &g->r.sp, logits);
        g->sampled = g->r.sp.temp > 0; /* greedy under a schema is an argmax, not a draw */
    }
    else id = mu_sampler_sample_best(g->smp, logits, best);
    if (id < 0) *why = g->call_phase == CALL_NAME ? "tool call: no token can continue a function name"
                                                  : "structured output: no token can continue the value";
    return id;
}

/* ---- text ------------------------------------------------------------- */

static void emit_text(mu_gen *g, mu_channel ch, const char *s, size_t n) {
    if (!n) return;
    if (g->track && ch == MU_CH_CONTENT) {
        /* the answer tokens whose first byte is in this text */
        size_t end = g->content_out + n;
        while (g->n_shown < g->n_assigned) {
            long long c = g->tok_cpos[g->n_shown];
            if (c >= 0 && (size_t)c >= end) break;
            if (c >= 0) {
                mu_gen_event t = {.kind = MU_EV_CONTENT_TOKEN, .tok_index = g->n_shown};
                g->emit(g->user, &t);
            }
            g->n_shown++;
        }
        g->content_out = end;
    }
    mu_gen_event ev = {.kind = MU_EV_TEXT, .channel = ch, .text = s, .len = n};
    g->emit(g->user, &ev);
}

/* The parser released answer bytes [o, o + n) of its input: the tokens
 * that start there are answer tokens (with their place in the answer
 * text); tokens passed over before o are not. */
static void place_tokens(mu_gen *g, size_t o, size_t n) {
    if (o != SIZE_MAX) {
        while (g->n_assigned < g->n_acc && g->tok_start[g->n_assigned] < o + n) {
            size_t s = g->tok_start[g->n_assigned];
            g->tok_cpos[g->n_assigned] = s >= o ? (long long)(g->content_in + (s - o)) : -1;
            g->n_assigned++;
        }
    }
    g->content_in += n;
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
        if (g->track) place_tokens(g, ev->offset, ev->len);
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
        g->raw_out += n;
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
    if (g->gm && !g->gm_err[0]) {
        mu_err e;
        if (mu_gmatch_accept(g->gm, id, &e)) snprintf(g->gm_err, sizeof g->gm_err, "%s", e.msg);
    }
    if (g->call_phase != CALL_OFF && g->n_acc >= g->r.n_forced) call_accept(g, id);
    mu_sampler_accept(g->smp, id);
    g->n_acc++;
    mu_gen_event ev = {.kind = MU_EV_TOKEN};
    ev.tok.id = id;
    if (g->r.post_sampling && (g->r.logprobs || g->r.n_top > 0)) {
        int n = 0;
        float p = 1, pf = 0; /* llama.cpp reports 1 for a token not among the final candidates */
        if (g->sampled) n = mu_sampler_final_probs(g->smp, id, g->r.n_top, g->top_ids, g->top_probs, &pf);
        else if (g->r.n_top > 0) g->top_ids[0] = id, g->top_probs[0] = 1, n = 1; /* forced or argmax: certain */
        if (pf > 0) p = pf;
        for (int k = 0; k < n; k++) g->top_logprobs[k] = logf(g->top_probs[k]);
        ev.tok.prob = p;
        ev.tok.logprob = logf(p);
        ev.tok.n_top = n;
        ev.tok.top_ids = g->top_ids;
        ev.tok.top_probs = g->top_probs;
        ev.tok.top_logprobs = g->top_logprobs;
    } else if (g->r.logprobs || g->r.n_top > 0) {
        mu_token_probs(logits, g->n_vocab, id, g->r.n_top, &ev.tok.logprob, g->top_ids, g->top_probs,
                       g->top_logprobs);
        ev.tok.prob = expf(ev.tok.logprob);
        ev.tok.n_top = g->r.n_top;
        ev.tok.top_ids = g->top_ids;
        ev.tok.top_probs = g->top_probs;
        ev.tok.top_logprobs = g->top_logprobs;
    }
    emit(user, &ev);
    if (g->track) { /* token n_acc - 1 starts where the decoded output is now */
        if (g->n_acc > g->cap_tok) {
            int cap = g->cap_tok ? g->cap_tok * 2 : 256;
            size_t *st = realloc(g->tok_start, (size_t)cap * sizeof *st);
            if (st) g->tok_start = st;
            long long *cp = st ? realloc(g->tok_cpos, (size_t)cap * sizeof *cp) : NULL;
            if (cp) g->tok_cpos = cp;
            if (!st || !cp) g->track = false; /* out of memory: no more answer tokens are reported */
            else g->cap_tok = cap;
        }
        if (g->track) {
            g->tok_start[g->n_acc - 1] = g->raw_out;
            g->tok_cpos[g->n_acc - 1] = -1;
        }
    }
    if (g->detok) {
        const char *s;
        size_t n;
        mu_err err;
        bool keep = false; /* a preserved token: its text even when it is a control token */
        for (int i = 0; i < g->r.n_preserved && !keep; i++) keep = g->preserved[i] == id;
        if (mu_detok_push_ex(g->detok, id, keep, &s, &n, &err) == 0) out_text(g, s, n);
    }
    if (g->finish) return g->finish;
    if (!g->r.ignore_eos && mu_model_is_stop(g->model, id)) return MU_FINISH_STOP;
    if (g->cons && mu_constrain_done(g->cons)) return MU_FINISH_STOP;
    /* the grammar is complete and admits nothing more, and the end tokens
     * are banned (ignore_eos): llama.cpp would have no candidate left */
    if (g->gm && g->r.ignore_eos && mu_gmatch_finished(g->gm)) return MU_FINISH_STOP;
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
