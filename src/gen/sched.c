/* sched.c: slots, the bounded queue and the engine thread (include/muser_gen.h).
 * Owns: job lifetime (reference counted between the reader and the engine
 * thread), slot assignment, batching, KV prefix reuse between the jobs of
 * one slot, the n choices of a request, the events queue of each job, and
 * aggregate metrics.
 * Does not own: what happens to a token (gen.c decides it: sampling,
 * constraints, text, stop rules); this file only drives gen steps.
 * Design: a single engine thread is the only thread that ever touches a
 * mu_session or a job's mu_gen. Each step it builds one batch holding one
 * decode token for every generating slot plus prompt chunks of slots that are
 * still prefilling (bounded per step so decoding slots keep their pace), and
 * calls mu_forward once; then each slot with logits takes one gen step, and
 * the events it emits are queued on the job for the reader (mu_job_next).
 * The n choices of one request are n jobs in a group: the first to reach a
 * slot (the leader) evaluates the prompt; the others wait, then copy its KV
 * state and final logits (mu_session_state_save/load) instead of evaluating
 * the prompt again.
 * Prompt reuse (keep_prefix jobs): the slot's own common prefix first, then
 * the prefix cache and its pack store (mu_sched_opts.cache, src/kv) when
 * they hold more; after every forward each slot's completed blocks are
 * handed to the cache, and every change to a session's rows that does not
 * come from its own forwards cuts its lineage (hist_cut,
 * mu_kv_lineage_foreign) so the cache never files rows under the wrong
 * parent.
 * Speculative decoding (docs/speculative.md): a job with a draft method
 * feeds its last token and up to draft_max drafted ones as one solo item
 * (mu_batch_item.solo: logits bit-identical to one decode step per token),
 * placed last in the batch; the target's own pick at each row is compared
 * with the draft (llama.cpp's sample-and-compare), the agreeing prefix and
 * the first pick after it are accepted one by one through gen.c, and the
 * session is truncated back past the rejected drafts. While drafting does
 * not pay (draft_pays), the job's steps are ordinary decode items. A
 * dflash job's items also capture the target's layer inputs
 * (mu_batch_item.feat), which the slot's drafter rows (mu_draft_seq) take
 * in after every forward and drop with the session's rejected drafts. */
#include "../../include/muser_gen.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/mem.h"
#include "embed.h"
#include "gen.h"
#include "ngram.h"
#include "spec_cost.h"

/* Shared by the jobs of one request (n choices). refs is touched by any
 * thread; everything else only by the engine thread. */
typedef struct {
    atomic_int refs;
    int n;                /* the request's choices */
    int leader;           /* slot evaluating the prompt, -1 when none */
    bool ready, failed;   /* prompt state there to take / cannot be shared (each job evaluates) */
    int past;             /* the leader's positions after the prompt */
    void *state;          /* that state as bytes when a member was still queued at ready, else NULL */
    size_t state_n;
    float *logits;        /* [n_vocab] after the prompt */
} group;

static void group_unref(group *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    free(g->state);
    free(g->logits);
    free(g);
}

/* A queued event: the record with its strings and arrays as offsets into
 * the job's arena (which may move as it grows). */
typedef struct {
    mu_gen_event ev;
    size_t text, name, stop_word, err, top_ids, top_probs, top_logprobs;
} qev;

/* The draft length that pays (draft()): per draft position, how often it
 * was verified after an accepted prefix and how often it was accepted; and
 * the pause of an estimate under which none pays. */
typedef struct {
    int n[MU_SPEC_DRAFT_MAX], acc[MU_SPEC_DRAFT_MAX];
    int n_paused;         /* plain steps since the estimate stopped drafting */
    bool probing;         /* n-gram: this step's draft is a probe of a paused estimate */
} spec_rates;

struct mu_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    atomic_bool cancel;
    /* input (immutable after submit) */
    int32_t *prompt;
    int n_prompt;
    const mu_mprompt *media; /* mu_gen_req.media: image rows at the prompt's negative ids */
    bool media_take;         /* mu_gen_req.media_take: freed with the job */
    bool keep_prefix;
    int want_slot;        /* the slot it must run in (mu_gen_req.pin_slot), or -1 */
    bool progress;        /* MU_EV_PROGRESS events (mu_gen_req.progress) */
    double t_progress;    /* now_ms() of the first PROGRESS event (0: none yet) */
    int (*install)(void *user, mu_session *s, mu_err *err); /* mu_gen_req.install */
    void *install_user;
    int n_installed;
    void (*install_free)(void *user);
    int (*save)(void *user, const mu_session *s, const int32_t *tokens, int n, int32_t last, mu_err *err); /* mu_gen_req.save */
    void *save_user;
    void (*save_free)(void *user);
    const char *install_class; /* mu_gen_req.install_class (lives as long as install_user) */
    uint64_t ticket;      /* mu_gen_req.slot_ticket: the slot reserved for it (0: none) */
    int install_keep, install_step; /* mu_gen_req */
    int max_new;          /* most tokens the job may generate */
    bool ctx_shift;       /* shifts its context when the slot fills (mu_sched_opts.ctx_shift) */
    int n_keep, n_discard; /* mu_gen_req */
    mu_spec spec;
    int draft_max, draft_min;
    int32_t *script;      /* MU_SPEC_SCRIPT drafts */
    int n_script;
    spec_rates rt;        /* the rates of the job's drafts (its spec's) */
    /* dflash: n-gram lookups (ngram's) draft before the drafter while their
     * own rates say they pay; a step they drafted is blk_ngram */
    bool use_ngram, blk_ngram; /* use_ngram: until a context shift ends drafting */
    spec_rates ng;
    /* while paused: a shadow draft (made, not verified) compared with the
     * tokens plain decoding picks next, feeding rt like a verification.
     * dflash: probes come every probe_every plain steps, doubling while the
     * estimate stays paused (draft()), and the shadow's tokens are the
     * drafter's kept rows; ngram, in a busy batch: a lookup (no forward) on
     * every plain step without one in progress, its tokens in shadow */
    int n_shadow, i_shadow, probe_every;
    int32_t shadow[MU_SPEC_DRAFT_MAX];
    /* dflash: the drafter's kept rows (mu_draft_seq_pass) of the last pass
     * are row_n; this step's drafts are rows from row_blk; row_next > 0:
     * every draft and the token after them matched rows < row_next, so the
     * next step drafts on from row_next without a new pass */
    int row_n, row_blk, row_next;
    bool cold;            /* dflash: drafting does not pay: the last verification did not, nor do
                             the rates (dflash_pays), and no shadow held all through since; a new
                             job drafts */
    group *grp;
    mu_sched *sched;
    bool queued;          /* in the queue (guarded by sched->mu) */
    mu_gen *gen;          /* engine thread only after submit (or the canceller of a queued job) */
    /* events, guarded by mu */
    qev *evs;
    int n_ev, cap_ev, n_read;
    int n_pub;            /* events readable: a token's events (its TOKEN, TEXT, ...) become
                             readable together, when mu_gen_accept returns (job_hold) */
    bool holding;         /* the engine thread is inside mu_gen_accept: events wait for it */
    char *arena;
    size_t n_arena, cap_arena;
    bool ended;           /* FINISH queued */
    int n_waiting;        /* readers blocked in mu_job_next (wake them per event) */
    bool finish_read;     /* FINISH handed to the reader */
    /* the reader's wake-up (mu_job_set_notify): nmu is held while fn runs,
     * so clearing it waits for a call in progress */
    pthread_mutex_t nmu;
    atomic_bool has_notify;
    void (*notify)(void *user);
    void *notify_user;
    /* reader-owned copy of the last event's strings */
    char *rbuf;
    size_t cap_rbuf;
    /* embedding jobs: the final chunk's rows [n_embd_cap][n_embd] (engine
     * thread), then the result (read after FINISH) */
    mu_embd_pooling embd_pool;
    int embd_norm, n_embd, n_embd_cap, n_embd_rows;
    float *embd_rows;
    const float *embd;
    /* engine thread */
    mu_gen_stats st;
    int n_gen;
    int n_prompt_fed;     /* prompt tokens this job evaluated (for the metrics' throughput) */
    double t_submit, t_start, t_first;
    mu_job *next;         /* queue link */
};

typedef struct {
    mu_session *sess;
    mu_job *job;
    bool started;         /* the job's session is prepared */
    bool waiting;         /* a group member waiting for the leader's prompt state */
    int n_fed;            /* prompt tokens already in the session */
    int32_t last;         /* token to feed next when decoding */
    int32_t *hist;        /* [n_ctx] tokens whose KV the session holds (prefix reuse) */
    int n_hist;
    mu_ngram *ng;         /* the n-gram drafter (MU_SPEC_NGRAM jobs, dflash jobs' lookups; made on first use) */
    mu_draft_seq *dq;     /* the DFlash drafter's rows of this slot's positions (with a drafter) */
    float *feat;          /* [rows][n_feat] the target's hidden states of this step's item */
    int32_t blk[1 + MU_SPEC_DRAFT_MAX]; /* last token + drafts fed this step */
    mu_kv_lineage *lin;   /* which prefix-cache nodes the session's rows came from (with a cache) */
    int min_keep;         /* the session may be cut back to no fewer positions: rows installed from
                             elsewhere (packs, the prefix cache) fill a sliding layer's window only,
                             so its older cells hold no rows of this sequence */
    int n_drafted;        /* this step's draft() result (speculating jobs) */
    char rows_class[32];  /* "" or the other kernel class whose rows the session holds (a cross-class
                             lane handoff): no capture into the prefix cache, no slot save, and the
                             jobs reusing it say so, until the session is emptied */
    /* the forwards that made positions [0, n_replay) of the session as a producer can replay
     * them (mu_slot_hold; n_replay <= n_hist): [length | MU_RUN_SOLO] */
    uint32_t *runs;
    int n_runs, cap_runs, n_replay;
    uint64_t ticket;      /* reserved for the job with this ticket (guarded by mu; 0: none) */
    bool op_running;      /* a slot action is changing it (guarded by mu) */
} slot;

struct mu_slot_op {
    atomic_int refs;      /* the reader and the scheduler */
    pthread_mutex_t mu;   /* guards done, rc, res, err, notify */
    mu_slot_req rq;
    char *dir;
    uint8_t key[32];
    void (*notify)(void *user);
    void *user;
    bool done;
    int rc;
    mu_slot_result res;
    mu_err err;
    mu_slot_op *next;     /* the scheduler's list (guarded by sched->mu) */
};

struct mu_sched {
    mu_engine *eng;
    const mu_model *model;
    int n_vocab;
    int n_swa;            /* the sliding window, 0 when no layer slides */
    double p_min;         /* a verified draft's cost in decode steps (row_cost) */
    double solo_fixed;    /* a verification block's own cost in a busy batch (mu_spec_solo_fixed) */
    bool dflash_ngram;    /* dflash jobs draft from n-gram lookups first (dflash_ngram();
                             MUSER_DFLASH_NGRAM=0: the drafter alone, to compare) */
    mu_sched_opts o;
    slot slots[MU_SCHED_MAX_SLOTS];
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool kick;            /* a stalled job may have been cancelled: look again */
    mu_job *q_head, *q_tail;
    int n_queued;
    mu_slot_op *ops;      /* slot actions waiting for the engine thread */
    int hold_until;       /* test hook, cleared once reached */
    mu_sched_metrics m;
    mu_sched_slot_info info[MU_SCHED_MAX_SLOTS];
    mu_sched_job_record recent[MU_SCHED_RECENT]; /* a ring: the last finished jobs (guarded by mu) */
    uint64_t n_recent;    /* jobs ever recorded (recent[(n - 1) % MU_SCHED_RECENT] is the newest) */
    uint64_t next_ticket; /* mu_sched_slot_hold's reservations (guarded by mu) */
    /* batch scratch, sized once */
    mu_batch_item items[MU_SCHED_MAX_SLOTS];
    int item_slot[MU_SCHED_MAX_SLOTS];
    bool item_last[MU_SCHED_MAX_SLOTS];
    int item_n[MU_SCHED_MAX_SLOTS];
    bool item_spec[MU_SCHED_MAX_SLOTS]; /* a verification block (solo, all logits) */
    bool item_embd[MU_SCHED_MAX_SLOTS]; /* an embedding job's chunk (not captured) */
};

/* The replay record (mu_slot_hold) cut to the first n positions: a solo
 * run may end anywhere, another run only whole (its rows of a part are not
 * the rows a forward of that part makes). */
