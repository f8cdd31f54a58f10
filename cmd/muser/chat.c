/* chat.c: `muser chat`: an interactive terminal chat on one model.
 *   muser chat [-m MODEL] [--system TEXT] [--reasoning low|medium|high|xhigh]
 *              [SAMPLING...] (cli_sample_usage: --temp --top-k ... --logit-bias)
 *              [-n MAX_TOKENS_PER_ANSWER] [--ctx N] [--threads N] [--kern NAME]
 *              [--color auto|always|never] [--stats] [--ignore-eos] [--check-tensors]
 *              [--spec none|ngram|dflash] [--draft D.gguf] [--draft-max N] [--draft-min N]
 *              [--mmproj P.gguf]
 * With --mmproj, /image FILE attaches an image to the next message (a media
 * marker before its text, as llama.cpp's mtmd-cli does); a conversation with
 * images is evaluated afresh every turn (image rows are not kept as a prefix).
 * User guide: docs/chat.md.
 *
 * Owns: the conversation (a JSON array of OpenAI-shaped messages), the line
 * editor (libedit, only when stdin is a terminal; plain lines otherwise), the
 * slash commands, turning the events of a generation job into terminal text
 * (reasoning dim or between markers, answer plain, tool calls on their own
 * line) and the SIGINT policy (Ctrl-C stops the answer being generated,
 * clears the line at the prompt, never ends the program from a terminal).
 * Does not own: templates and tokenization (mu_chat_apply, mu_tokenize) or
 * generation: a scheduler with one slot (include/muser_gen.h) samples,
 * detokenizes, splits the Muse channels and applies the stop rules on its
 * engine thread; this file only reads the events of each turn's job.
 *
 * Key design choice: every turn renders the WHOLE conversation with the chat
 * template and tokenizes it, and submits it with keep_prefix: the scheduler
 * keeps the longest common prefix of the tokens its slot already holds and
 * feeds only the rest. This is always exactly what a fresh session would
 * compute (no drift between what the template says and what the cache
 * holds), and costs only the new tokens when the template is stable. When
 * the cache cannot be cut back (a sliding layer's ring has already dropped
 * the rows) the scheduler starts the slot over and feeds everything. */
#include <errno.h>
#include <histedit.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../../include/muser_gen.h"
#include "../../include/muser_kv.h"
#include "../../include/muser_lane.h"
#include "cli.h"
#include "prompt.h"

#define MAX_LINE (1u << 20) /* bytes of one user message */
#define POLL_MS 50          /* how often a running answer looks at the Ctrl-C flag */

static volatile sig_atomic_t g_interrupt;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

/* While reading input SIGINT must interrupt the blocked read (no SA_RESTART:
 * el_gets/getline return EINTR); everywhere else system calls restart, so a
 * Ctrl-C never cuts a write to the terminal short. */
static void sigint_install(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* ---- small growable string -------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_clear(sbuf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
    b->oom = false;
}

static const char *sb_str(const sbuf *b) { return b->p ? b->p : ""; }

/* ---- state ------------------------------------------------------------ */

enum { SEC_NONE, SEC_REASONING, SEC_CONTENT, SEC_TOOL };
enum { STOP_EOT, STOP_LIMIT, STOP_CONTEXT, STOP_INTERRUPT };
static const char *stop_name[] = {"eot", "limit", "context", "interrupt"};

typedef struct {
    mu_model *m;
    const mu_model_info *I;
    mu_engine *e;
    mu_sched *sched;         /* one slot: the conversation's KV state */
    mu_lane *lane;           /* --prefill auto|remote: a fresh session's prompt comes from a node */
    mu_sample_params sp;
    char *reasoning;         /* NULL: the template's default */
    char *system;            /* NULL: the template's default system text */
    json_t *msgs;            /* the conversation after the system message */
    int n_ctx;
    long long n_gen_max;     /* 0: until a stop token or the context is full */
    bool color, stats;
    bool tty_out;            /* stdout is a terminal: filter control characters */
    bool ignore_eos;         /* tests and benchmarks: never stop on eos/eot */
    bool fresh;              /* the next turn starts from an empty session (/reset, /system, /load) */
    const char *model_path;
    mu_kv_ident *kid;        /* /save, /load: the pack identity (made on first use) */
    uint8_t key[32];         /* with kid: the root key of the muser home */
    mu_mmproj *proj;         /* --mmproj, or NULL */
    mu_media *imgs;          /* the conversation's images, in marker order (bytes owned) */
    int n_imgs, n_pending;   /* n_pending: attached to the next message */
    mu_mprompt *mp;          /* the last rendered prompt with images */
    int32_t *force;          /* tests: MUSER_CHAT_FORCE_OUTPUT tokens replace sampling */
    int n_force;
    /* the answer being generated */
    int section;
    char last;               /* last byte written to stdout ('\n' at line start) */
    sbuf content, reasoning_text;
    json_t *tool_calls;
} chat;

/* ---- output ----------------------------------------------------------- */

#define DIM "\033[2m"
#define CYAN "\033[36m"
#define RESET "\033[0m"

/* Writes text. On a terminal, control characters the model (or a file name)
 * may contain are shown, not obeyed: C0 bytes other than \n and \t as ^X,
 * DEL as ^?, C1 code points (U+0080..U+009F) as U+FFFD, and \r is dropped,
 * so generated text can never move the cursor, clear the screen or retitle
 * the window. Elsewhere the bytes pass through unchanged. */
static void out(chat *c, const char *s, size_t n) {
    if (!n) return;
    if (!c->tty_out) {
        fwrite(s, 1, n, stdout);
        c->last = s[n - 1];
        return;
    }
    size_t run = 0; /* start of the pending run of harmless bytes */
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        bool c0 = (b < 0x20 && b != '\n' && b != '\t') || b == 0x7f;
        bool c1 = b == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f;
        if (!c0 && !c1) continue;
        fwrite(s + run, 1, i - run, stdout);
        if (c1) {
            fputs("\xEF\xBF\xBD", stdout);
            i++;
        } else if (b != '\r') {
            char caret[3] = {'^', b == 0x7f ? '?' : (char)(b + 64), 0};
            fputs(caret, stdout);
        }
        run = i + 1;
    }
    fwrite(s + run, 1, n - run, stdout);
    c->last = s[n - 1] == '\r' ? c->last : s[n - 1];
}

