/* sched.c: slots, the bounded queue and the engine thread.
 * Owns: job lifetime (reference counted between the submitting HTTP thread
 * and the engine thread), slot assignment, batching, sampling, stop rules on
 * token ids (stop tokens, length, context), and aggregate metrics.
 * Does not own: text. Stop strings, detokenization and protocol shapes live
 * in the adapters, which cancel the job when a stop string matches.
 * Design: a single engine thread is the only thread that ever touches a
 * mu_session or a mu_sampler. Each step it builds one batch holding one
 * decode token for every generating slot plus prompt chunks of slots that are
 * still prefilling (bounded per step so decoding slots keep their pace), and
 * calls mu_forward once. Per-token buffers are sized at submit, so the decode
 * loop does not allocate.
 * The n choices of one request are n jobs in a group: the first to reach a
 * slot (the leader) evaluates the prompt; the others wait, then copy its KV
 * state and final logits (mu_session_state_save/load) instead of evaluating
 * the prompt again. Structured output (constrain.h) replaces the plain
 * sampler call for jobs that carry a schema and ends them when the value
 * is closed. */
#include "sched.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/mem.h"
#include "constrain.h"

/* Shared by the jobs of one request (n choices). refs is touched by any
 * thread; everything else only by the engine thread. */
typedef struct {
    atomic_int refs;
    int leader;           /* slot evaluating the prompt, -1 when none */
    bool ready, failed;   /* state saved / cannot be shared (each job evaluates) */
    void *state;
    size_t state_n;
    float *logits;        /* [n_vocab] after the prompt */
} group;

static void group_unref(group *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    free(g->state);
    free(g->logits);
    free(g);
}

struct mu_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    atomic_bool cancel;
    /* input (immutable after submit) */
    int32_t *prompt;
    int n_prompt;
    int max_new;
    mu_sample_params sp;
    bool logprobs, ignore_eos, max_by_ctx;
    int n_top;
    mu_jsonc_schema *schema;
    bool schema_chat;
    group *grp;
    /* output, guarded by mu */
    mu_sched_tok *toks;   /* [max_new] */
    int n_toks, n_read;
    int finish;
    mu_job_stats st;
    /* timing (engine thread) */
    double t_submit, t_start, t_first;
    mu_job *next;         /* queue link */
};

typedef struct {
    mu_session *sess;
    mu_job *job;
    mu_sampler *smp;
    mu_constrain *cons;   /* structured output, NULL for free text */
    bool waiting;         /* a group member waiting for the leader's prompt state */
    int n_fed;            /* prompt tokens already in the session */
    int32_t last;         /* token to feed next when decoding */
} slot;

struct mu_sched {
    mu_engine *eng;
    const mu_model *model;
    int n_vocab;
    mu_sched_opts o;
    slot slots[MU_SCHED_MAX_SLOTS];
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    mu_job *q_head, *q_tail;
    int n_queued;
    mu_sched_metrics m;
    mu_sched_slot_info info[MU_SCHED_MAX_SLOTS];
    /* batch scratch, sized once */
    mu_batch_item items[MU_SCHED_MAX_SLOTS];
    int item_slot[MU_SCHED_MAX_SLOTS];
    bool item_last[MU_SCHED_MAX_SLOTS];
    int item_n[MU_SCHED_MAX_SLOTS];
};

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
    pthread_cond_destroy(&j->cv);
    free(j->prompt);
    free(j->toks);
    mu_jsonc_schema_unref(j->schema);
    group_unref(j->grp);
    free(j);
}

/* Engine thread: record the end of a job and drop the engine's reference. */
static void job_finish(mu_sched *s, mu_job *j, int finish, const char *why) {
    double t = now_ms();
    pthread_mutex_lock(&j->mu);
    j->finish = finish;
    j->st.finish = finish;
    j->st.n_gen = j->n_toks;
    if (j->t_start > 0) j->st.queue_ms = j->t_start - j->t_submit;
    if (j->t_first > 0) {
        j->st.prompt_ms = j->t_first - j->t_start;
        j->st.gen_ms = t - j->t_first;
    } else if (j->t_start > 0) {
        j->st.prompt_ms = t - j->t_start;
    }
    if (why) snprintf(j->st.err, sizeof j->st.err, "%s", why);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&s->mu);
    s->m.prompt_s += j->st.prompt_ms / 1e3;
    s->m.gen_s += j->st.gen_ms / 1e3;
    pthread_mutex_unlock(&s->mu);
    job_unref(j);
}