static void replay_cut(slot *sl, int n) {
    if (n >= sl->n_replay) return;
    int pos = 0, r = 0;
    for (; r < sl->n_runs; r++) {
        const int len = (int)(sl->runs[r] & ~MU_RUN_SOLO);
        if (pos + len > n) break;
        pos += len;
    }
    if (r < sl->n_runs && (sl->runs[r] & MU_RUN_SOLO) && n > pos) {
        sl->runs[r] = (uint32_t)(n - pos) | MU_RUN_SOLO;
        r++;
        pos = n;
    }
    sl->n_runs = r;
    sl->n_replay = pos;
}

/* A forward made positions [pos0, pos0 + n) of the slot's session in a way
 * a producer can replay (solo: as solo rows); after a gap the record stays
 * where it is. */
static void replay_add(slot *sl, int pos0, int n, bool solo) {
    if (pos0 != sl->n_replay || n < 1) return;
    if (solo && sl->n_runs && (sl->runs[sl->n_runs - 1] & MU_RUN_SOLO)) { /* solo rows: one run */
        sl->runs[sl->n_runs - 1] += (uint32_t)n;
        sl->n_replay += n;
        return;
    }
    if (sl->n_runs == sl->cap_runs) {
        int nc = sl->cap_runs ? 2 * sl->cap_runs : 64;
        uint32_t *r = realloc(sl->runs, (size_t)nc * sizeof *r);
        if (!r) return; /* out of memory: the record ends here */
        sl->runs = r;
        sl->cap_runs = nc;
    }
    sl->runs[sl->n_runs++] = (uint32_t)n | (solo ? MU_RUN_SOLO : 0);
    sl->n_replay += n;
}

/* The slot's session now holds only the first n positions of its history
 * (0: reset, or rows that came from elsewhere). */
static void hist_cut(slot *sl, int n) {
    sl->n_hist = n;
    if (n == 0) sl->min_keep = 0, sl->rows_class[0] = 0;
    replay_cut(sl, n);
    mu_kv_lineage_cut(sl->lin, n);
}

/* The session's positions were installed from elsewhere and its sliding
 * layers hold rows of positions lo.. only (a pack's window: n - n_swa):
 * cutting it back to m needs the rows m - n_swa + 1 .. m - 1. */
static void installed(mu_sched *s, slot *sl, int lo) {
    sl->min_keep = s->n_swa && lo > 0 ? lo + s->n_swa - 1 : 0;
    mu_kv_lineage_foreign(sl->lin, lo);
}

static int window_lo(const mu_sched *s, int n) { return s->n_swa && n > s->n_swa ? n - s->n_swa : 0; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void job_unref(mu_job *j) {
    pthread_mutex_lock(&j->mu);
    int r = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (r) return;
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->nmu);
    pthread_cond_destroy(&j->cv);
    if (j->install_free) j->install_free(j->install_user);
    if (j->save_free) j->save_free(j->save_user);
    if (j->media_take) mu_mprompt_free((mu_mprompt *)j->media);
    free(j->prompt);
    free(j->script);
    mu_gen_free(j->gen);
    free(j->evs);
    free(j->arena);
    free(j->rbuf);
    free(j->embd_rows);
    group_unref(j->grp);
    free(j);
}

/* ---- the events queue ------------------------------------------------- */

/* Appends n bytes to the arena (with a NUL after them); SIZE_MAX when out
 * of memory. Called with j->mu held. */
static size_t arena_put(mu_job *j, const void *p, size_t n) {
    size_t need = j->n_arena + n + 1;
    if (need > j->cap_arena) {
        size_t cap = need * 2 + 256;
        char *a = realloc(j->arena, cap);
        if (!a) return SIZE_MAX;
        j->arena = a;
        j->cap_arena = cap;
    }
    size_t off = j->n_arena;
    if (n) memcpy(j->arena + off, p, n);
    j->arena[off + n] = 0;
    j->n_arena = off + n + 1;
    return off;
}

static size_t arena_str(mu_job *j, const char *s) { return s ? arena_put(j, s, strlen(s)) : SIZE_MAX; }

/* The reader's notify, outside the event lock (the events are readable). */
static void job_notify(mu_job *j) {
    if (atomic_load(&j->has_notify)) {
        pthread_mutex_lock(&j->nmu);
        if (j->notify) j->notify(j->notify_user);
        pthread_mutex_unlock(&j->nmu);
    }
}

/* The emit target of gen.c: queue one event for the reader. Out of memory
 * loses the event; a lost FINISH is answered by the reader as an error. */
static void push_event(void *user, const mu_gen_event *ev) {
    mu_job *j = user;
    pthread_mutex_lock(&j->mu);
    if (ev->kind == MU_EV_FINISH) j->ended = true;
    if (j->n_read == j->n_ev) { /* everything was read: start over */
        j->n_ev = j->n_read = j->n_pub = 0;
        j->n_arena = 0;
    }
    if (j->n_ev == j->cap_ev) {
        int cap = j->cap_ev ? j->cap_ev * 2 : 16;
        qev *e = realloc(j->evs, (size_t)cap * sizeof *e);
        if (e) {
            j->evs = e;
            j->cap_ev = cap;
        }
    }
    if (j->n_ev < j->cap_ev) {
        qev q = {.ev = *ev};
        q.text = ev->text ? arena_put(j, ev->text, ev->len) : SIZE_MAX;
        q.name = arena_str(j, ev->name);
        q.stop_word = arena_str(j, ev->stop_word);
        q.err = arena_str(j, ev->err);
        q.top_ids = q.top_probs = q.top_logprobs = SIZE_MAX;
        if (ev->kind == MU_EV_TOKEN && ev->tok.n_top > 0) {
            size_t k = (size_t)ev->tok.n_top;
            q.top_ids = arena_put(j, ev->tok.top_ids, k * sizeof(int32_t));
            q.top_probs = arena_put(j, ev->tok.top_probs, k * sizeof(float));
            q.top_logprobs = arena_put(j, ev->tok.top_logprobs, k * sizeof(float));
        }
        bool lost = (ev->text && q.text == SIZE_MAX) || (ev->name && q.name == SIZE_MAX) ||
                    (ev->stop_word && q.stop_word == SIZE_MAX) || (ev->err && q.err == SIZE_MAX) ||
                    (ev->kind == MU_EV_TOKEN && ev->tok.n_top > 0 && q.top_logprobs == SIZE_MAX);
        if (!lost) j->evs[j->n_ev++] = q;
    }
    if (j->holding) { /* the rest of this token's events come first */
        pthread_mutex_unlock(&j->mu);
        return;
    }
    j->n_pub = j->n_ev;
    /* wake a reader only when one waits for events, or at the end (a reader
     * in mu_job_wait_end sleeps through the tokens) */
    if (j->n_waiting > 0 || ev->kind == MU_EV_FINISH) pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_notify(j);
}

/* Engine thread, around mu_gen_accept: hold on, events wait (push_event);
 * hold off, they become readable together, so a reader never sees a token
 * without the text it released (llama.cpp's stream: one chunk per token,
 * with that token's text). */
static void job_hold(mu_job *j, bool on) {
    pthread_mutex_lock(&j->mu);
    j->holding = on;
    bool wake = !on && j->n_pub != j->n_ev;
    if (wake) {
        j->n_pub = j->n_ev;
        if (j->n_waiting > 0) pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    if (wake) job_notify(j);
}

/* Reader side: copies the strings and arrays of q into the reader's buffer
 * so they stay valid while the engine thread goes on. */
static bool copy_out(mu_job *j, const qev *q, mu_gen_event *ev) {
    *ev = q->ev;
    const size_t offs[4] = {q->text, q->name, q->stop_word, q->err};
    const size_t k = q->ev.kind == MU_EV_TOKEN && q->ev.tok.n_top > 0 ? (size_t)q->ev.tok.n_top * 4 : 0;
    size_t need = 3 * k + 8;
    for (int i = 0; i < 4; i++)
        if (offs[i] != SIZE_MAX) need += (i == 0 ? q->ev.len : strlen(j->arena + offs[i])) + 1;
    if (need > j->cap_rbuf) {
        char *b = realloc(j->rbuf, need * 2);
        if (!b) return false;
        j->rbuf = b;
        j->cap_rbuf = need * 2;
    }
    size_t at = 0;
    if (k) { /* the arrays first, where rbuf is aligned */
        memcpy(j->rbuf, j->arena + q->top_ids, k);
        memcpy(j->rbuf + k, j->arena + q->top_probs, k);
        memcpy(j->rbuf + 2 * k, j->arena + q->top_logprobs, k);
        ev->tok.top_ids = (const int32_t *)(void *)j->rbuf;
        ev->tok.top_probs = (const float *)(void *)(j->rbuf + k);
        ev->tok.top_logprobs = (const float *)(void *)(j->rbuf + 2 * k);
        at = 3 * k;
    }
    const char **strs[4] = {&ev->text, &ev->name, &ev->stop_word, &ev->err};
    for (int i = 0; i < 4; i++) {
        if (offs[i] == SIZE_MAX) {
            *strs[i] = i == 3 ? "" : NULL;
            continue;
        }
        size_t n = i == 0 ? q->ev.len : strlen(j->arena + offs[i]);
        memcpy(j->rbuf + at, j->arena + offs[i], n);
        j->rbuf[at + n] = 0;
        *strs[i] = j->rbuf + at;
        at += n + 1;
    }
    return true;
}

/* Engine thread: a PROGRESS event for a job that asked for them: the
 * prompt tokens this job evaluated of those it has to (slot n_fed counts
 * the kept and installed ones too). */
static void progress_event(mu_job *j, int n_fed) {
    if (!j->progress) return;
    const double t = now_ms();
    if (!j->t_progress) j->t_progress = t;
    mu_gen_event ev = {.kind = MU_EV_PROGRESS, .n_done = n_fed - j->st.n_reused,
                       .n_total = j->n_prompt - j->st.n_reused};
    ev.stats.n_prompt = j->n_prompt;
    ev.stats.n_reused = j->st.n_reused;
    ev.stats.prompt_ms = t - j->t_progress;
    push_event(j, &ev);
}

/* ---- the engine thread ------------------------------------------------ */

static const double ttft_bounds[MU_SCHED_TTFT_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, INFINITY};

const double *mu_sched_ttft_bounds(void) { return ttft_bounds; }

/* A job's first token was sampled t seconds after its submit. Called with
 * s->mu held. */
static void ttft_add(mu_sched *s, double t) {
    s->m.n_ttft++;
    s->m.ttft_s_sum += t;
    s->m.ttft_s_last = t;
    int k = 0;
    while (k < MU_SCHED_TTFT_BUCKETS - 1 && t > ttft_bounds[k]) k++;
    s->m.ttft_hist[k]++;
}

/* Engine thread: end the job: its FINISH event (after gen.c's flush), the
 * metrics, and the engine's reference. */
static void job_finish(mu_sched *s, mu_job *j, mu_finish f, const char *why) {
    double t = now_ms();
    mu_gen_stats *st = &j->st;
    st->n_gen = j->n_gen;
    if (j->t_start > 0) st->queue_ms = j->t_start - j->t_submit;
    if (j->t_first > 0) {
        st->prompt_ms = j->t_first - j->t_start;
        st->gen_ms = t - j->t_first;
    } else if (j->t_start > 0) {
        st->prompt_ms = t - j->t_start;
    }
    st->constrain_ms = mu_gen_constrain_s(j->gen) * 1e3;
    /* the metrics first: a reader woken by FINISH finds its job counted */
    pthread_mutex_lock(&s->mu);
    s->m.n_draft_tokens += (uint64_t)st->n_draft;
    s->m.n_draft_accepted += (uint64_t)st->n_draft_accepted;
    s->m.n_spec_steps += (uint64_t)st->n_spec_steps;
    s->m.prompt_s += st->prompt_ms / 1e3;
    s->m.gen_s += st->gen_ms / 1e3;
    s->m.n_prompt_timed += (uint64_t)j->n_prompt_fed;
    s->m.n_gen_timed += (uint64_t)j->n_gen;
    if (f == MU_FINISH_CANCEL) s->m.n_cancelled++;
    mu_sched_job_record *rec = &s->recent[s->n_recent++ % MU_SCHED_RECENT];
    *rec = (mu_sched_job_record){.seq = s->n_recent, .t_end_s = t / 1e3, .finish = f, .slot = st->slot,
                                 .n_prompt = j->n_prompt, .n_reused = st->n_reused, .n_gen = j->n_gen,
                                 .queue_ms = st->queue_ms, .ttft_ms = j->t_first > 0 ? j->t_first - j->t_submit : -1,
                                 .prompt_ms = st->prompt_ms, .gen_ms = st->gen_ms,
                                 .embedding = j->embd_pool != MU_EMBD_OFF};
    pthread_mutex_unlock(&s->mu);
    mu_gen_end(j->gen, f, why, st, push_event, j);
    job_unref(j);
}

static void slot_release(mu_sched *s, int i, mu_finish f, const char *why) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    mu_err serr = {0};
    if (j->save && (f == MU_FINISH_STOP || f == MU_FINISH_WORD || f == MU_FINISH_LENGTH || f == MU_FINISH_CTX)) {
        /* the state the job leaves, saved before anything else touches the slot */
        int rc = mu_session_n_past(sl->sess) != sl->n_hist
                     ? mu_fail(&serr, MU_E_STATE, "sched: the session holds %d positions, its history %d",
                               mu_session_n_past(sl->sess), sl->n_hist)
                 : sl->rows_class[0]
                     ? mu_fail(&serr, MU_E_STATE,
                               "sched: the session holds rows computed by kernel class %s (a prefill lane handoff): "
                               "a pack would misstate their identity", sl->rows_class)
                     : j->save(j->save_user, sl->sess, sl->hist, sl->n_hist, sl->last, &serr);
        if (rc) {
            f = MU_FINISH_ERROR;
            why = serr.msg;
        }
    }
    sl->waiting = false;
    sl->started = false;
    if (j->grp && j->grp->leader == i) j->grp->leader = -1;
    pthread_mutex_lock(&s->mu);
    sl->job = NULL;
    s->info[i].busy = false;
    s->m.n_processing--;
    pthread_mutex_unlock(&s->mu);
    job_finish(s, j, f, why);
}