/* Our own escape sequences (colours), never filtered. */
static void esc(const char *code) { fputs(code, stdout); }

static void outs(chat *c, const char *s) { out(c, s, strlen(s)); }

static void newline_if_needed(chat *c) {
    if (c->last != '\n') outs(c, "\n");
}

/* Leaves the current section (closing its colour or marker). */
static void section_end(chat *c) {
    if (c->section == SEC_REASONING) {
        if (c->color) {
            esc(RESET);
            newline_if_needed(c);
        } else {
            newline_if_needed(c);
            outs(c, "[/reasoning]\n");
        }
    }
    c->section = SEC_NONE;
}

static void section_begin(chat *c, int sec) {
    if (c->section == sec) return;
    section_end(c);
    if (sec == SEC_REASONING) {
        newline_if_needed(c);
        if (c->color) esc(DIM);
        else outs(c, "[reasoning]\n");
    } else if (sec == SEC_CONTENT && c->last != '\n' && c->last != 0) {
        outs(c, "\n");
    }
    c->section = sec;
}

/* A short note on its own line (stdout, dim on a terminal). */
static void note(chat *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(chat *c, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    newline_if_needed(c);
    if (c->color) esc(DIM);
    outs(c, buf);
    if (c->color) esc(RESET);
    outs(c, "\n");
    fflush(stdout);
}

/* Text stored in the conversation: NUL bytes dropped (the conversation goes
 * to the template as JSON text, where a NUL cannot be). */
static void keep_text(sbuf *b, const char *s, size_t n) {
    for (const char *z; n && (z = memchr(s, 0, n));) {
        sb_add(b, s, (size_t)(z - s));
        n -= (size_t)(z - s) + 1;
        s = z + 1;
    }
    sb_add(b, s, n);
}

/* One TEXT or TOOL_CALL event of the answer: shown, and kept for the
 * assistant message. */
static void on_event(chat *c, const mu_gen_event *ev) {
    if (ev->kind == MU_EV_TEXT) {
        const char *s = ev->text; /* valid UTF-8: the job asks for it */
        size_t n = ev->len;
        bool r = ev->channel == MU_CH_REASONING;
        section_begin(c, r ? SEC_REASONING : SEC_CONTENT);
        out(c, s, n);
        keep_text(r ? &c->reasoning_text : &c->content, s, n);
    } else if (ev->kind == MU_EV_TOOL_CALL) {
        char *name = strdup(ev->name);
        size_t n = ev->len;
        const char *args = ev->text;
        section_begin(c, SEC_TOOL);
        newline_if_needed(c);
        if (c->color) esc(CYAN);
        outs(c, "[tool call] ");
        outs(c, name ? name : "");
        outs(c, " ");
        out(c, args, n);
        if (c->color) esc(RESET);
        outs(c, "\n");
        char id[32];
        snprintf(id, sizeof id, "call_%zu", json_array_size(c->tool_calls));
        json_t *call = name ? json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name",
                                        name, "arguments", args)
                            : NULL;
        if (call) json_array_append_new(c->tool_calls, call);
        free(name);
    } else {
        return;
    }
    fflush(stdout);
}

/* ---- the conversation ------------------------------------------------- */

/* The messages as the template sees them: the system message first when set. */
static json_t *conversation(const chat *c) {
    json_t *all = json_array();
    if (!all) return NULL;
    if (c->system) json_array_append_new(all, json_pack("{s:s,s:s}", "role", "system", "content", c->system));
    json_array_extend(all, c->msgs);
    return all;
}

static void chat_reset(chat *c) {
    json_array_clear(c->msgs);
    c->fresh = true;
    for (int i = 0; i < c->n_imgs; i++) free((void *)c->imgs[i].data);
    free(c->imgs);
    c->imgs = NULL;
    c->n_imgs = c->n_pending = 0;
}

/* Renders and tokenizes the conversation (with the generation prompt).
 * Prints the error line and returns 1 on failure. */