static void slot_release(mu_sched *s, int i, int finish, const char *why) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    mu_sampler_free(sl->smp);
    sl->smp = NULL;
    if (sl->cons) {
        uint64_t np, nc;
        double sec;
        mu_constrain_stats(sl->cons, &np, &nc, &sec);
        pthread_mutex_lock(&j->mu);
        j->st.constrain_ms = sec * 1e3;
        pthread_mutex_unlock(&j->mu);
        mu_constrain_free(sl->cons);
        sl->cons = NULL;
    }
    sl->waiting = false;
    if (j->grp && j->grp->leader == i) j->grp->leader = -1;
    pthread_mutex_lock(&s->mu);
    sl->job = NULL;
    s->info[i].busy = false;
    s->m.n_processing--;
    pthread_mutex_unlock(&s->mu);
    job_finish(s, j, finish, why);
}

/* Engine thread: log-softmax bits for one step. */
static void fill_logprobs(mu_sched *s, mu_job *j, const float *lg, mu_sched_tok *t) {
    int nv = s->n_vocab;
    float mx = lg[0];
    for (int k = 1; k < nv; k++) if (lg[k] > mx) mx = lg[k];
    double sum = 0;
    for (int k = 0; k < nv; k++) sum += exp((double)lg[k] - mx);
    double lse = mx + log(sum);
    t->logprob = (float)(lg[t->id] - lse);
    t->n_top = 0;
    if (j->n_top > 0) {
        float probs[MU_SCHED_MAX_TOP];
        mu_top_probs(lg, nv, j->n_top, t->top_ids, probs);
        for (int k = 0; k < j->n_top; k++) t->top_logprobs[k] = (float)(lg[t->top_ids[k]] - lse);
        t->n_top = j->n_top;
    }
}

/* Engine thread: samples slot i's next token from lg (the plain sampler,
 * or under the job's structured-output constraint), publishes it and
 * applies the stop rules. */
static void emit(mu_sched *s, int i, const float *lg) {
    slot *sl = &s->slots[i];
    mu_job *j = sl->job;
    mu_sched_tok t;
    t.id = sl->cons ? mu_constrain_pick(sl->cons, sl->smp, &j->sp, lg) : mu_sampler_sample(sl->smp, lg);
    if (t.id < 0) {
        slot_release(s, i, MU_FINISH_ERROR, "structured output: no token can continue the value");
        return;
    }
    if (sl->cons) mu_constrain_accept(sl->cons, t.id);
    t.logprob = 0;
    t.n_top = 0;
    if (j->logprobs || j->n_top > 0) fill_logprobs(s, j, lg, &t);
    double tn = now_ms();
    pthread_mutex_lock(&j->mu);
    if (j->t_first == 0) j->t_first = tn;
    j->toks[j->n_toks++] = t;
    int n_toks = j->n_toks;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    sl->last = t.id;
    pthread_mutex_lock(&s->mu);
    s->m.n_gen_tokens++;
    s->info[i].n_gen = n_toks;
    s->info[i].n_past = mu_session_n_past(sl->sess);
    pthread_mutex_unlock(&s->mu);

    if (!j->ignore_eos && mu_model_is_stop(s->model, t.id))
        slot_release(s, i, MU_FINISH_STOP, NULL);
    else if (sl->cons && mu_constrain_done(sl->cons))
        slot_release(s, i, MU_FINISH_STOP, NULL);
    else if (n_toks >= j->max_new)
        slot_release(s, i, j->max_by_ctx ? MU_FINISH_CTX : MU_FINISH_LENGTH, NULL);
    else if (atomic_load(&j->cancel))
        slot_release(s, i, MU_FINISH_CANCEL, NULL);
}

/* Engine thread: a group member in slot i takes the leader's prompt state
 * (or becomes the leader, or waits). Returns false when the slot was
 * released. */