/* Engine thread: picks and accepts one token of slot i from logits lg
 * (best: -1, or lg's mu_session_logits_best); *id is the token; want is draft r of the step (-1: no draft), counted as
 * checked, and as accepted when it equals the token. Returns false when
 * the job ended (the slot is released, the job may be gone). */
static bool take(mu_sched *s, int i, const float *lg, int32_t best, int32_t want, int r, int32_t *id) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    const char *why = NULL;
    *id = mu_gen_pick(j->gen, lg, best, &why);
    if (*id < 0) {
        slot_release(s, i, MU_FINISH_ERROR, why);
        return false;
    }
    bool first = j->t_first == 0;
    if (first) j->t_first = now_ms();
    if (want >= 0) { /* draft r, checked */
        j->st.n_draft_pos[r]++;
        if (*id == want) j->st.n_accept_pos[r]++, j->st.n_draft_accepted++;
    }
    job_hold(j, true);
    mu_finish f = mu_gen_accept(j->gen, *id, lg, push_event, j);
    job_hold(j, false);
    j->n_gen++;
    sl->last = *id;
    if (j->spec == MU_SPEC_NGRAM || j->use_ngram) mu_ngram_push(sl->ng, *id);
    pthread_mutex_lock(&s->mu);
    if (first) ttft_add(s, (j->t_first - j->t_submit) / 1e3);
    s->m.n_gen_tokens++;
    s->info[i].n_gen = j->n_gen;
    s->info[i].n_past = mu_session_n_past(sl->sess);
    if ((uint64_t)s->info[i].n_past > s->m.n_tokens_max) s->m.n_tokens_max = (uint64_t)s->info[i].n_past;
    pthread_mutex_unlock(&s->mu);
    if (f == MU_FINISH_NONE && atomic_load(&j->cancel)) f = MU_FINISH_CANCEL;
    if (f != MU_FINISH_NONE) {
        slot_release(s, i, f, NULL);
        return false;
    }
    return true;
}

#define SPEC_DFLASH_WINDOW 32 /* dflash: the rates' counts halve when the first position's reach this */

/* Engine thread: draft position r was checked after an accepted prefix, and
 * accepted or not: into the rates of the drafts' source (a dflash job's
 * n-gram lookups have their own). A dflash job's drafter rates follow the
 * text: the counts halve every SPEC_DFLASH_WINDOW checks of the first
 * position (its drafter's acceptance swings between repetitive stretches
 * and free text). */
static void observe(mu_job *j, int r, bool ok) {
    spec_rates *q = j->blk_ngram ? &j->ng : &j->rt;
    q->n[r]++;
    q->acc[r] += ok;
    if (j->spec == MU_SPEC_DFLASH && !j->blk_ngram && q->n[0] >= SPEC_DFLASH_WINDOW)
        for (int k = 0; k < MU_SPEC_DRAFT_MAX; k++) {
            q->n[k] /= 2;
            q->acc[k] /= 2;
        }
}

/* A verified draft's cost in decode steps on engine e: MU_SPEC_P_MIN on
 * the CPU, MU_SPEC_P_MIN_DEVICE on a GPU (which verifies a few tokens for
 * little more than one: docs/speculative.md); MUSER_SPEC_ROW_COST (0 .. 1)
 * replaces either, for measuring. It decides how much to draft, never what
 * is accepted. */
static double row_cost(const mu_engine *e) {
    const char *v = getenv("MUSER_SPEC_ROW_COST");
    char *end = NULL;
    const double x = v && *v ? strtod(v, &end) : -1;
    if (end && !*end && x >= 0 && x <= 1) return x;
    return strcmp(mu_engine_backend(e), "cpu") ? MU_SPEC_P_MIN_DEVICE : MU_SPEC_P_MIN;
}

/* Engine thread, a dflash job: whether drafting pays by its rates
 * (spec_cost.h mu_spec_block_len): a pass of the drafter, its drafts' rows
 * and their verification rows (the drafter's cost estimates, s->p_min a
 * verification row) against the drafts the rates expect accepted. */
static bool dflash_pays(const mu_sched *s, const mu_job *j) {
    const mu_drafter_info *di = mu_drafter_get_info(s->o.drafter);
    const int bmax = di->block_size - 1, k = j->draft_max < bmax ? j->draft_max : bmax;
    return mu_spec_block_len(j->rt.acc, j->rt.n, k, di->cost_pass, s->p_min + di->cost_row) > 0;
}

/* Engine thread: one gen step for slot i from logits lg (and a shadow
 * draft's next token checked against its token). */
static void step(mu_sched *s, int i, const float *lg, int32_t best) {
    int32_t id;
    mu_job *j = s->slots[i].job;
    if (!take(s, i, lg, best, -1, -1, &id) || j->i_shadow >= j->n_shadow) return;
    /* a shadow draft's next token (a dflash one's row through the output
     * matrix now) against the one plain decoding picked */
    const int r = j->i_shadow++;
    int32_t want = j->shadow[r];
    if (j->spec == MU_SPEC_DFLASH) mu_draft_seq_tokens(s->slots[i].dq, r, 1, &want);
    observe(j, r, id == want);
    if (id != want) j->n_shadow = 0;
    /* a dflash shadow checked: draft again when it held all through, or
     * when the rates it taught (to its first miss) say drafting pays */
    if (j->spec == MU_SPEC_DFLASH && j->i_shadow >= j->n_shadow) j->cold = id != want && !dflash_pays(s, j);
}

#define SPEC_PROBE_EVERY 16 /* paused alone: one 1-token draft every this many plain steps */
#define SPEC_SHADOW_EVERY 16 /* paused dflash: the first interval between shadow drafts (doubling to 8x) */
#define SPEC_SHADOW_MAX 8   /* drafts of a shadow draft (rows through the output matrix) */

/* Engine thread: the cost model of spec_cost.h on rates q. */
static int draft_len(const spec_rates *q, int k, double p_min) { return mu_spec_draft_len(q->acc, q->n, k, p_min); }

/* Engine thread, n-gram drafts by rates q: draft_len at s->p_min. While
 * that is 0 a job alone decodes plainly and probes with one drafted token
 * now and then, so the estimate can recover. In a busy batch (rows > 1) the
 * drafts must also pay for the solo block's own forward (mu_spec_block_len
 * at the batch's rate), and when none pays the step decodes plainly
 * (n_spec_busy); there a job never probes (a solo block would cost the
 * others' rows) but learns from shadow drafts (ngram_shadow), which cost
 * the batch nothing. (A dflash job's lookups draft only alone.) */
static int draft_pays(const mu_sched *s, mu_job *j, spec_rates *q, int k, int rows) {
    int n = draft_len(q, k, s->p_min);
    q->probing = false;
    if (n == 0 && k > 0 && rows <= 1 && ++q->n_paused >= SPEC_PROBE_EVERY) {
        q->n_paused = 0;
        q->probing = true;
        return 1; /* a probe: the estimate cannot recover without one */
    }
    if (n > 0 && rows > 1) {
        /* busy: the drafts, and the solo block's own forward, against
         * what their cost would make as plain rows of this batch */
        const double r = mu_spec_batch_rate(rows, s->p_min);
        n = mu_spec_block_len(q->acc, q->n, n, r * s->solo_fixed, r * s->p_min);
        if (n == 0) j->st.n_spec_busy++;
    }
    return n;
}

/* Engine thread, an ngram job decoding plainly because drafting does not
 * pay in this busy batch: unless one is still being checked, a shadow
 * draft of up to draft_max tokens, which the next plain steps check
 * (step()) as a verification would, every position's rate learning. A
 * lookup costs no forward, so it is made on every such step; one that
 * finds nothing learns nothing. (Alone, a paused job probes instead:
 * shadows there resumed drafting sooner and lost 2-3 % on py-repeat and
 * free text, bench/results/spec-slots-2026-12-06b.) */
static void ngram_shadow(mu_sched *s, int i) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    if (j->i_shadow < j->n_shadow || !sl->ng) return;
    j->n_shadow = mu_ngram_draft(sl->ng, j->draft_max < MU_SPEC_DRAFT_MAX ? j->draft_max : MU_SPEC_DRAFT_MAX, j->shadow);
    j->i_shadow = 0;
}

/* Engine thread, a paused dflash job: after probe_every plain steps
 * (SPEC_SHADOW_EVERY, doubling up to 8 times that while drafting stays
 * off; back to the start after it drafted), a shadow draft of up to
 * SPEC_SHADOW_MAX tokens, which the next plain steps check
 * (step()): the drafter's pass (info.cost_pass, its rows through the head
 * as they are checked) without a verification; every position's rate
 * learns, not the first one's alone, and drafting resumes when the whole
 * shadow held or the rates say it pays (dflash_pays). */
static void shadow_probe(mu_sched *s, int i) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    if (j->i_shadow < j->n_shadow) return; /* the last shadow draft is still being checked */
    if (j->probe_every == 0) j->probe_every = SPEC_SHADOW_EVERY;
    if (++j->rt.n_paused < j->probe_every) return;
    j->rt.n_paused = 0;
    if (j->probe_every < 8 * SPEC_SHADOW_EVERY) j->probe_every *= 2;
    const int bmax = mu_drafter_get_info(s->o.drafter)->block_size - 1;
    int k = j->draft_max < bmax ? j->draft_max : bmax;
    if (k > SPEC_SHADOW_MAX) k = SPEC_SHADOW_MAX;
    mu_err err;
    const int n = mu_draft_seq_pass(sl->dq, sl->last, mu_session_n_past(sl->sess), k, &err);
    j->n_shadow = n > 0 ? n : 0;
    j->i_shadow = 0;
    j->row_n = j->row_next = 0; /* the kept rows are the shadow's now */
}

/* Engine thread: slot i's session is full (n_past + 1 >= n_ctx) before its
 * next token: llama.cpp's server shift (server-context.cpp, pre_decode).
 * n_keep: the job's (-1: its prompt, BOS included), plus one when the model
 * adds BOS, at most n_ctx - 4; n_discard: the job's, or half of the tokens
 * after n_keep, clamped to [0, n_left - 1]. The history loses the same
 * tokens; the session's rows leave the replay record and the prefix cache
 * (shift.c: cells no longer follow positions). As llama.cpp, a job sharing
 * its prompt with other choices ends with an error instead; a DFlash job
 * drafts no more (the drafter's rows follow positions). */
static void ctx_shift(mu_sched *s, int i) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    if (j->grp) {
        slot_release(s, i, MU_FINISH_ERROR, "context shift cannot be used for shared prompt");
        return;
    }
    const int n_past = mu_session_n_past(sl->sess);
    int n_keep = j->n_keep < 0 ? j->n_prompt : j->n_keep;
    if (mu_model_get_info(s->model)->add_bos) n_keep += 1;
    if (n_keep > s->o.n_ctx - 4) n_keep = s->o.n_ctx - 4;
    const int n_left = n_past - n_keep;
    int n_discard = j->n_discard ? j->n_discard : n_left / 2;
    const int hi = n_left - 1 > 0 ? n_left - 1 : 0;
    n_discard = n_discard < 0 ? 0 : n_discard > hi ? hi : n_discard;
    mu_err err = {0};
    if (sl->n_hist != n_past) { /* the history must name every position it moves */
        slot_release(s, i, MU_FINISH_ERROR, "context shift: the slot's token history does not cover its session");
        return;
    }
    if (n_discard < 1 || n_keep < 0 || mu_session_shift(sl->sess, n_keep, n_discard, &err)) {
        slot_release(s, i, MU_FINISH_ERROR, n_discard < 1 ? "context shift: nothing to discard" : err.msg);
        return;
    }
    memmove(sl->hist + n_keep, sl->hist + n_keep + n_discard, (size_t)(n_past - n_keep - n_discard) * sizeof *sl->hist);
    replay_cut(sl, 0);
    mu_kv_lineage_cut(sl->lin, n_keep);
    sl->n_hist = n_past - n_discard;
    if (j->spec == MU_SPEC_DFLASH) {
        j->spec = MU_SPEC_NONE;
        j->use_ngram = false;
        if (sl->dq) mu_draft_seq_truncate(sl->dq, 0);
    }
    j->st.n_shift++;
    j->st.n_discarded += n_discard;
}