static int chat_prompt_tokens(chat *c, int32_t **ids, int *n) {
    mu_err err = {0};
    json_t *all = conversation(c);
    char *js = all ? json_dumps(all, JSON_COMPACT) : NULL;
    json_decref(all);
    if (!js) return cli_fail("muser chat: out of memory");
    char *text = NULL;
    int rc = mu_chat_apply(c->m, js, NULL, c->reasoning, true, &text, &err);
    free(js);
    if (rc) return cli_fail("muser chat: %s", err.msg);
    int32_t *t = NULL;
    int k = 0;
    const int n_sent = c->n_imgs - c->n_pending; /* images whose markers are in the messages */
    if (n_sent > 0) {
        mu_mprompt_free(c->mp);
        c->mp = NULL;
        /* BOS as for text: unless the template already rendered one */
        bool bos = c->I->add_bos && c->I->bos >= 0;
        const char *mk = strstr(text, MU_MEDIA_MARKER);
        if (bos && !mu_tokenize(c->m, text, mk ? (size_t)(mk - text) : strlen(text), false, true, &t, &k, &err)) {
            bos = !(k > 0 && t[0] == c->I->bos);
            free(t);
            t = NULL;
        }
        rc = mu_mprompt_new(c->e, c->proj, text, strlen(text), bos, c->imgs, n_sent, &c->mp, &err);
        free(text);
        if (rc) return cli_fail("muser chat: %s", err.msg);
        k = mu_mprompt_n(c->mp);
        t = malloc((size_t)k * sizeof *t);
        if (!t) return cli_fail("muser chat: out of memory");
        memcpy(t, mu_mprompt_tokens(c->mp), (size_t)k * sizeof *t);
        *ids = t;
        *n = k;
        return 0;
    }
    rc = mu_tokenize(c->m, text, strlen(text), false, true, &t, &k, &err);
    free(text);
    if (rc) return cli_fail("muser chat: %s", err.msg);
    bool bos = c->I->add_bos && c->I->bos >= 0 && !(k > 0 && t[0] == c->I->bos);
    if (bos) {
        int32_t *t2 = malloc(((size_t)k + 1) * sizeof *t2);
        if (!t2) {
            free(t);
            return cli_fail("muser chat: out of memory");
        }
        t2[0] = c->I->bos;
        if (k) memcpy(t2 + 1, t, (size_t)k * sizeof *t);
        free(t);
        t = t2;
        k++;
    }
    *ids = t;
    *n = k;
    return 0;
}

/* One user message -> one streamed answer. Returns 0, or 1 after printing
 * why (the user message is then dropped from the conversation). */