static bool group_join(mu_sched *s, int i) {
    slot *sl = &s->slots[i];
    group *g = sl->job->grp;
    sl->waiting = false;
    if (!g || g->failed || sl->n_fed > 0) return true;
    if (g->ready) {
        mu_err err;
        mu_session_reset(sl->sess);
        if (mu_session_state_load(sl->sess, g->state, g->state_n, &err)) {
            g->failed = true; /* evaluate the prompt like a lone job */
            mu_session_reset(sl->sess);
            return true;
        }
        sl->n_fed = sl->job->n_prompt;
        pthread_mutex_lock(&sl->job->mu);
        sl->job->st.prompt_shared = true;
        pthread_mutex_unlock(&sl->job->mu);
        pthread_mutex_lock(&s->mu);
        s->info[i].n_past = mu_session_n_past(sl->sess);
        pthread_mutex_unlock(&s->mu);
        emit(s, i, g->logits);
        return s->slots[i].job != NULL;
    }
    if (g->leader < 0) g->leader = i;
    else if (g->leader != i) sl->waiting = true;
    return true;
}

/* Engine thread: the leader of a group finished its prompt; keep its state
 * and logits for the other members. */
static void group_publish(mu_sched *s, int i, const float *lg) {
    slot *sl = &s->slots[i];
    group *g = sl->job->grp;
    if (!g || g->ready || g->failed || g->leader != i) return;
    size_t cap = mu_session_state_bytes(sl->sess), n = 0;
    g->state = malloc(cap ? cap : 1);
    g->logits = malloc((size_t)s->n_vocab * sizeof *g->logits);
    mu_err err;
    if (!g->state || !g->logits || mu_session_state_save(sl->sess, g->state, cap, &n, &err)) {
        g->failed = true;
        return;
    }
    memcpy(g->logits, lg, (size_t)s->n_vocab * sizeof *g->logits);
    g->state_n = n;
    g->ready = true;
}