/* The most drafts slot sl's next block may hold: it must fit the job's
 * remaining tokens and, with a context shift, never take the session past
 * n_ctx - 1 positions, where plain decoding shifts (so the shifts, and the
 * tokens, stay plain decoding's). */
static int block_room(const mu_sched *s, const slot *sl) {
    const mu_job *j = sl->job;
    const int room = s->o.n_ctx - mu_session_n_past(sl->sess) - 1 - (j->ctx_shift ? 1 : 0);
    const int left = j->max_new - j->n_gen - 1;
    return room < left ? room : left;
}

/* Engine thread, a dflash job: n-gram lookups (the prompt's and the
 * output's, as an ngram job's) into sl->blk[1..] while their own rates say
 * they pay. Returns the count (0: the drafter drafts this step). A lookup
 * costs no pass, so finding nothing counts against nothing; a probe that
 * found nothing is the next step's. Only for a step that is its batch's
 * only row (draft()): in busy batches lookups drafted by ngram's busy rule
 * cost the bundled model 7 % of four slots' throughput on this CPU
 * (docs/speculative.md, "N-gram lookups first"), and a dflash job decodes
 * plainly there. */
static int dflash_ngram(mu_sched *s, int i) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    int k = draft_pays(s, j, &j->ng, j->draft_max, 1);
    const int room = block_room(s, sl);
    if (k > room) k = room;
    if (k <= 0) return 0;
    if (k < j->draft_min) { /* as draft() does: at least --draft-min when drafting */
        k = j->draft_min < j->draft_max ? j->draft_min : j->draft_max;
        if (k > room) k = room;
    }
    const int n = mu_ngram_draft(sl->ng, k, sl->blk + 1);
    if (n == 0 || n < j->draft_min) {
        if (j->ng.probing) j->ng.n_paused = SPEC_PROBE_EVERY - 1;
        return 0;
    }
    j->blk_ngram = true;
    j->row_next = 0;                /* the drafter's kept rows follow other tokens now */
    j->n_shadow = j->i_shadow = 0;  /* and so does a shadow draft */
    return n;
}

/* Engine thread: drafts for slot i's next step into sl->blk[1..]. Returns
 * the count (the step is a solo block, maybe of the last token alone), or
 * -1 while the estimate says drafting does not pay: then the step is an
 * ordinary decode item, batched with other jobs' as plain decoding's (so a
 * paused job costs what a plain one does). The block must fit the context
 * and the job's remaining tokens (block_room). A step where the drafter
 * finds nothing counts against the first position's estimate, except a
 * paused n-gram job's probe, which waits for the next step. A dflash job
 * takes n-gram lookups first (dflash_ngram). The test hook drafts what it
 * is told and never pauses. */
static int draft(mu_sched *s, int i, int rows) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    int k = j->draft_max;
    j->blk_ngram = false;
    if (j->use_ngram && rows <= 1) {
        const int n = dflash_ngram(s, i);
        if (n > 0) return n;
    }
    if (j->spec == MU_SPEC_DFLASH) {
        /* drafting while its last step paid (or the last shadow draft held
         * all through), as long as the rates say; paused, shadow drafts
         * (not in a busy batch, where a pass costs the other jobs' tokens) */
        const mu_drafter_info *di = mu_drafter_get_info(s->o.drafter);
        if (j->cold) {
            j->row_next = 0;
            if (rows <= 1) shadow_probe(s, i);
            return -1;
        }
        k = draft_len(&j->rt, k, s->p_min + di->cost_row);
        if (k < 1) k = 1;
        if (rows > 1) {
            /* busy: the drafts' expected tokens must beat what their rows,
             * the solo block's own forward and the pass (none when drafting
             * on from kept rows) would make as plain rows of this batch */
            const double r = mu_spec_batch_rate(rows, s->p_min);
            const bool pass = j->row_next <= 0 || j->row_next >= j->row_n;
            const double fixed = (pass ? di->cost_pass : 0) + s->solo_fixed;
            k = mu_spec_block_len(j->rt.acc, j->rt.n, k, r * fixed, r * (s->p_min + di->cost_row));
            if (k < 1) {
                j->row_next = 0;
                j->st.n_spec_busy++;
                return -1;
            }
        }
        j->n_shadow = j->i_shadow = 0; /* drafting: verification takes over */
        j->probe_every = SPEC_SHADOW_EVERY;
    } else if (j->spec != MU_SPEC_SCRIPT) {
        k = draft_pays(s, j, &j->rt, k, rows);
        if (k <= 0 && rows > 1) ngram_shadow(s, i);
    }
    if (k <= 0) return -1;
    /* the rates may want fewer drafts than --draft-min, under which nothing
     * is verified: when drafting, draft at least that many (llama.cpp's
     * drafts are never cut short of it either) */
    if (k < j->draft_min) k = j->draft_min < j->draft_max ? j->draft_min : j->draft_max;
    const int room = block_room(s, sl);
    if (k > room) k = room;
    if (k <= 0) return 0;
    int n = 0;
    if (j->spec == MU_SPEC_NGRAM) {
        n = mu_ngram_draft(sl->ng, k, sl->blk + 1);
        j->n_shadow = j->i_shadow = 0; /* drafting: verification takes over */
        if (n == 0 || n < j->draft_min) {
            /* a probe that found nothing is the next step's (uncounted: it
             * learnt nothing); any other miss counts as a rejected first
             * draft, which keeps drafts short on text that rarely repeats.
             * Either way the step decodes plainly (a block of the last token
             * alone would be a solo item, costing a busy batch a forward of
             * its own) */
            if (j->rt.probing) j->rt.n_paused = SPEC_PROBE_EVERY - 1;
            else j->rt.n[0]++;
            return -1;
        }
    } else if (j->spec == MU_SPEC_SCRIPT) {
        for (; n < k && j->n_gen + n < j->n_script; n++) sl->blk[1 + n] = j->script[j->n_gen + n];
    } else if (j->spec == MU_SPEC_DFLASH) {
        const int bmax = mu_drafter_get_info(s->o.drafter)->block_size - 1;
        if (k > bmax) k = bmax;
        if (j->row_next <= 0 || j->row_next >= j->row_n) {
            /* a pass keeping rows for the steps after this one too (each row
             * through the output matrix only when it is drafted) */
            mu_err err;
            j->row_n = mu_draft_seq_pass(sl->dq, sl->last, mu_session_n_past(sl->sess), bmax, &err);
            if (j->row_n < 0) j->row_n = 0; /* cannot happen for a block that fits; the step decodes plainly */
            j->row_next = 0;
        }
        j->row_blk = j->row_next;
        j->row_next = 0;
        n = mu_draft_seq_tokens(sl->dq, j->row_blk, k, sl->blk + 1);
        if (n == 0 || n < j->draft_min) j->rt.n[0]++;
    }
    return n < j->draft_min ? 0 : n;
}

/* Engine thread: slot i fed its last token and n_blk - 1 drafts with all
 * logits, starting at position p0. Accepts the target's picks while they
 * agree with the drafts, plus the first that does not (or the one after the
 * last draft), then drops the rejected drafts' KV. */
static void verify(mu_sched *s, int i, int n_blk, int p0) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    const int n_dr = n_blk - 1;
    j->st.n_draft += n_dr;
    j->st.n_spec_steps += n_dr > 0;
    int acc = 0;
    for (int r = 0; r < n_blk; r++) {
        int32_t id, want = r < n_dr ? sl->blk[r + 1] : -1;
        if (!take(s, i, mu_session_logits(sl->sess, r), mu_session_logits_best(sl->sess, r), want, r, &id)) return;
        if (r < n_dr) observe(j, r, id == want);
        if (id != want) break;
        acc++;
    }
    if (j->blk_ngram) {
        j->st.n_draft_ngram += n_dr;
        j->st.n_draft_ngram_accepted += acc;
    } else if (j->spec == MU_SPEC_DFLASH && n_dr > 0) {
        /* drafting goes on while this step paid (its accepted drafts reach
         * what it cost beyond a decode step, as estimated: the pass, none
         * when it drafted on from kept rows, and each draft's rows and share
         * of the verification) or the rates, with this step's checks, say
         * drafting pays */
        const mu_drafter_info *di = mu_drafter_get_info(s->o.drafter);
        const bool paid = acc >= (j->row_blk == 0 ? di->cost_pass : 0) + (di->cost_row + s->p_min) * n_dr;
        j->cold = !paid && !dflash_pays(s, j);
        /* every draft held: when the drafter's next kept row is the token the
         * target picked after them, the next step drafts on from there */
        int32_t t = -1;
        if (acc == n_dr && mu_draft_seq_tokens(sl->dq, j->row_blk + n_dr, 1, &t) == 1 && t == sl->last)
            j->row_next = j->row_blk + n_dr + 1;
    }
    /* keep the last token's and the accepted drafts' rows */
    mu_err err;
    int keep = p0 + 1 + acc;
    if (mu_session_truncate(sl->sess, keep, &err)) { /* the ring lost rows: cannot happen for a block <= 64 */
        mu_session_reset(sl->sess);
        hist_cut(sl, 0);
        slot_release(s, i, MU_FINISH_ERROR, err.msg);
        return;
    }
    hist_cut(sl, keep);
    if (sl->dq) mu_draft_seq_truncate(sl->dq, keep);
    pthread_mutex_lock(&s->mu);
    s->info[i].n_past = keep;
    pthread_mutex_unlock(&s->mu);
}

/* Engine thread: a group member in slot i takes the leader's prompt state
 * (or becomes the leader, or waits). */
static void group_join(mu_sched *s, int i) {
    slot *sl = &s->slots[i];
    group *g = sl->job->grp;
    sl->waiting = false;
    if (!g || g->failed || sl->n_fed > 0) return;
    if (g->ready) {
        mu_err err;
        /* the leader's session while it holds just the prompt (the step
         * after group_publish, before the leader's first token is fed): a
         * copy cell for cell, on the device where there is one; later, the
         * saved bytes */
        const int ld = g->leader;
        const bool live = ld >= 0 && ld != i && s->slots[ld].job && s->slots[ld].job->grp == g &&
                          mu_session_n_past(s->slots[ld].sess) == g->past;
        mu_session_reset(sl->sess);
        hist_cut(sl, 0);
        int rc = live      ? mu_session_copy(sl->sess, s->slots[ld].sess, &err)
                 : g->state ? mu_session_state_load(sl->sess, g->state, g->state_n, &err)
                            : -1;
        if (rc) {
            g->failed = true; /* evaluate the prompt like a lone job */
            mu_session_reset(sl->sess);
            return;
        }
        sl->n_fed = sl->job->n_prompt;
        installed(s, sl, window_lo(s, sl->job->n_prompt)); /* the leader's rows (perhaps installed themselves) */
        sl->job->st.prompt_shared = true;
        memcpy(sl->hist, sl->job->prompt, (size_t)sl->job->n_prompt * sizeof *sl->hist);
        sl->n_hist = sl->job->n_prompt;
        pthread_mutex_lock(&s->mu);
        s->info[i].n_past = mu_session_n_past(sl->sess);
        pthread_mutex_unlock(&s->mu);
        step(s, i, g->logits, -1); /* a copy of the leader's row: no best kept */
        return;
    }
    if (g->leader < 0) g->leader = i;
    else if (g->leader != i) sl->waiting = true;
}

/* Engine thread: the leader of a group finished its prompt; keep its
 * logits for the other members (and its state as bytes for one that is
 * still queued). */