static int chat_turn(chat *c, const char *text) {
    mu_err err = {0};
    char *with_media = NULL;
    if (c->n_pending) { /* one marker per attached image, before the text */
        const size_t ml = strlen(MU_MEDIA_MARKER), tl = strlen(text);
        with_media = malloc(ml * (size_t)c->n_pending + tl + 1);
        if (!with_media) return cli_fail("muser chat: out of memory");
        for (int i = 0; i < c->n_pending; i++) memcpy(with_media + ml * (size_t)i, MU_MEDIA_MARKER, ml);
        memcpy(with_media + ml * (size_t)c->n_pending, text, tl + 1);
        text = with_media;
    }
    json_t *content = json_string(text);
    free(with_media);
    if (!content) return cli_fail("muser chat: the message is not valid UTF-8");
    const int pending = c->n_pending;
    c->n_pending = 0;
    json_t *msg = json_pack("{s:s,s:o}", "role", "user", "content", content);
    if (!msg || json_array_append_new(c->msgs, msg)) return cli_fail("muser chat: out of memory");
    size_t n_msgs = json_array_size(c->msgs);

    int32_t *ids = NULL;
    int n = 0, rc = 1;
    mu_job *job = NULL;
    if (chat_prompt_tokens(c, &ids, &n)) goto drop;
    if (n == 0) {
        cli_fail("muser chat: the template rendered an empty prompt");
        goto drop;
    }
    if (n + 1 > c->n_ctx) {
        cli_fail("muser chat: the conversation (%d tokens) does not fit the context (%d); /reset or a larger --ctx",
                 n, c->n_ctx);
        goto drop;
    }
    /* MUSER_CHAT_FORCE_OUTPUT: the answer is the forced tokens and ends after the last */
    int n_predict = c->n_gen_max ? (int)c->n_gen_max : -1;
    bool force_ends = c->force && (n_predict < 0 || n_predict > c->n_force);
    if (force_ends) n_predict = c->n_force;
    mu_gen_req q = {.prompt = ids,
                    .n_prompt = n,
                    .n_predict = n_predict,
                    .sp = c->sp,
                    .ignore_eos = c->ignore_eos,
                    .chat = true,
                    .valid_utf8 = true,
                    .keep_prefix = !c->fresh,
                    .media = c->n_imgs ? c->mp : NULL,
                    .forced = c->force,
                    .n_forced = c->force ? c->n_force : 0,
                    .progress = cli_prefill_wanted()};
    g_interrupt = 0;
    /* remote prefill: a fresh session's prompt, and a later turn's new
     * tokens as a delta on the session's kept prefix (the node replays the
     * forwards that made it; under a step of new tokens: local) */
    bool remote = false;
    if (c->lane && mu_lane_prepare(c->lane, &q, &remote, &err)) {
        cli_fail("muser chat: remote prefill failed: %s", err.msg);
        goto drop;
    }
    if (remote && q.install_class) /* the session now holds rows of two kernel classes: say so */
        note(c, "[prefilled by the node, kernel class %s: the answers equal local prefill's under the tie-aware rule]",
             q.install_class);
    if (mu_sched_submit(c->sched, &q, 1, &job, &err)) {
        if (q.install_free) q.install_free(q.install_user);
        cli_fail("muser chat: %s", err.msg);
        goto drop;
    }
    c->fresh = false;

    sb_clear(&c->content);
    sb_clear(&c->reasoning_text);
    json_array_clear(c->tool_calls);
    c->section = SEC_NONE;
    c->last = '\n';

    /* read the job's events until FINISH; Ctrl-C cancels it */
    mu_gen_event ev;
    int32_t last_id = -1;
    bool cancelled = false;
    cli_prefill pf = {0};
    for (;;) {
        if (g_interrupt && !cancelled) {
            mu_job_cancel(job);
            cancelled = true;
        }
        if (mu_job_next(job, &ev, POLL_MS) != 1) continue;
        if (ev.kind == MU_EV_TOKEN) last_id = ev.tok.id;
        else if (ev.kind == MU_EV_PROGRESS) cli_prefill_event(&pf, ev.n_done, ev.n_total);
        else if (ev.kind == MU_EV_FINISH) break;
        else on_event(c, &ev);
    }
    cli_prefill_end(&pf);
    const mu_gen_stats st = ev.stats;
    if (ev.finish == MU_FINISH_ERROR) {
        cli_fail("muser chat: %s", *ev.err ? ev.err : "generation failed");
        goto drop_answer;
    }
    if (ev.finish == MU_FINISH_CANCEL && st.n_gen == 0) { /* stopped while the prompt was fed */
        note(c, "[stopped]");
        rc = 0;
        goto drop;
    }
    int stop = STOP_EOT;
    if (ev.finish == MU_FINISH_CANCEL) stop = STOP_INTERRUPT;
    else if (ev.finish == MU_FINISH_CTX) stop = STOP_CONTEXT;
    else if (ev.finish == MU_FINISH_LENGTH && !force_ends) stop = STOP_LIMIT;
    /* the stop token ends the answer; it is not part of it */
    int n_gen = st.n_gen;
    if (ev.finish == MU_FINISH_STOP && n_gen > 0 && mu_model_is_stop(c->m, last_id)) n_gen--;

    section_end(c);
    newline_if_needed(c);
    if (stop == STOP_INTERRUPT) note(c, "[stopped]");
    if (stop == STOP_CONTEXT) note(c, "[the context is full (%d tokens): /reset to start over]", c->n_ctx);
    fflush(stdout);

    /* the texts are valid UTF-8 (the job asks for valid_utf8) */
    json_t *a = json_pack("{s:s,s:o}", "role", "assistant", "content", json_stringn(sb_str(&c->content), c->content.n));
    bool bad = !a || c->content.oom || c->reasoning_text.oom;
    if (!bad && c->reasoning_text.n)
        bad = json_object_set_new(a, "reasoning_content", json_stringn(c->reasoning_text.p, c->reasoning_text.n));
    if (!bad && json_array_size(c->tool_calls))
        bad = json_object_set_new(a, "tool_calls", json_deep_copy(c->tool_calls));
    if (bad) json_decref(a);
    if (bad || json_array_append_new(c->msgs, a)) {
        cli_fail("muser chat: out of memory");
        goto drop_answer;
    }
    if (c->stats) {
        double gen_s = st.gen_ms / 1e3;
        int n_fed = st.n_prompt - st.n_reused;
        fprintf(stderr, "[stats] answer %d tokens (%s) %.1f tok/s; prompt %d tokens (%d reused, %d fed) %.3f s\n",
                n_gen, stop_name[stop], gen_s > 0 && st.n_gen > 1 ? (st.n_gen - 1) / gen_s : 0.0, st.n_prompt,
                st.n_reused, n_fed, (st.queue_ms + st.prompt_ms) / 1e3);
        if (st.n_spec_steps > 0)
            fprintf(stderr, "[stats] drafts %d, accepted %d (%.1f%%), %.2f per verification step\n", st.n_draft,
                    st.n_draft_accepted, st.n_draft ? 100.0 * st.n_draft_accepted / st.n_draft : 0.0,
                    (double)st.n_draft_accepted / st.n_spec_steps);
    }
    g_interrupt = 0;
    mu_job_free(job);
    free(ids);
    return 0;

drop_answer:
    section_end(c);
    if (c->color) fputs(RESET, stdout);
    newline_if_needed(c);
    fflush(stdout);
drop:
    g_interrupt = 0;
    mu_job_free(job);
    free(ids);
    if (json_array_size(c->msgs) == n_msgs) {
        json_array_remove(c->msgs, n_msgs - 1);
        c->n_pending = pending; /* the images stay attached to the next message */
    }
    return rc;
}

/* ---- commands --------------------------------------------------------- */

static const char *help_text =
    "commands:\n"
    "  /reset            forget the conversation (the system prompt stays)\n"
    "  /system [TEXT]    set the system prompt (none: the template's default) and reset\n"
    "  /reasoning LEVEL  low, medium, high or xhigh (applies to the whole conversation)\n"
    "  /save FILE        save the conversation as a JSON array of messages, and its KV state\n"
    "                    as the pack FILE.kv (docs/kvpack.md)\n"
    "  /load FILE        replace the conversation with a saved one (and its KV state from\n"
    "                    FILE.kv when that pack is there and fits this model and context)\n"
    "  /image FILE       attach an image (PNG, JPEG, WebP) to the next message (needs --mmproj)\n"
    "  /help             this text\n"
    "  /quit             leave (Ctrl-D too)\n"
    "keys: Ctrl-C stops an answer or clears the line; a line ending in \\ continues on the next;\n"
    "      start a message with // to send a line that begins with /\n";