static int admit(mu_sched *s) {
    /* called with s->mu held */
    int admitted = 0;
    for (int i = 0; i < s->o.n_slots && s->q_head; i++) {
        slot *sl = &s->slots[i];
        if (sl->job) continue;
        mu_job *j = s->q_head;
        s->q_head = j->next;
        if (!s->q_head) s->q_tail = NULL;
        s->n_queued--;
        sl->job = j;
        sl->n_fed = 0;
        j->t_start = now_ms();
        j->st.slot = i;
        s->info[i] = (mu_sched_slot_info){.busy = true, .n_prompt = j->n_prompt};
        s->m.n_processing++;
        admitted++;
    }
    s->m.n_queued = s->n_queued;
    return admitted;
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
            bool any = false;
            for (int i = 0; i < s->o.n_slots; i++) any |= s->slots[i].job != NULL;
            if (any) break;
            pthread_cond_wait(&s->cv, &s->mu);
        }
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;

        /* new slots: fresh session and sampler (sampler allocation happens
         * once per job, not per token) */
        for (int i = 0; i < s->o.n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!sl->job) continue;
            if (atomic_load(&sl->job->cancel)) {
                slot_release(s, i, MU_FINISH_CANCEL, NULL);
                continue;
            }
            if (!sl->smp) {
                mu_session_reset(sl->sess);
                if (mu_sampler_new(&sl->job->sp, s->n_vocab, &sl->smp, &err)) {
                    slot_release(s, i, MU_FINISH_ERROR, err.msg);
                    continue;
                }
                if (sl->job->schema &&
                    mu_constrain_new(s->model, sl->job->schema, sl->job->schema_chat, &sl->cons, &err)) {
                    slot_release(s, i, MU_FINISH_ERROR, err.msg);
                    continue;
                }
                sl->waiting = sl->job->grp != NULL;
            }
            if (sl->waiting) group_join(s, i);
        }

        /* build one batch: decode tokens first, then prompt chunks */
        int n_items = 0, budget = chunk;
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < s->o.n_slots; i++) {
                slot *sl = &s->slots[i];
                if (!sl->job || sl->waiting) continue;
                bool decoding = sl->n_fed >= sl->job->n_prompt;
                if (decoding != (pass == 0)) continue;
                mu_batch_item *it = &s->items[n_items];
                it->s = sl->sess;
                it->all_logits = false;
                if (decoding) {
                    it->tokens = &sl->last;
                    it->n_tokens = 1;
                    s->item_last[n_items] = true;
                } else {
                    if (budget <= 0) continue;
                    int left = sl->job->n_prompt - sl->n_fed;
                    int n = left < budget ? left : budget;
                    budget -= n;
                    it->tokens = sl->job->prompt + sl->n_fed;
                    it->n_tokens = n;
                    s->item_last[n_items] = n == left;
                }
                s->item_slot[n_items] = i;
                s->item_n[n_items] = it->n_tokens;
                n_items++;
            }
        }
        if (n_items == 0) continue;

        int rc = mu_forward(s->eng, s->items, n_items, &err);
        pthread_mutex_lock(&s->mu);
        s->m.n_forward++;
        pthread_mutex_unlock(&s->mu);
        if (rc) {
            for (int k = 0; k < n_items; k++) {
                mu_session_reset(s->slots[s->item_slot[k]].sess);
                slot_release(s, s->item_slot[k], MU_FINISH_ERROR, err.msg);
            }
            continue;
        }

        for (int k = 0; k < n_items; k++) {
            int i = s->item_slot[k];
            slot *sl = &s->slots[i];
            mu_job *j = sl->job;
            bool prefilling = sl->n_fed < j->n_prompt;
            if (prefilling) {
                sl->n_fed += s->item_n[k];
                pthread_mutex_lock(&s->mu);
                s->m.n_prompt_tokens += (uint64_t)s->item_n[k];
                s->info[i].n_past = mu_session_n_past(sl->sess);
                pthread_mutex_unlock(&s->mu);
                if (!s->item_last[k]) continue;
            }
            const float *lg = mu_session_logits(sl->sess, -1);
            if (prefilling) group_publish(s, i, lg);
            emit(s, i, lg);
        }
    }
    /* shutting down: finish every running and queued job */
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].job) slot_release(s, i, MU_FINISH_CANCEL, "server: shutting down");
    pthread_mutex_lock(&s->mu);
    mu_job *q = s->q_head;
    s->q_head = s->q_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (q) {
        mu_job *n = q->next;
        job_finish(s, q, MU_FINISH_CANCEL, "server: shutting down");
        q = n;
    }
    return NULL;
}