static void group_publish(mu_sched *s, int i, const float *lg) {
    slot *sl = &s->slots[i];
    group *g = sl->job->grp;
    if (!g || g->ready || g->failed || g->leader != i) return;
    g->logits = malloc((size_t)s->n_vocab * sizeof *g->logits);
    if (!g->logits) {
        g->failed = true;
        return;
    }
    memcpy(g->logits, lg, (size_t)s->n_vocab * sizeof *g->logits);
    g->past = mu_session_n_past(sl->sess);
    /* members in slots copy the leader's session at their next group_join,
     * before the leader moves on; one still queued takes saved bytes */
    int in_slots = 0;
    for (int k = 0; k < s->o.n_slots; k++) in_slots += s->slots[k].job && s->slots[k].job->grp == g;
    if (in_slots < g->n) {
        size_t cap = mu_session_state_bytes(sl->sess), n = 0;
        g->state = malloc(cap ? cap : 1);
        mu_err err;
        if (!g->state || mu_session_state_save(sl->sess, g->state, cap, &n, &err)) {
            g->failed = true;
            return;
        }
        g->state_n = n;
    }
    g->ready = true;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

/* Engine thread: a new job in slot i: keep the longest common prefix of the
 * session when the job asks for it (at least one prompt token is evaluated
 * again, for its logits), or install the job's KV state, else start from an
 * empty session. False when the install failed and ended the job. */
/* The n-gram drafter of an ngram job, and a dflash job's lookups, learn
 * its prompt (then its output, as tokens are accepted). Out of memory: an
 * ngram job decodes plainly, a dflash job drafts with its drafter alone. */
static void spec_learn_prompt(slot *sl, mu_job *j) {
    if (j->spec != MU_SPEC_NGRAM && !j->use_ngram) return;
    if (!sl->ng) sl->ng = mu_ngram_new();
    if (!sl->ng) {
        if (j->spec == MU_SPEC_NGRAM) j->spec = MU_SPEC_NONE;
        j->use_ngram = false; /* a dflash job drafts with its drafter alone */
        return;
    }
    mu_ngram_reset(sl->ng);
    for (int k = 0; k < j->n_prompt; k++) mu_ngram_push(sl->ng, j->prompt[k]);
}

/* The drafter's rows hold the features of the positions the session keeps
 * only while every job in the slot fed them: a job of another kind, an
 * installed state or a shared prompt leaves positions without rows. */
static void spec_drafter_keep(slot *sl, const mu_job *j, int keep) {
    if (sl->dq) mu_draft_seq_truncate(sl->dq, j->spec == MU_SPEC_DFLASH ? keep : 0);
}

static bool slot_start(mu_sched *s, int i) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    sl->started = true;
    sl->n_fed = 0;
    int keep = 0;
    if (j->install) {
        mu_err err = {0};
        const int hk = j->install_keep; /* a delta on this slot's live prefix */
        int rc = 0;
        if (hk > 0 && (sl->n_replay < hk || common_prefix(sl->hist, hk, j->prompt, hk) < hk))
            rc = mu_fail(&err, MU_E_STATE, "sched: slot %d no longer holds the %d positions the delta builds on", i, hk);
        else if (hk > 0)
            rc = mu_session_truncate(sl->sess, hk, &err);
        else
            mu_session_reset(sl->sess);
        char keep_class[sizeof sl->rows_class];
        snprintf(keep_class, sizeof keep_class, "%s", hk > 0 ? sl->rows_class : "");
        hist_cut(sl, rc ? 0 : hk);
        if (!rc) rc = j->install(j->install_user, sl->sess, &err);
        if (!rc && mu_session_n_past(sl->sess) != j->n_installed)
            rc = mu_fail(&err, MU_E_STATE, "sched: the install committed %d positions, not %d",
                         mu_session_n_past(sl->sess), j->n_installed);
        if (rc) {
            mu_session_reset(sl->sess);
            hist_cut(sl, 0);
            slot_release(s, i, MU_FINISH_ERROR, err.msg);
            return false;
        }
        installed(s, sl, window_lo(s, j->n_installed)); /* the installer's rows (a pack's window at least) */
        snprintf(sl->rows_class, sizeof sl->rows_class, "%s", j->install_class ? j->install_class : keep_class);
        for (int p = hk; j->install_step > 0 && p < j->n_installed; p += j->install_step)
            replay_add(sl, p, j->n_installed - p < j->install_step ? j->n_installed - p : j->install_step, false);
        snprintf(j->st.rows_class, sizeof j->st.rows_class, "%s", sl->rows_class);
        keep = j->n_installed;
        memcpy(sl->hist, j->prompt, (size_t)keep * sizeof *sl->hist);
        sl->n_fed = sl->n_hist = keep;
        j->st.n_reused = keep;
        sl->waiting = false;
        spec_learn_prompt(sl, j);
        progress_event(j, sl->n_fed);
        spec_drafter_keep(sl, j, 0);
        return true;
    }
    int src = MU_KV_SRC_NONE;
    if (j->keep_prefix && !j->grp) {
        /* the reuse ladder: the live slot, then the prefix cache and the
         * pack store when they hold more (at least one prompt token is
         * evaluated again, for its logits) */
        keep = common_prefix(sl->hist, sl->n_hist, j->prompt, j->n_prompt);
        if (keep > j->n_prompt - 1) keep = j->n_prompt - 1;
        if (keep < sl->min_keep) keep = 0; /* the window before it was never in this session */
        mu_err err;
        if (keep > 0 && mu_session_truncate(sl->sess, keep, &err)) keep = 0;
        if (keep > 0) src = MU_KV_SRC_SLOT;
        if (s->o.cache) {
            hist_cut(sl, keep);
            int from, n = mu_kv_cache_restore(s->o.cache, sl->sess, sl->lin, j->prompt, j->n_prompt - 1, keep, &from);
            if (n > 0) {
                memcpy(sl->hist, j->prompt, (size_t)n * sizeof *sl->hist);
                replay_cut(sl, 0); /* rows of the cache: not this slot's forwards */
                keep = n;
                src = from;
                sl->rows_class[0] = 0; /* the session was emptied and holds the cache's rows */
                /* the cache installs a window, or (a store pack) what the pack holds: its lineage says */
                sl->min_keep = mu_kv_lineage_swa_lo(sl->lin) > 0 ? mu_kv_lineage_swa_lo(sl->lin) + s->n_swa - 1 : 0;
            } else if (mu_session_n_past(sl->sess) != keep) { /* a failed restore emptied the session */
                keep = 0;
                src = MU_KV_SRC_NONE;
            }
        }
    }
    if (keep == 0) mu_session_reset(sl->sess);
    sl->n_fed = keep;
    hist_cut(sl, keep);
    snprintf(j->st.rows_class, sizeof j->st.rows_class, "%s", sl->rows_class); /* kept rows of another class */
    j->st.n_reused = keep;
    j->st.reuse_src = src;
    pthread_mutex_lock(&s->mu);
    s->m.n_prompt_cached += (uint64_t)keep;
    s->m.n_reused_src[src] += (uint64_t)keep;
    if (j->keep_prefix) s->m.n_reuse_jobs[src]++;
    pthread_mutex_unlock(&s->mu);
    sl->waiting = j->grp != NULL;
    spec_learn_prompt(sl, j);
    progress_event(j, sl->n_fed);
    spec_drafter_keep(sl, j, keep);
    return true;
}

/* Called with s->mu held: whether a slot is reserved for ticket t
 * (mu_sched_slot_hold), and the end of that reservation. */
static bool reserved(const mu_sched *s, uint64_t t) {
    for (int i = 0; t && i < s->o.n_slots; i++)
        if (s->slots[i].ticket == t) return true;
    return false;
}

static void unreserve(mu_sched *s, uint64_t t) {
    for (int i = 0; t && i < s->o.n_slots; i++)
        if (s->slots[i].ticket == t) s->slots[i].ticket = 0;
}

/* Called with s->mu held. A job that keeps its prefix goes to the free slot
 * whose history shares most with its prompt; a pinned job waits for its
 * slot, and the jobs behind it may pass it. */