static bool valid_reasoning(const char *s) {
    return !strcmp(s, "low") || !strcmp(s, "medium") || !strcmp(s, "high") || !strcmp(s, "xhigh");
}

static char *dup_or_null(const char *s) {
    if (!s || !*s) return NULL;
    return strdup(s);
}

static bool valid_utf8(const char *s) {
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

/* ---- the KV state as a pack (the slot's, through the scheduler) ------------ */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} op_wait;

static void op_notify(void *user) {
    op_wait *w = user;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Saves or restores the slot's KV state as the pack dir; 0 or the status. */
static int kv_slot(chat *c, mu_slot_action act, const char *dir, mu_slot_result *res, mu_err *err) {
    if (!c->kid && (mu_kv_root_key(NULL, c->key, err) || mu_kv_ident_new(c->e, c->model_path, &c->kid, err)))
        return err->code ? err->code : MU_E_STATE;
    op_wait w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    mu_slot_req rq = {.action = act, .slot = 0, .dir = dir, .id = c->kid, .key = c->key};
    mu_slot_op *op = NULL;
    int rc = mu_sched_slot_submit(c->sched, &rq, op_notify, &w, &op, err);
    if (!rc) {
        pthread_mutex_lock(&w.mu);
        while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        mu_slot_op_result(op, &rc, res, err);
        mu_slot_op_free(op);
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}

static void cmd_save(chat *c, const char *path) {
    json_t *all = conversation(c);
    if (!all || json_dump_file(all, path, JSON_INDENT(2) | JSON_ENSURE_ASCII) != 0) {
        cli_fail("muser chat: cannot write %s: %s", path, errno ? strerror(errno) : "out of memory");
        json_decref(all);
        return;
    }
    size_t n_msgs = json_array_size(all);
    json_decref(all);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s.kv", path);
    mu_slot_result res = {0};
    mu_err err = {0};
    if (c->fresh || json_array_size(c->msgs) == 0)
        note(c, "[saved %zu messages to %s; no KV state to save yet]", n_msgs, path);
    else if (kv_slot(c, MU_SLOT_SAVE, dir, &res, &err))
        note(c, "[saved %zu messages to %s; the KV state was not saved: %s]", n_msgs, path, err.msg);
    else
        note(c, "[saved %zu messages to %s and the KV state (%d tokens) to %s]", n_msgs, path, res.n_tokens, dir);
}

/* Loads a JSON array of {role, content, ...} messages; a leading system
 * message becomes the system prompt. The KV cache is reset. */
static bool cmd_load(chat *c, const char *path) {
    json_error_t je;
    json_t *a = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!a) {
        if (je.line > 0) cli_fail("muser chat: /load %s: line %d: %s", path, je.line, je.text);
        else cli_fail("muser chat: /load: %s", je.text);
        return false;
    }
    if (!json_is_array(a)) {
        cli_fail("muser chat: %s: expected a JSON array of messages", path);
        json_decref(a);
        return false;
    }
    size_t i;
    json_t *m;
    json_array_foreach(a, i, m) {
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role) || (content && !json_is_string(content) && !json_is_array(content) && !json_is_null(content))) {
            cli_fail("muser chat: %s: message %zu needs a string \"role\" and a string or list \"content\"", path, i);
            json_decref(a);
            return false;
        }
    }
    char *sys = NULL;
    json_t *first = json_array_get(a, 0);
    bool has_sys = first && !strcmp(json_string_value(json_object_get(first, "role")), "system") &&
                   json_is_string(json_object_get(first, "content"));
    if (has_sys) {
        sys = strdup(json_string_value(json_object_get(first, "content")));
        json_array_remove(a, 0);
    }
    json_t *all = json_array();
    if (!all || json_array_extend(all, a)) {
        cli_fail("muser chat: out of memory");
        json_decref(all);
        json_decref(a);
        free(sys);
        return false;
    }
    json_decref(a);
    /* check that it renders before replacing the current conversation */
    json_t *saved_msgs = c->msgs;
    char *saved_sys = c->system;
    c->msgs = all;
    c->system = sys;
    int32_t *ids = NULL;
    int n = 0;
    if (chat_prompt_tokens(c, &ids, &n)) {
        c->msgs = saved_msgs;
        c->system = saved_sys;
        json_decref(all);
        free(sys);
        return false;
    }
    free(ids);
    json_decref(saved_msgs);
    free(saved_sys);
    c->fresh = true;
    note(c, "[loaded %zu messages from %s (%d tokens)]", json_array_size(c->msgs) + (sys ? 1 : 0), path, n);
    return true;
}