int mu_sched_new(mu_engine *e, const mu_sched_opts *o, mu_sched **out, mu_err *err) {
    if (o->n_slots < 1 || o->n_slots > MU_SCHED_MAX_SLOTS)
        return mu_fail(err, MU_E_ARG, "sched: slots must be 1..%d: %d", MU_SCHED_MAX_SLOTS, o->n_slots);
    if (o->n_ctx < 2) return mu_fail(err, MU_E_ARG, "sched: context too small: %d", o->n_ctx);
    if (o->queue_max < 0) return mu_fail(err, MU_E_ARG, "sched: bad queue size: %d", o->queue_max);
    mu_sched *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "sched: out of memory");
    s->eng = e;
    s->model = mu_engine_model(e);
    s->n_vocab = mu_model_get_info(s->model)->n_vocab;
    s->o = *o;
    s->m.n_slots = o->n_slots;
    s->m.n_ctx = o->n_ctx;
    for (int i = 0; i < o->n_slots; i++) {
        int rc = mu_session_new(e, o->n_ctx, &s->slots[i].sess, err);
        if (rc) {
            for (int k = 0; k < i; k++) mu_session_free(s->slots[k].sess);
            free(s);
            return rc;
        }
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thr, NULL, engine_main, s)) {
        for (int k = 0; k < o->n_slots; k++) mu_session_free(s->slots[k].sess);
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
    for (int i = 0; i < s->o.n_slots; i++) mu_session_free(s->slots[i].sess);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* Validates r and builds an unlinked job holding both references. */
static int job_build(mu_sched *s, const mu_sched_req *r, mu_job **out, mu_err *err) {
    if (r->n_prompt < 1) return mu_fail(err, MU_E_ARG, "sched: the prompt is empty");
    if (r->n_prompt >= s->o.n_ctx)
        return mu_fail(err, MU_E_ARG, "sched: the prompt has %d tokens; the context holds %d", r->n_prompt, s->o.n_ctx);
    if (r->n_top < 0 || r->n_top > MU_SCHED_MAX_TOP)
        return mu_fail(err, MU_E_ARG, "sched: top logprobs must be 0..%d: %d", MU_SCHED_MAX_TOP, r->n_top);
    int n_vocab = s->n_vocab;
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= n_vocab)
            return mu_fail(err, MU_E_ARG, "sched: token id out of range: %d", (int)r->prompt[i]);
    int room = s->o.n_ctx - r->n_prompt;
    int max_new = r->n_predict < 0 || r->n_predict > room ? room : r->n_predict;
    if (max_new < 1) max_new = 1;
    mu_job *j = calloc(1, sizeof *j);
    size_t pb, tb;
    if (!j || !mu_mul_ok((size_t)r->n_prompt, sizeof(int32_t), &pb) || !mu_mul_ok((size_t)max_new, sizeof(mu_sched_tok), &tb)) {
        free(j);
        return mu_fail(err, MU_E_NOMEM, "sched: out of memory");
    }
    j->prompt = malloc(pb);
    j->toks = malloc(tb);
    if (!j->prompt || !j->toks) {
        free(j->prompt);
        free(j->toks);
        free(j);
        return mu_fail(err, MU_E_NOMEM, "sched: out of memory for a request");
    }
    memcpy(j->prompt, r->prompt, pb);
    j->n_prompt = r->n_prompt;
    j->max_new = max_new;
    j->max_by_ctx = max_new == room && (r->n_predict < 0 || r->n_predict > room);
    j->sp = r->sp;
    j->logprobs = r->logprobs;
    j->n_top = r->n_top;
    j->ignore_eos = r->ignore_eos;
    j->schema = mu_jsonc_schema_ref(r->schema);
    j->schema_chat = r->schema_chat;
    j->refs = 2;
    j->st.slot = -1;
    j->st.n_prompt = r->n_prompt;
    atomic_init(&j->cancel, false);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->t_submit = now_ms();
    *out = j;
    return 0;
}

int mu_sched_submit_n(mu_sched *s, const mu_sched_req *r, int n, mu_job **out, mu_err *err) {
    if (n < 1 || n > 128) return mu_fail(err, MU_E_ARG, "sched: choices must be 1..128: %d", n);
    mu_job *jobs[128];
    group *g = NULL;
    if (n > 1) {
        g = calloc(1, sizeof *g);
        if (!g) return mu_fail(err, MU_E_NOMEM, "sched: out of memory");
        atomic_init(&g->refs, n);
        g->leader = -1;
    }
    for (int k = 0; k < n; k++) {
        mu_sched_req q = r[k];
        q.prompt = r[0].prompt;
        q.n_prompt = r[0].n_prompt;
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

int mu_sched_submit(mu_sched *s, const mu_sched_req *r, mu_job **out, mu_err *err) {
    return mu_sched_submit_n(s, r, 1, out, err);
}

int mu_job_next(mu_job *j, mu_sched_tok *out, int cap, int timeout_ms, int *finish) {
    pthread_mutex_lock(&j->mu);
    if (j->n_read == j->n_toks && !j->finish && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (j->n_read == j->n_toks && !j->finish)
            if (pthread_cond_timedwait(&j->cv, &j->mu, &ts)) break;
    }
    int n = j->n_toks - j->n_read;
    if (n > cap) n = cap;
    if (n > 0) memcpy(out, j->toks + j->n_read, (size_t)n * sizeof *out);
    j->n_read += n;
    *finish = j->n_read == j->n_toks ? j->finish : MU_FINISH_NONE;
    pthread_mutex_unlock(&j->mu);
    return n;
}

void mu_job_cancel(mu_job *j) { atomic_store(&j->cancel, true); }

void mu_job_get_stats(mu_job *j, mu_job_stats *st) {
    pthread_mutex_lock(&j->mu);
    *st = j->st;
    st->n_gen = j->n_toks;
    pthread_mutex_unlock(&j->mu);
}

void mu_job_free(mu_job *j) {
    if (!j) return;
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
}