static void admit(mu_sched *s) {
    if (s->hold_until > 0) {
        if (s->n_queued < s->hold_until) return;
        s->hold_until = 0;
    }
    mu_job **pp = &s->q_head, *prev = NULL;
    while (*pp) {
        mu_job *j = *pp;
        int best = -1, best_n = -1;
        for (int i = 0; i < s->o.n_slots; i++) {
            slot *sl = &s->slots[i];
            if (sl->job || (j->want_slot >= 0 && i != j->want_slot)) continue;
            if (sl->ticket != j->ticket && (sl->ticket || reserved(s, j->ticket))) continue; /* mu_sched_slot_hold */
            int n = j->keep_prefix ? common_prefix(sl->hist, sl->n_hist, j->prompt, j->n_prompt) : 0;
            if (n > best_n) {
                best = i;
                best_n = n;
            }
        }
        if (best < 0) {
            if (j->want_slot < 0) break; /* no free slot at all */
            prev = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (s->q_tail == j) s->q_tail = prev;
        j->next = NULL;
        s->n_queued--;
        j->queued = false;
        slot *sl = &s->slots[best];
        sl->job = j;
        sl->ticket = 0;
        sl->started = false;
        j->t_start = now_ms();
        j->st.slot = best;
        s->info[best] = (mu_sched_slot_info){.busy = true, .n_prompt = j->n_prompt};
        s->m.n_processing++;
    }
    s->m.n_queued = s->n_queued;
}

/* Engine thread: an embedding job's final chunk (n rows) is in; pool and end. */
static void embd_finish(mu_sched *s, int i, int n) {
    mu_job *j = s->slots[i].job;
    j->n_embd_rows = mu_embd_pool(j->embd_rows, n, j->n_embd, j->embd_pool, j->embd_norm, j->embd_rows);
    j->embd = j->embd_rows;
    slot_release(s, i, MU_FINISH_STOP, NULL);
}

/* ---- slot actions (engine thread) ---------------------------------------- */

static void slot_op_unref(mu_slot_op *op) {
    if (!op || atomic_fetch_sub(&op->refs, 1) != 1) return;
    mu_kv_key_wipe(op->key);
    pthread_mutex_destroy(&op->mu);
    free(op->dir);
    free(op);
}

static void slot_op_end(mu_slot_op *op, int rc, const mu_slot_result *res, const mu_err *err) {
    pthread_mutex_lock(&op->mu);
    op->rc = rc;
    if (res) op->res = *res;
    if (err) op->err = *err;
    op->done = true;
    if (op->notify) op->notify(op->user);
    pthread_mutex_unlock(&op->mu);
    slot_op_unref(op);
}

static void slot_op_run(mu_sched *s, mu_slot_op *op) {
    mu_err err = {0};
    mu_slot_result res = {0};
    int rc = 0;
    slot *sl = &s->slots[op->rq.slot];
    double t0 = now_ms();
    pthread_mutex_lock(&s->mu);
    sl->op_running = true; /* mu_sched_slot_hold leaves it alone */
    pthread_mutex_unlock(&s->mu);
    if (sl->job) {
        rc = mu_fail(&err, MU_E_STATE, "sched: slot %d is busy", op->rq.slot);
    } else if (op->rq.action == MU_SLOT_ERASE) {
        res.n_tokens = sl->n_hist;
        mu_session_reset(sl->sess);
        hist_cut(sl, 0);
    } else if (op->rq.action == MU_SLOT_SAVE) {
        mu_kv_save_opts so = {.with_tokens = true, .full_ring = true};
        res.n_tokens = sl->n_hist;
        if (sl->n_hist < 1 || mu_session_n_past(sl->sess) != sl->n_hist)
            rc = mu_fail(&err, MU_E_STATE, "sched: slot %d holds no tokens to save", op->rq.slot);
        else if (sl->rows_class[0]) /* a pack would claim this engine's kernel class for all of them */
            rc = mu_fail(&err, MU_E_STATE, "sched: slot %d holds rows computed by kernel class %s (a remote prefill): "
                         "a pack would misstate their identity", op->rq.slot, sl->rows_class);
        if (!rc) rc = mu_kv_pack_save(sl->sess, op->rq.id, sl->hist, sl->n_hist, op->key, &so, op->dir, &err);
        if (!rc) rc = mu_kv_pack_bytes(op->dir, &res.n_bytes, &err);
    } else {
        int32_t *ids = NULL;
        int n_ids = 0, n = 0;
        mu_session_reset(sl->sess);
        hist_cut(sl, 0);
        rc = mu_kv_pack_tokens(op->dir, op->key, &ids, &n_ids, &err);
        if (!rc && n_ids > mu_session_n_ctx(sl->sess))
            rc = mu_fail(&err, MU_E_ARG, "sched: the pack holds %d positions, the slot's context is %d", n_ids,
                         mu_session_n_ctx(sl->sess));
        int lo = 0;
        if (!rc) rc = mu_kv_pack_restore_ex(sl->sess, op->rq.id, op->dir, op->key, &n, &lo, &err);
        if (!rc && n != n_ids) rc = mu_fail(&err, MU_E_STATE, "sched: the pack restored %d positions, not %d", n, n_ids);
        if (!rc) {
            memcpy(sl->hist, ids, (size_t)n * sizeof *sl->hist);
            sl->n_hist = n;
            installed(s, sl, lo);
            res.n_tokens = n;
            rc = mu_kv_pack_bytes(op->dir, &res.n_bytes, &err);
        } else {
            mu_session_reset(sl->sess);
        }
        free(ids);
    }
    pthread_mutex_lock(&s->mu);
    s->info[op->rq.slot].n_past = mu_session_n_past(sl->sess);
    sl->op_running = false;
    pthread_mutex_unlock(&s->mu);
    res.ms = now_ms() - t0;
    slot_op_end(op, rc, &res, &err);
}

int mu_sched_slot_submit(mu_sched *s, const mu_slot_req *rq, void (*notify)(void *user), void *user,
                         mu_slot_op **out, mu_err *err) {
    if (rq->slot < 0 || rq->slot >= s->o.n_slots)
        return mu_fail(err, MU_E_ARG, "sched: no slot %d (0..%d)", rq->slot, s->o.n_slots - 1);
    if (rq->action != MU_SLOT_ERASE && (!rq->dir || !rq->id || !rq->key))
        return mu_fail(err, MU_E_ARG, "sched: save and restore need a directory, an identity and a key");
    mu_slot_op *op = calloc(1, sizeof *op);
    if (!op || (rq->dir && !(op->dir = strdup(rq->dir)))) {
        free(op);
        return mu_fail(err, MU_E_NOMEM, "sched: out of memory");
    }
    atomic_init(&op->refs, 2);
    pthread_mutex_init(&op->mu, NULL);
    op->rq = *rq;
    op->rq.dir = op->dir;
    if (rq->key) memcpy(op->key, rq->key, 32);
    op->rq.key = NULL;
    op->notify = notify;
    op->user = user;
    pthread_mutex_lock(&s->mu);
    if (s->stop) {
        pthread_mutex_unlock(&s->mu);
        slot_op_unref(op);
        slot_op_unref(op);
        return mu_fail(err, MU_E_STATE, "sched: shutting down");
    }
    mu_slot_op **pp = &s->ops;
    while (*pp) pp = &(*pp)->next;
    *pp = op;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = op;
    return 0;
}

int mu_slot_op_result(mu_slot_op *op, int *rc, mu_slot_result *res, mu_err *err) {
    pthread_mutex_lock(&op->mu);
    bool done = op->done;
    if (done) {
        *rc = op->rc;
        if (res) *res = op->res;
        if (err) *err = op->err;
    }
    pthread_mutex_unlock(&op->mu);
    return done;
}

void mu_slot_op_free(mu_slot_op *op) {
    if (!op) return;
    pthread_mutex_lock(&op->mu);
    op->notify = NULL;
    pthread_mutex_unlock(&op->mu);
    slot_op_unref(op);
}

static void *engine_main(void *arg) {
    mu_sched *s = arg;
    mu_err err;
    int chunk = s->o.prefill_chunk > 0 ? s->o.prefill_chunk : 512;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        for (;;) {
            if (s->stop) break;
            admit(s);
            bool any = s->ops != NULL;
            for (int i = 0; i < s->o.n_slots; i++) any |= s->slots[i].job != NULL;
            if (any) break;
            pthread_cond_wait(&s->cv, &s->mu);
        }
        bool stop = s->stop;
        mu_slot_op *ops = s->ops;
        s->ops = NULL;
        pthread_mutex_unlock(&s->mu);
        while (ops) { /* in submission order: the list is kept that way */
            mu_slot_op *nx = ops->next;
            slot_op_run(s, ops);
            ops = nx;
        }
        if (stop) break;

        for (int i = 0; i < s->o.n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!sl->job) continue;
            if (atomic_load(&sl->job->cancel)) {
                slot_release(s, i, MU_FINISH_CANCEL, NULL);
                continue;
            }
            if (!sl->started && !slot_start(s, i)) continue;
            if (sl->waiting) group_join(s, i);
        }

        /* build one batch: decode tokens first, then prompt chunks, then the
         * verification blocks of speculating jobs (solo items go last) */
        int n_items = 0, budget = chunk;
        bool stalled = false;
        /* the batch's plain rows (a decode row per decoding job, the prompt
         * rows up to the chunk): what drafts must beat (draft_pays) */
        int n_rows = 0, prompt_rows = 0;
        for (int i = 0; i < s->o.n_slots; i++) {
            const slot *sl = &s->slots[i];
            if (!sl->job || sl->waiting) continue;
            if (sl->n_fed < sl->job->n_prompt) prompt_rows += sl->job->n_prompt - sl->n_fed;
            else if (!(s->o.stall_after > 0 && sl->job->n_gen >= s->o.stall_after)) n_rows++;
        }
        n_rows += prompt_rows < chunk ? prompt_rows : chunk;
        for (int i = 0; i < s->o.n_slots; i++) { /* full slots shift before they feed a token */
            slot *sl = &s->slots[i];
            if (sl->job && !sl->waiting && sl->n_fed >= sl->job->n_prompt && sl->job->ctx_shift &&
                mu_session_n_past(sl->sess) + 1 >= s->o.n_ctx)
                ctx_shift(s, i);
        }
        for (int i = 0; i < s->o.n_slots; i++) {
            slot *sl = &s->slots[i];
            sl->n_drafted = -1;
            if (!sl->job || sl->waiting || sl->n_fed < sl->job->n_prompt || sl->job->spec == MU_SPEC_NONE) continue;
            if (s->o.stall_after > 0 && sl->job->n_gen >= s->o.stall_after) continue;
            sl->n_drafted = draft(s, i, n_rows);
        }
        for (int pass = 0; pass < 3; pass++) {
            for (int i = 0; i < s->o.n_slots; i++) {
                slot *sl = &s->slots[i];
                if (!sl->job || sl->waiting) continue;
                bool decoding = sl->n_fed >= sl->job->n_prompt, spec = sl->n_drafted >= 0;
                if (decoding != (pass != 1) || (decoding && spec != (pass == 2))) continue;
                if (decoding && s->o.stall_after > 0 && sl->job->n_gen >= s->o.stall_after) {
                    stalled = true; /* test hook: waits for its cancel */
                    continue;
                }
                mu_batch_item *it = &s->items[n_items];
                it->s = sl->sess;
                it->in_embd = NULL;
                it->all_logits = false;
                it->embd = NULL;
                it->solo = false;
                it->feat = NULL;
                /* a dflash job's positions feed its drafter's rows, except a
                 * plain step in a busy batch (no drafts there): its capture
                 * and injection cost the batch (7 % of four busy slots on an
                 * H100), and the drafter attends to the rows it has */
                if (sl->job->spec == MU_SPEC_DFLASH && sl->dq && !(decoding && !spec && n_rows > 1)) {
                    const mu_drafter_info *di = mu_drafter_get_info(s->o.drafter);
                    it->feat = sl->feat;
                    it->feat_layers = di->target_layers;
                    it->n_feat_layers = di->n_target;
                }
                s->item_spec[n_items] = false;
                s->item_embd[n_items] = sl->job->embd_pool != MU_EMBD_OFF;
                if (decoding && spec) {
                    /* a verification block rounds solo (a block of the last token
                     * alone too: the test hook's, or a dflash pass that drafted
                     * nothing); an ngram step without drafts is a plain item */
                    sl->blk[0] = sl->last;
                    it->tokens = sl->blk;
                    it->n_tokens = 1 + sl->n_drafted;
                    it->all_logits = it->solo = true;
                    s->item_last[n_items] = true;
                    s->item_spec[n_items] = true;
                } else if (decoding) {
                    it->tokens = &sl->last;
                    it->n_tokens = 1;
                    s->item_last[n_items] = true;
                } else {
                    if (budget <= 0) continue;
                    int left = sl->job->n_prompt - sl->n_fed;
                    /* pooling over the whole prompt: in one step */
                    if (sl->job->embd_pool && sl->job->embd_pool != MU_EMBD_LAST && left > budget) continue;
                    int n = left < budget ? left : budget;
                    it->in_embd = NULL;
                    if (sl->job->media) {
                        /* one of llama.cpp's chunks at a time: a run of text tokens or one
                         * image's rows (mtmd decodes each chunk on its own) */
                        const mu_mprompt *mp = sl->job->media;
                        const bool img = mu_mprompt_embd(mp, sl->n_fed) != NULL;
                        int run = 1;
                        while (run < n && (mu_mprompt_embd(mp, sl->n_fed + run) != NULL) == img) run++;
                        n = run;
                        if (img) it->in_embd = mu_mprompt_embd(mp, sl->n_fed);
                    }
                    budget -= n;
                    it->tokens = sl->job->prompt + sl->n_fed;
                    it->n_tokens = n;
                    s->item_last[n_items] = n == left;
                    if (sl->job->embd_pool && n == left) it->embd = sl->job->embd_rows;
                }
                s->item_slot[n_items] = i;
                s->item_n[n_items] = it->n_tokens;
                n_items++;
            }
        }
        if (n_items == 0) {
            if (stalled) { /* only stalled jobs: sleep until a cancel or a new job */
                pthread_mutex_lock(&s->mu);
                while (!s->stop && !s->kick && !s->q_head) pthread_cond_wait(&s->cv, &s->mu);
                s->kick = false;
                pthread_mutex_unlock(&s->mu);
            }
            continue;
        }

        int rc = mu_forward(s->eng, s->items, n_items, &err);
        pthread_mutex_lock(&s->mu);
        s->m.n_forward++;
        s->m.n_busy_sum += (uint64_t)n_items;
        pthread_mutex_unlock(&s->mu);
        if (rc) {
            for (int k = 0; k < n_items; k++) {
                slot *sl = &s->slots[s->item_slot[k]];
                mu_session_reset(sl->sess);
                hist_cut(sl, 0);
                slot_release(s, s->item_slot[k], MU_FINISH_ERROR, err.msg);
            }
            continue;
        }

        for (int k = 0; k < n_items; k++) {
            int i = s->item_slot[k];
            slot *sl = &s->slots[i];
            mu_job *j = sl->job;
            if (s->items[k].feat) { /* the drafter learns every fed position (verify drops the rejected) */
                const int p0 = mu_session_n_past(sl->sess) - s->item_n[k];
                if (mu_draft_seq_inject(sl->dq, p0, s->item_n[k], sl->feat, &err)) mu_draft_seq_truncate(sl->dq, 0);
            }
            /* a producer replays this forward when the slot ran alone in it, or as solo rows */
            if (!s->items[k].in_embd && (n_items == 1 || s->items[k].solo))
                replay_add(sl, sl->n_hist, s->item_n[k], s->items[k].solo || s->item_n[k] == 1);
            memcpy(sl->hist + sl->n_hist, s->items[k].tokens, (size_t)s->item_n[k] * sizeof *sl->hist);
            sl->n_hist += s->item_n[k];
            bool prefilling = sl->n_fed < j->n_prompt;
            if (prefilling) {
                sl->n_fed += s->item_n[k];
                j->n_prompt_fed += s->item_n[k];
                pthread_mutex_lock(&s->mu);
                s->m.n_prompt_tokens += (uint64_t)s->item_n[k];
                s->info[i].n_past = mu_session_n_past(sl->sess);
                pthread_mutex_unlock(&s->mu);
                progress_event(j, sl->n_fed);
                if (!s->item_last[k]) continue;
                if (j->embd_pool) {
                    embd_finish(s, i, s->item_n[k]);
                    continue;
                }
            }
            if (s->item_spec[k]) {
                verify(s, i, s->item_n[k], mu_session_n_past(sl->sess) - s->item_n[k]);
                continue;
            }
            const float *lg = mu_session_logits(sl->sess, -1);
            if (prefilling) group_publish(s, i, lg);
            step(s, i, lg, mu_session_logits_best(sl->sess, -1));
        }
        /* the prefix cache copies the blocks the sessions completed (the
         * slots' sessions and histories outlive their jobs) */
        for (int k = 0; s->o.cache && k < n_items; k++) {
            slot *sl = &s->slots[s->item_slot[k]];
            bool rows = false; /* image rows (negative ids) are not cached yet */
            for (int t = 0; t < sl->n_hist && !rows; t++) rows = sl->hist[t] < 0;
            if (!s->item_embd[k] && !rows && !sl->rows_class[0] && !mu_session_shifted(sl->sess) &&
                mu_session_n_past(sl->sess) == sl->n_hist)
                mu_kv_cache_capture(s->o.cache, sl->sess, sl->lin, sl->hist, sl->n_hist);
        }
    }
    /* shutting down: end every slot action that is still waiting */
    pthread_mutex_lock(&s->mu);
    mu_slot_op *ops = s->ops;
    s->ops = NULL;
    pthread_mutex_unlock(&s->mu);
    while (ops) {
        mu_slot_op *nx = ops->next;
        mu_err e = {0};
        slot_op_end(ops, mu_fail(&e, MU_E_STATE, "server: shutting down"), NULL, &e);
        ops = nx;
    }
    /* shutting down: finish every running and queued job */
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].job) slot_release(s, i, MU_FINISH_CANCEL, "server: shutting down");
    pthread_mutex_lock(&s->mu);
    mu_job *q = s->q_head;
    s->q_head = s->q_tail = NULL;
    for (mu_job *k = q; k; k = k->next) k->queued = false, unreserve(s, k->ticket);
    s->n_queued = 0;
    s->m.n_queued = 0;
    pthread_mutex_unlock(&s->mu);
    while (q) {
        mu_job *n = q->next;
        job_finish(s, q, MU_FINISH_CANCEL, "server: shutting down");
        q = n;
    }
    return NULL;
}