/* Returns 1 to quit, 0 otherwise. */
static int run_command(chat *c, const char *line) {
    char name[32];
    size_t k = strcspn(line, " \t");
    const char *arg = line + k;
    while (*arg == ' ' || *arg == '\t') arg++;
    snprintf(name, sizeof name, "%.*s", (int)(k < 31 ? k : 31), line);
    if (!strcmp(name, "/quit") || !strcmp(name, "/exit") || !strcmp(name, "/q")) return 1;
    if (!strcmp(name, "/help") || !strcmp(name, "/?")) {
        fputs(help_text, stdout);
        c->last = '\n';
    } else if (!strcmp(name, "/reset") || !strcmp(name, "/clear")) {
        chat_reset(c);
        note(c, "[conversation cleared]");
    } else if (!strcmp(name, "/system")) {
        if (!valid_utf8(arg)) {
            cli_fail("muser chat: the system prompt is not valid UTF-8");
            return 0;
        }
        free(c->system);
        c->system = dup_or_null(arg);
        chat_reset(c);
        note(c, c->system ? "[system prompt set; conversation cleared]"
                          : "[system prompt: the template's default; conversation cleared]");
    } else if (!strcmp(name, "/reasoning")) {
        if (!valid_reasoning(arg)) {
            cli_fail("muser chat: /reasoning takes low, medium, high or xhigh");
        } else {
            free(c->reasoning);
            c->reasoning = strdup(arg);
            note(c, "[reasoning strength: %s]", arg);
        }
    } else if (!strcmp(name, "/image")) {
        if (!c->proj) cli_fail("muser chat: /image needs a vision projector (--mmproj)");
        else if (!*arg) cli_fail("muser chat: /image needs a file name");
        else {
            char *bytes = NULL;
            size_t nb = 0;
            mu_media *ni = realloc(c->imgs, ((size_t)c->n_imgs + 1) * sizeof *ni);
            if (!ni) cli_fail("muser chat: out of memory");
            else if (!(c->imgs = ni, cli_read_file(arg, &bytes, &nb))) {
                c->imgs[c->n_imgs++] = (mu_media){bytes, nb};
                c->n_pending++;
                note(c, "[image %s attached to the next message]", arg);
            }
        }
    } else if (!strcmp(name, "/save")) {
        if (!*arg) cli_fail("muser chat: /save needs a file name");
        else cmd_save(c, arg);
    } else if (!strcmp(name, "/load")) {
        if (!*arg) cli_fail("muser chat: /load needs a file name");
        else if (cmd_load(c, arg)) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s.kv", arg);
            mu_slot_result res = {0};
            mu_err err = {0};
            if (access(dir, F_OK)) {
                /* a conversation saved without its KV state: evaluated afresh */
            } else if (kv_slot(c, MU_SLOT_RESTORE, dir, &res, &err)) {
                note(c, "[the KV state in %s was not restored (%s): the conversation will be evaluated]", dir,
                     err.msg);
            } else {
                c->fresh = false; /* the next turn continues the restored state */
                note(c, "[restored the KV state (%d tokens) from %s]", res.n_tokens, dir);
            }
        }
    } else {
        cli_fail("muser chat: unknown command %s (/help lists them)", name);
    }
    fflush(stdout);
    return 0;
}

/* ---- input ------------------------------------------------------------ */

typedef struct {
    bool tty;
    EditLine *el;
    History *hist;
    char *line;       /* getline buffer (non-terminal input) */
    size_t line_cap;
} input;

static const char *g_prompt = "> ";
static char *prompt_fn(EditLine *el) {
    (void)el;
    return (char *)g_prompt;
}

static int input_open(input *in) {
    memset(in, 0, sizeof *in);
    in->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (!in->tty) return 0;
    in->el = el_init("muser", stdin, stdout, stderr);
    in->hist = history_init();
    if (!in->el || !in->hist) return cli_fail("muser chat: cannot start the line editor");
    HistEvent ev;
    history(in->hist, &ev, H_SETSIZE, 1000);
    history(in->hist, &ev, H_SETUNIQUE, 1);
    el_set(in->el, EL_PROMPT, prompt_fn);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_HIST, history, in->hist);
    el_source(in->el, NULL); /* the user's ~/.editrc, if any */
    return 0;
}

static void input_close(input *in) {
    if (in->el) el_end(in->el);
    if (in->hist) history_end(in->hist);
    free(in->line);
}

/* Reads one physical line without its newline into *b.
 * Returns 1 (a line), 0 (end of input) or -1 (interrupted by Ctrl-C). */
static int input_read1(input *in, const char *prompt, sbuf *b) {
    sb_clear(b);
    if (in->tty) {
        g_prompt = prompt;
        int n = 0;
        el_resize(in->el); /* the window may have changed size while the model wrote */
        sigint_install(false);
        errno = 0;
        const char *s = el_gets(in->el, &n);
        int e = errno;
        sigint_install(true);
        errno = e;
        if (!s) {
            if (n < 0 && errno == EINTR) return -1;
            return 0;
        }
        if (n > 0 && s[n - 1] == '\n') n--;
        sb_add(b, s, (size_t)n);
        return 1;
    }
    sigint_install(false);
    errno = 0;
    ssize_t n = getline(&in->line, &in->line_cap, stdin);
    int e = errno;
    sigint_install(true);
    errno = e;
    if (n < 0) {
        if (errno == EINTR) {
            clearerr(stdin);
            return -1;
        }
        return 0;
    }
    if (n > 0 && in->line[n - 1] == '\n') n--;
    if (n > 0 && in->line[n - 1] == '\r') n--;
    sb_add(b, in->line, (size_t)n);
    return 1;
}

/* Reads one message: lines ending in a backslash continue on the next.
 * Returns 1, 0 (end of input) or -1 (Ctrl-C: the message is dropped). */
static int input_message(input *in, sbuf *msg) {
    sbuf part = {0};
    sb_clear(msg);
    int rc;
    for (const char *prompt = "> ";; prompt = "... ") {
        rc = input_read1(in, prompt, &part);
        if (rc <= 0) break;
        if (part.n && part.p[part.n - 1] == '\\') {
            sb_add(msg, part.p, part.n - 1);
            sb_add(msg, "\n", 1);
            continue;
        }
        sb_add(msg, sb_str(&part), part.n);
        break;
    }
    free(part.p);
    if (rc == 0 && msg->n) rc = 1; /* end of input after a continued line: send what we have */
    if (rc == 1 && msg->oom) {
        cli_fail("muser chat: out of memory");
        return -1;
    }
    if (rc == 1 && msg->n > MAX_LINE) {
        cli_fail("muser chat: the message is longer than %u bytes", MAX_LINE);
        return -1;
    }
    if (rc == 1 && in->tty && msg->n) {
        HistEvent ev;
        history(in->hist, &ev, H_ENTER, msg->p);
    }
    return rc;
}

/* ---- the command ------------------------------------------------------ */

static int usage(void) {
    fprintf(stderr,
            "usage: muser chat [-m MODEL] [--system TEXT] [--reasoning low|medium|high|xhigh] [SAMPLING...]\n"
            "                  [-n MAX_TOKENS_PER_ANSWER] [--ctx N] [--threads N] [--kern ref|avx2|avx512|amx|neon]\n"
            "                  " CLI_BACKEND_USAGE "\n"
            "                  [--color auto|always|never] [--stats] [--ignore-eos] [--check-tensors]\n"
            "                  [--spec none|ngram|dflash] [--draft D.gguf] [--draft-max N] [--draft-min N]\n"
            "                  " CLI_LANE_USAGE "\n"
            "                  [--mmproj P.gguf]   a vision projector: /image FILE in the chat\n"
            "Interactive chat; type /help inside for commands. Reads one message per line when\n"
            "stdin is not a terminal. Details: docs/chat.md.\n%s",
            cli_sample_usage());
    return 1;
}