static void slots_free(mu_sched *s) {
    for (int i = 0; i < s->o.n_slots; i++) {
        mu_session_free(s->slots[i].sess);
        mu_kv_lineage_free(s->slots[i].lin);
        free(s->slots[i].hist);
        mu_ngram_free(s->slots[i].ng);
        mu_draft_seq_free(s->slots[i].dq);
        free(s->slots[i].feat);
        free(s->slots[i].runs);
    }
}

int mu_sched_new(mu_engine *e, const mu_sched_opts *o, mu_sched **out, mu_err *err) {
    if (o->n_slots < 1 || o->n_slots > MU_SCHED_MAX_SLOTS)
        return mu_fail(err, MU_E_ARG, "sched: slots must be 1..%d: %d", MU_SCHED_MAX_SLOTS, o->n_slots);
    if (o->n_ctx < 2) return mu_fail(err, MU_E_ARG, "sched: context too small: %d", o->n_ctx);
    if (o->queue_max < 0) return mu_fail(err, MU_E_ARG, "sched: bad queue size: %d", o->queue_max);
    if (o->hold_until < 0) return mu_fail(err, MU_E_ARG, "sched: bad hold count: %d", o->hold_until);
    if ((o->spec != MU_SPEC_NONE && o->spec != MU_SPEC_NGRAM && o->spec != MU_SPEC_DFLASH) || o->draft_max < 0 ||
        o->draft_max > MU_SPEC_DRAFT_MAX || o->draft_min < 0)
        return mu_fail(err, MU_E_ARG, "sched: bad speculative decoding default (draft max 0..%d: %d, draft min: %d)",
                       MU_SPEC_DRAFT_MAX, o->draft_max, o->draft_min);
    if (o->spec == MU_SPEC_DFLASH && !o->drafter)
        return mu_fail(err, MU_E_ARG, "sched: speculative decoding with dflash needs a drafter (--draft)");
    mu_sched *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "sched: out of memory");
    s->eng = e;
    s->model = mu_engine_model(e);
    s->n_vocab = mu_model_get_info(s->model)->n_vocab;
    const mu_model_info *MI = mu_model_get_info(s->model);
    for (int il = 0; il < MI->n_layer; il++)
        if (MI->swa_layers[il]) s->n_swa = MI->n_swa;
    s->o = *o;
    s->p_min = s->m.spec_row_cost = row_cost(e);
    s->solo_fixed = mu_spec_solo_fixed(s->p_min, strcmp(mu_engine_backend(e), "cpu") != 0);
    const char *dn = getenv("MUSER_DFLASH_NGRAM");
    s->dflash_ngram = !(dn && !strcmp(dn, "0"));
    s->hold_until = o->hold_until;
    s->m.n_slots = o->n_slots;
    s->m.n_ctx = o->n_ctx;
    for (int i = 0; i < o->n_slots; i++) {
        int rc = mu_session_new(e, o->n_ctx, &s->slots[i].sess, err);
        if (!rc && !(s->slots[i].hist = malloc((size_t)o->n_ctx * sizeof(int32_t))))
            rc = mu_fail(err, MU_E_NOMEM, "sched: out of memory");
        if (!rc && o->cache) rc = mu_kv_lineage_new(o->cache, o->n_ctx, &s->slots[i].lin, err);
        if (!rc && o->drafter) {
            /* features of one item: a prompt chunk or a verification block */
            const int chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 512;
            const size_t rows = (size_t)(chunk > 1 + MU_SPEC_DRAFT_MAX ? chunk : 1 + MU_SPEC_DRAFT_MAX);
            rc = mu_draft_seq_new(o->drafter, o->n_ctx, &s->slots[i].dq, err);
            if (!rc && !(s->slots[i].feat = malloc(rows * (size_t)mu_drafter_get_info(o->drafter)->n_feat * sizeof(float))))
                rc = mu_fail(err, MU_E_NOMEM, "sched: out of memory for the drafter's features");
        }
        if (rc) {
            slots_free(s);
            free(s);
            return rc;
        }
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thr, NULL, engine_main, s)) {
        slots_free(s);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return mu_fail(err, MU_E_NOMEM, "sched: cannot start the engine thread");
    }
    *out = s;
    return 0;
}