static int chat_loop(chat *c, input *in) {
    sbuf msg = {0};
    int rc = 0;
    for (;;) {
        g_interrupt = 0;
        int r = input_message(in, &msg);
        if (r == 0) {
            if (in->tty) fputs("\n", stdout);
            break;
        }
        if (r < 0) {
            if (!in->tty) { /* Ctrl-C while a script feeds us: leave as a shell would */
                rc = 130;
                break;
            }
            fputs("^C\n", stdout); /* the typed line is dropped */
            continue;
        }
        const char *text = msg.p;
        size_t skip = strspn(text, " \t\n");
        if (!text[skip]) continue;
        if (text[0] == '/' && text[1] != '/') {
            if (run_command(c, text)) break;
            continue;
        }
        if (text[0] == '/') text++; /* "//x" sends "/x" */
        chat_turn(c, text);
    }
    free(msg.p);
    fflush(stdout);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *system = NULL, *reasoning = NULL, *kern = NULL, *color = "auto", *mmproj = NULL;
    long long n_gen = 0, threads = 0, ctx = 0;
    mu_sample_params sp = mu_sample_defaults();
    cli_backend backend = CLI_BACKEND_DEFAULT;
    bool stats = false, ignore_eos = false, check = false;
    cli_spec spec = {0};
    cli_lane lane = {0};
    for (int i = 1; i < argc; i++) {
        int lo = cli_lane_opt("muser chat", argc, argv, &i, &lane);
        if (lo < 0) return 1;
        if (lo) continue;
        int so = cli_sample_opt("muser chat", argc, argv, &i, &sp);
        if (so == 0) so = cli_spec_opt("muser chat", argc, argv, &i, &spec);
        if (so < 0) return 1;
        if (so) continue;
        int bo = cli_backend_opt("muser chat", argc, argv, &i, &backend);
        if (bo < 0) return 1;
        if (bo) continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                               \
    do {                                                                     \
        if (!v) return cli_fail("muser chat: option %s needs a value", a); \
        i++;                                                                 \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model = v; }
        else if (!strcmp(a, "--system")) { NEED(); system = v; if (!valid_utf8(v)) return cli_fail("muser chat: --system is not valid UTF-8"); }
        else if (!strcmp(a, "--reasoning")) { NEED(); reasoning = v; if (!valid_reasoning(v)) return cli_fail("muser chat: --reasoning must be low, medium, high or xhigh: %s", v); }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { NEED(); if (!cli_int(v, 0, 1 << 24, &n_gen)) return cli_fail("muser chat: -n must be an integer >= 0 (0: no limit): %s", v); }
        else if (!strcmp(a, "--threads")) { NEED(); if (!cli_int(v, 1, 512, &threads)) return cli_fail("muser chat: --threads must be 1..512: %s", v); }
        else if (!strcmp(a, "--ctx")) { NEED(); if (!cli_int(v, 16, 1 << 24, &ctx)) return cli_fail("muser chat: --ctx must be an integer >= 16: %s", v); }
        else if (!strcmp(a, "--kern")) { NEED(); kern = v; }
        else if (!strcmp(a, "--color")) { NEED(); color = v; if (strcmp(v, "auto") && strcmp(v, "always") && strcmp(v, "never")) return cli_fail("muser chat: --color must be auto, always or never: %s", v); }
        else if (!strcmp(a, "--stats")) stats = true;
        else if (!strcmp(a, "--check-tensors")) check = true;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(a, "--mmproj")) { NEED(); mmproj = v; }
        else return cli_fail("muser chat: unknown option '%s' (see muser chat --help)", a);
#undef NEED
    }
    if (!model && !(model = cli_default_model())) return 1;

    chat c = {0};
    input in = {0};
    int rc = 1;
    mu_err err = {0};
    if (mu_model_open(model, &c.m, &err)) return cli_fail("muser chat: %s", err.msg);
    c.model_path = model;
    c.I = mu_model_get_info(c.m);
    if (check && cli_check_model("muser chat", c.m, (int)threads, false)) goto done;
    if (!mu_model_tokenizer(c.m)) {
        cli_fail("muser chat: %s has no tokenizer", model);
        goto done;
    }
    const char *tmpl = mu_model_chat_template(c.m);

    c.n_ctx = ctx ? (int)ctx : (c.I->n_ctx_train < 4096 ? c.I->n_ctx_train : 4096);
    if (c.n_ctx > c.I->n_ctx_train) {
        cli_fail("muser chat: --ctx %d exceeds the model's context (%d)", c.n_ctx, c.I->n_ctx_train);
        goto done;
    }
    c.sp = sp;
    c.n_gen_max = n_gen;
    c.stats = stats;
    c.ignore_eos = ignore_eos;
    c.tty_out = isatty(STDOUT_FILENO);
    c.color = !strcmp(color, "always") ||
              (!strcmp(color, "auto") && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") &&
               !(getenv("TERM") && !strcmp(getenv("TERM"), "dumb")));
    c.system = dup_or_null(system);
    c.reasoning = reasoning ? strdup(reasoning) : NULL;
    c.msgs = json_array();
    c.tool_calls = json_array();
    if (!c.msgs || !c.tool_calls || (system && !c.system) || (reasoning && !c.reasoning)) {
        cli_fail("muser chat: out of memory");
        goto done;
    }
    mu_engine_opts eo = cli_engine_opts(&backend, (int)threads, kern);
    if (mu_engine_new(c.m, &eo, &c.e, &err)) {
        cli_fail("muser chat: %s", err.msg);
        goto done;
    }
    if (cli_spec_open("muser chat", &spec, c.e, model)) goto done;
    if (mmproj && mu_mmproj_open(mmproj, c.m, &c.proj, &err)) {
        cli_fail("muser chat: %s", err.msg);
        goto done;
    }
    /* the engine thread never takes SIGINT: it must reach this thread, to
     * interrupt a blocked read at the prompt */
    sigset_t block, prev;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &prev);
    /* MUSER_TEST_STALL_AFTER=N (tests only): an answer stops after N tokens
     * and waits for Ctrl-C, so a test of streaming needs no timing */
    const char *stall = getenv("MUSER_TEST_STALL_AFTER");
    mu_sched_opts so = {.n_slots = 1, .n_ctx = c.n_ctx, .queue_max = 1, .stall_after = stall ? atoi(stall) : 0,
                        .spec = (mu_spec)spec.spec, .draft_max = spec.draft_max, .draft_min = spec.draft_min,
                        .drafter = spec.drafter};
    int src = mu_sched_new(c.e, &so, &c.sched, &err);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    if (src) {
        cli_fail("muser chat: %s", err.msg);
        goto done;
    }
    mu_lane_opts lopts = {.mode = (mu_prefill_mode)lane.mode, .node = lane.node, .n_ctx = c.n_ctx,
                          .breaker_failures = lane.breaker_n, .breaker_s = lane.breaker_s, .sched = c.sched};
    if (mu_lane_new(c.e, model, &lopts, &c.lane, &err)) {
        cli_fail("muser chat: %s", err.msg);
        goto done;
    }
    const char *force = getenv("MUSER_CHAT_FORCE_OUTPUT");
    if (force && *force && mu_tokenize(c.m, force, strlen(force), false, true, &c.force, &c.n_force, &err)) {
        cli_fail("muser chat: MUSER_CHAT_FORCE_OUTPUT: %s", err.msg);
        goto done;
    }
    /* check the template once before the first message */
    int32_t *probe = NULL;
    int n_probe = 0;
    if (chat_prompt_tokens(&c, &probe, &n_probe)) goto done;
    free(probe);

    if (input_open(&in)) goto done;
    struct sigaction old;
    sigaction(SIGINT, NULL, &old);
    sigint_install(true);
    if (in.tty)
        printf("muser chat: %s, context %d tokens, %s template. /help for commands, Ctrl-D to quit.\n",
               *c.I->name ? c.I->name : model, c.n_ctx, tmpl && *tmpl ? "GGUF" : "built-in Muse");
    fflush(stdout);
    rc = chat_loop(&c, &in);
    sigaction(SIGINT, &old, NULL);

done:
    input_close(&in);
    mu_sched_free(c.sched);
    mu_lane_free(c.lane);
    mu_kv_ident_free(c.kid);
    mu_kv_key_wipe(c.key);
    mu_drafter_free(spec.drafter);
    chat_reset(&c);
    mu_mprompt_free(c.mp);
    mu_engine_free(c.e);
    mu_mmproj_free(c.proj);
    mu_model_close(c.m);
    json_decref(c.msgs);
    json_decref(c.tool_calls);
    free(c.force);
    free(c.system);
    free(c.reasoning);
    free(c.content.p);
    free(c.reasoning_text.p);
    return rc;
}