void mu_sched_free(mu_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thr, NULL);
    slots_free(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* Validates r and builds an unlinked job holding both references; its gen
 * (sampler, constraint, text state) is built here, on the caller's thread. */
static int job_build(mu_sched *s, const mu_gen_req *r, mu_job **out, mu_err *err) {
    if (r->n_prompt < 1) return mu_fail(err, MU_E_ARG, "sched: the prompt is empty");
    if (r->embd) {
        int chunk = s->o.prefill_chunk > 0 ? s->o.prefill_chunk : 512;
        if (r->embd < MU_EMBD_NONE || r->embd > MU_EMBD_LAST)
            return mu_fail(err, MU_E_ARG, "sched: bad pooling type: %d", (int)r->embd);
        if (r->embd != MU_EMBD_LAST && r->n_prompt > chunk)
            return mu_fail(err, MU_E_ARG,
                           "sched: input (%d tokens) is too large to process: pooling needs it in one batch of at "
                           "most %d tokens", r->n_prompt, chunk);
    }
    if (r->n_prompt >= s->o.n_ctx)
        return mu_fail(err, MU_E_ARG, "sched: the prompt has %d tokens; the context holds %d", r->n_prompt, s->o.n_ctx);
    if (r->pin_slot && (r->id_slot < 0 || r->id_slot >= s->o.n_slots))
        return mu_fail(err, MU_E_ARG, "sched: no slot %d (this server has %d)", r->id_slot, s->o.n_slots);
    for (int i = 0; i < r->n_prompt; i++)
        if ((r->prompt[i] < 0 && !(r->media && mu_mprompt_embd(r->media, i))) || r->prompt[i] >= s->n_vocab)
            return mu_fail(err, MU_E_ARG, "sched: token id out of range: %d", (int)r->prompt[i]);
    for (int i = 0; i < r->n_forced; i++)
        if (r->forced[i] < 0 || r->forced[i] >= s->n_vocab)
            return mu_fail(err, MU_E_ARG, "sched: forced token id out of range: %d", (int)r->forced[i]);
    if (r->save && r->embd) return mu_fail(err, MU_E_ARG, "sched: an embedding job saves no state");
    if (r->install && (r->n_installed < 1 || r->n_installed >= r->n_prompt || r->keep_prefix))
        return mu_fail(err, MU_E_ARG, "sched: installed state must cover 1..%d of the prompt's tokens (and no keep_prefix)",
                       r->n_prompt - 1);
    if (r->install && (r->install_keep < 0 || r->install_keep >= r->n_installed || (r->install_keep > 0) != (r->slot_ticket != 0) ||
                       r->install_step < 0))
        return mu_fail(err, MU_E_ARG, "sched: an install on a live slot keeps 1..%d positions of a reserved slot",
                       r->n_installed - 1);
    int room = s->o.n_ctx - r->n_prompt;
    const bool shift = s->o.ctx_shift && !r->media && r->embd == MU_EMBD_OFF;
    if (shift) room = INT32_MAX / 2; /* the context shifts: only n_predict or a stop ends the job */
    if (r->n_keep < -1 || r->n_discard < 0)
        return mu_fail(err, MU_E_ARG, "sched: bad context shift parameters (n_keep %d, n_discard %d)", r->n_keep,
                       r->n_discard);
    int max_new = r->n_predict < 0 || r->n_predict > room ? room : r->n_predict;
    if (max_new < 1) max_new = 1;
    bool by_ctx = !shift && max_new == room && (r->n_predict < 0 || r->n_predict > room);
    mu_job *j = calloc(1, sizeof *j);
    size_t pb;
    if (!j || !mu_mul_ok((size_t)r->n_prompt, sizeof(int32_t), &pb) || !(j->prompt = malloc(pb))) {
        free(j);
        return mu_fail(err, MU_E_NOMEM, "sched: out of memory for a request");
    }
    mu_gen_req rs;
    if (r->spec == MU_SPEC_NONE && !r->spec_off && s->o.spec != MU_SPEC_NONE) { /* the scheduler's default */
        rs = *r;
        rs.spec = s->o.spec;
        rs.draft_max = r->draft_max > 0 ? r->draft_max : s->o.draft_max;
        rs.draft_min = r->draft_min > 0 ? r->draft_min : s->o.draft_min;
        r = &rs;
    }
    if (r->spec_off && r->spec != MU_SPEC_NONE) {
        free(j->prompt);
        free(j);
        return mu_fail(err, MU_E_ARG, "sched: speculative decoding both off and %s", mu_spec_name(r->spec));
    }
    if (r->spec == MU_SPEC_DFLASH && !s->o.drafter) {
        free(j->prompt);
        free(j);
        return mu_fail(err, MU_E_ARG, "sched: speculative decoding with dflash needs a drafter (the server's --draft)");
    }
    if (r->spec < MU_SPEC_NONE || r->spec > MU_SPEC_DFLASH || r->draft_max < 0 || r->draft_max > MU_SPEC_DRAFT_MAX ||
        r->draft_min < 0 || r->n_spec_script < 0 || (r->n_spec_script > 0 && !r->spec_script)) {
        free(j->prompt);
        free(j);
        return mu_fail(err, MU_E_ARG, "sched: bad speculative decoding parameters (draft max 0..%d: %d, draft min: %d)",
                       MU_SPEC_DRAFT_MAX, r->draft_max, r->draft_min);
    }
    if (r->spec == MU_SPEC_SCRIPT && r->n_spec_script > 0) {
        j->script = malloc((size_t)r->n_spec_script * sizeof *j->script);
        if (!j->script) {
            free(j->prompt);
            free(j);
            return mu_fail(err, MU_E_NOMEM, "sched: out of memory for a request");
        }
        memcpy(j->script, r->spec_script, (size_t)r->n_spec_script * sizeof *j->script);
        j->n_script = r->n_spec_script;
    }
    int rc = mu_gen_new(s->model, r, max_new, by_ctx, &j->gen, err);
    if (rc) {
        free(j->script);
        free(j->prompt);
        free(j);
        return rc;
    }
    if (r->embd) {
        /* the final chunk's rows: the whole prompt, or for LAST at most a step's tokens */
        int chunk = s->o.prefill_chunk > 0 ? s->o.prefill_chunk : 512;
        j->embd_pool = r->embd;
        j->embd_norm = r->embd_normalize;
        j->n_embd = mu_model_get_info(s->model)->n_embd;
        j->n_embd_cap = r->n_prompt < chunk ? r->n_prompt : chunk;
        size_t eb;
        if (!mu_mul_ok((size_t)j->n_embd_cap * (size_t)j->n_embd, sizeof(float), &eb) ||
            !(j->embd_rows = malloc(eb))) {
            mu_gen_free(j->gen);
            free(j->script);
            free(j->prompt);
            free(j);
            return mu_fail(err, MU_E_NOMEM, "sched: out of memory for embeddings");
        }
    }
    j->max_new = max_new;
    j->ctx_shift = shift;
    j->n_keep = r->n_keep;
    j->n_discard = r->n_discard;
    j->spec = r->spec;
    j->use_ngram = r->spec == MU_SPEC_DFLASH && s->dflash_ngram;
    /* DFlash drafts at most a block: block_size - 1 tokens, its default (llama.cpp clamps to it) */
    j->draft_max = r->draft_max > 0 ? r->draft_max
                   : r->spec == MU_SPEC_DFLASH ? mu_drafter_get_info(s->o.drafter)->block_size - 1
                                               : MU_SPEC_NGRAM_DRAFT_DEFAULT;
    j->draft_min = r->draft_min;
    memcpy(j->prompt, r->prompt, pb);
    j->n_prompt = r->n_prompt;
    j->media = r->media;
    j->media_take = r->media_take;
    j->keep_prefix = r->keep_prefix;
    j->want_slot = r->pin_slot ? r->id_slot : -1;
    j->progress = r->progress && !r->embd;
    j->install = r->install;
    j->install_user = r->install_user;
    j->n_installed = r->n_installed;
    j->install_class = r->install ? r->install_class : NULL;
    j->ticket = r->install ? r->slot_ticket : 0;
    j->install_keep = r->install ? r->install_keep : 0;
    j->install_step = r->install ? r->install_step : 0;
    j->refs = 2;
    j->st.slot = -1;
    j->st.n_prompt = r->n_prompt;
    atomic_init(&j->cancel, false);
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->nmu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->t_submit = now_ms();
    *out = j;
    return 0;
}

const char *mu_spec_name(mu_spec sp) {
    return sp == MU_SPEC_NONE     ? "none"
           : sp == MU_SPEC_NGRAM  ? "ngram"
           : sp == MU_SPEC_SCRIPT ? "script"
           : sp == MU_SPEC_DFLASH ? "dflash"
                                  : "?";
}

int mu_spec_parse(const char *name) {
    if (!strcmp(name, "none")) return MU_SPEC_NONE;
    if (!strcmp(name, "ngram")) return MU_SPEC_NGRAM;
    if (!strcmp(name, "dflash")) return MU_SPEC_DFLASH;
    return -1; /* "script" is a test hook, not a user's choice */
}

mu_engine *mu_sched_engine(const mu_sched *s) { return s->eng; }

static int submit_jobs(mu_sched *s, const mu_gen_req *r, int n, mu_job **out, mu_err *err);

int mu_sched_submit(mu_sched *s, const mu_gen_req *r, int n, mu_job **out, mu_err *err) {
    int rc = submit_jobs(s, r, n, out, err);
    if (rc && n >= 1 && r[0].slot_ticket) { /* nothing queued: its reservation ends */
        pthread_mutex_lock(&s->mu);
        unreserve(s, r[0].slot_ticket);
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

int mu_sched_slot_hold(mu_sched *s, const int32_t *prompt, int max_have, mu_slot_hold *h) {
    *h = (mu_slot_hold){.slot = -1};
    if (!s || max_have < 1) return 0;
    pthread_mutex_lock(&s->mu);
    int best = -1, best_n = 0;
    for (int i = 0; i < s->o.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->job || sl->ticket || sl->op_running) continue;
        /* free and idle: only this thread (under mu) and its next job touch it */
        int n = common_prefix(sl->hist, sl->n_replay, prompt, max_have), pos = 0;
        for (int r = 0; r < sl->n_runs; r++) { /* a whole run, or a part of a solo one */
            const int len = (int)(sl->runs[r] & ~MU_RUN_SOLO);
            if (pos + len > n) {
                if (sl->runs[r] & MU_RUN_SOLO) pos = n;
                break;
            }
            pos += len;
        }
        n = pos;
        while (n > 0 && (n < sl->min_keep || !mu_session_can_truncate(sl->sess, n))) n = 0;
        if (n > best_n) best = i, best_n = n;
    }
    if (best >= 0) {
        slot *sl = &s->slots[best];
        h->runs = malloc((size_t)(sl->n_runs ? sl->n_runs : 1) * sizeof *h->runs);
        if (h->runs) {
            int pos = 0;
            for (int r = 0; r < sl->n_runs && pos < best_n; r++) {
                int len = (int)(sl->runs[r] & ~MU_RUN_SOLO);
                if (pos + len > best_n) len = best_n - pos; /* a solo run's part */
                h->runs[h->n_runs++] = (uint32_t)len | (sl->runs[r] & MU_RUN_SOLO);
                pos += len;
            }
            sl->ticket = h->ticket = ++s->next_ticket;
            h->slot = best;
            h->n_have = best_n;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return h->n_have;
}

void mu_sched_slot_unhold(mu_sched *s, mu_slot_hold *h) {
    if (s && h->ticket) {
        pthread_mutex_lock(&s->mu);
        unreserve(s, h->ticket);
        pthread_mutex_unlock(&s->mu);
    }
    free(h->runs);
    *h = (mu_slot_hold){.slot = -1};
}

static int submit_jobs(mu_sched *s, const mu_gen_req *r, int n, mu_job **out, mu_err *err) {
    if (n < 1 || n > MU_GEN_MAX_CHOICES) return mu_fail(err, MU_E_ARG, "sched: choices must be 1..%d: %d", MU_GEN_MAX_CHOICES, n);
    if (n > 1 && r[0].embd) return mu_fail(err, MU_E_ARG, "sched: an embedding job has one choice");
    if (r[0].media && (r[0].embd || r[0].install))
        return mu_fail(err, MU_E_ARG, "sched: a prompt with images is not for embeddings or installed state");
    mu_job *jobs[MU_GEN_MAX_CHOICES];
    group *g = NULL;
    if (n > 1 && r[0].install) return mu_fail(err, MU_E_ARG, "sched: installed state serves one choice only");
    if (n > 1 && r[0].save) return mu_fail(err, MU_E_ARG, "sched: a saved state serves one choice only");
    if (n > 1) {
        g = calloc(1, sizeof *g);
        if (!g) return mu_fail(err, MU_E_NOMEM, "sched: out of memory");
        atomic_init(&g->refs, n);
        g->n = n;
        g->leader = -1;
    }
    for (int k = 0; k < n; k++) {
        mu_gen_req q = r[k];
        q.prompt = r[0].prompt;
        q.n_prompt = r[0].n_prompt;
        q.media = r[0].media;
        /* a pinned request: its first choice runs in the slot, the others
         * anywhere (llama.cpp's child tasks take no id_slot) */
        q.pin_slot = k == 0 && r[0].pin_slot;
        q.id_slot = r[0].id_slot;
        if (q.media) { /* ids per position; image rows are negative (mu_mprompt_tokens) */
            q.prompt = mu_mprompt_tokens(q.media);
            q.n_prompt = mu_mprompt_n(q.media);
            q.keep_prefix = false; /* the prefix cache and packs do not hold image rows yet */
            q.spec_off = true, q.spec = MU_SPEC_NONE;
        }
        int rc = job_build(s, &q, &jobs[k], err);
        if (rc) {
            for (int m = 0; m < k; m++) {
                jobs[m]->refs = 1;
                job_unref(jobs[m]);
            }
            for (int m = k; m < n && g; m++) group_unref(g);
            return rc;
        }
        jobs[k]->grp = g;
    }
    pthread_mutex_lock(&s->mu);
    int n_free = 0;
    for (int i = 0; i < s->o.n_slots; i++) n_free += s->slots[i].job == NULL;
    /* the queue holds jobs beyond the free slots; a free slot admits at
     * once. The choices of one request count as one request here. */
    int waiting_ahead = s->n_queued;
    if (s->stop || waiting_ahead >= s->o.queue_max + n_free) {
        s->m.n_busy_rejects++;
        pthread_mutex_unlock(&s->mu);
        for (int k = 0; k < n; k++) {
            jobs[k]->refs = 1;
            job_unref(jobs[k]);
        }
        return mu_fail(err, MU_E_STATE, "server: busy: %d requests are waiting", waiting_ahead);
    }
    for (int k = 0; k < n; k++) {
        mu_job *j = jobs[k];
        j->install_free = r[k].install ? r[k].install_free : NULL; /* the job owns it from here */
        j->save = r[k].save;
        j->save_user = r[k].save_user;
        j->save_free = r[k].save ? r[k].save_free : NULL;
        j->sched = s;
        j->queued = true;
        if (s->q_tail) s->q_tail->next = j;
        else s->q_head = j;
        s->q_tail = j;
        s->n_queued++;
        out[k] = j;
    }
    s->m.n_queued = s->n_queued;
    s->m.n_requests++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int mu_job_next(mu_job *j, mu_gen_event *ev, int timeout_ms) {
    pthread_mutex_lock(&j->mu);
    if (j->n_read == j->n_pub && !j->ended && timeout_ms != 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        if (timeout_ms > 0) {
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
        }
        j->n_waiting++;
        while (j->n_read == j->n_pub && !j->ended) {
            if (timeout_ms < 0) pthread_cond_wait(&j->cv, &j->mu);
            else if (pthread_cond_timedwait(&j->cv, &j->mu, &ts)) break;
        }
        j->n_waiting--;
    }
    int got = 0;
    if (j->finish_read) {
        got = 0;
    } else if (j->n_read < j->n_pub) {
        const qev *q = &j->evs[j->n_read];
        if (copy_out(j, q, ev)) {
            j->n_read++;
            got = 1;
        } else if (q->ev.kind != MU_EV_FINISH) {
            j->n_read++; /* out of memory: this event is lost, as in push_event */
        }
    }
    if (!got && !j->finish_read && j->ended && j->n_read == j->n_pub) {
        /* the FINISH record itself was lost to out of memory */
        *ev = (mu_gen_event){.kind = MU_EV_FINISH, .finish = MU_FINISH_ERROR, .err = "out of memory"};
        ev->stats = j->st;
        got = 1;
    }
    if (got && ev->kind == MU_EV_FINISH) j->finish_read = true;
    pthread_mutex_unlock(&j->mu);
    return got;
}

void mu_job_wait_end(mu_job *j) {
    pthread_mutex_lock(&j->mu);
    while (!j->ended) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

void mu_job_cancel(mu_job *j) {
    if (atomic_exchange(&j->cancel, true) || !j->sched) return;
    pthread_mutex_lock(&j->mu);
    bool ended = j->ended;
    pthread_mutex_unlock(&j->mu);
    if (ended) return; /* its scheduler may be gone */
    /* a job still in the queue ends now (and frees its queue place); the
     * engine thread never saw it, so this thread may end its gen */
    mu_sched *s = j->sched;
    pthread_mutex_lock(&s->mu);
    s->kick = true;
    pthread_cond_signal(&s->cv);
    bool dequeued = false;
    if (j->queued) {
        mu_job **pp = &s->q_head, *prev = NULL;
        while (*pp && *pp != j) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp) {
            *pp = j->next;
            if (s->q_tail == j) s->q_tail = prev;
            j->next = NULL;
            j->queued = false;
            s->n_queued--;
            s->m.n_queued = s->n_queued;
            unreserve(s, j->ticket);
            dequeued = true;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (dequeued) job_finish(s, j, MU_FINISH_CANCEL, NULL);
}

const float *mu_job_embedding(mu_job *j, int *n_rows, int *n_embd) {
    pthread_mutex_lock(&j->mu);
    const float *e = j->finish_read ? j->embd : NULL;
    pthread_mutex_unlock(&j->mu);
    if (n_rows) *n_rows = e ? j->n_embd_rows : 0;
    if (n_embd) *n_embd = e ? j->n_embd : 0;
    return e;
}

void mu_job_set_notify(mu_job *j, void (*fn)(void *user), void *user) {
    pthread_mutex_lock(&j->nmu);
    j->notify = fn;
    j->notify_user = user;
    atomic_store(&j->has_notify, fn != NULL);
    pthread_mutex_unlock(&j->nmu);
}

void mu_job_free(mu_job *j) {
    if (!j) return;
    mu_job_set_notify(j, NULL, NULL);
    mu_job_cancel(j);
    job_unref(j);
}

void mu_sched_get_metrics(mu_sched *s, mu_sched_metrics *m) {
    pthread_mutex_lock(&s->mu);
    *m = s->m;
    pthread_mutex_unlock(&s->mu);
}

void mu_sched_get_slot(mu_sched *s, int i, mu_sched_slot_info *info) {
    pthread_mutex_lock(&s->mu);
    *info = i >= 0 && i < s->o.n_slots ? s->info[i] : (mu_sched_slot_info){0};
    pthread_mutex_unlock(&s->mu);
    if (i >= 0 && i < s->o.n_slots && s->slots[i].sess)
        mu_session_kv_bytes(s->slots[i].sess, info->n_past, &info->kv_reserved_bytes, &info->kv_used_bytes);
}

int mu_sched_recent(mu_sched *s, mu_sched_job_record *out, int cap) {
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->n_recent < MU_SCHED_RECENT ? s->n_recent : MU_SCHED_RECENT;
    int k = 0;
    for (; k < cap && (uint64_t)k < n; k++) out[k] = s->recent[(s->n_recent - 1 - (uint64_t)k) % MU_SCHED_RECENT];
    pthread_mutex_unlock(&s->mu);
    return k;
}
