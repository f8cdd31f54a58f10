/* api_encode.c: image prompts made off the connection threads.
 * Owns: the server's encode thread and its queue, and the per-request
 * record of a handler's image prompts across its runs.
 * Does not own: reading images out of request bodies (api_media.c), the
 * encoder itself (mu_mprompt_new, src/engine/mprompt.c and src/vision).
 * Design: a handler that needs an image prompt (api_media_prompt) queues
 * the encode and waits without blocking (mu_http_reply_rerun); when the
 * encode is done the transport runs the handler again on the same body, and
 * its k-th call of api_media_prompt takes the k-th encode's result (a
 * handler asks for its image prompts in the same order on every run, as it
 * reads the same body). So a long encode holds no connection thread, and an
 * image that does not decode is still the handler's own precise reply. One
 * thread encodes, in arrival order (the projector runs its own threads); an
 * encode whose request is gone before it starts is skipped, and a wake is
 * never sent to a request that is gone (both under the queue's mutex). */
#include "api.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct api_enc {
    struct api_enc *next;      /* the queue */
    int refs;                  /* the request's record and the queue's; under the mutex */
    bool done, gone;           /* under the mutex */
    mu_http_req *r;            /* woken when done, unless gone */
    char *text;
    int n_img;
    mu_media md[API_MAX_IMAGES];
    mu_mprompt *mp;            /* the result, or NULL with rc and err */
    int rc;
    mu_err err;
} api_enc;

struct api_encoder {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    api_enc *head, *tail;
    bool stop, started;
    pthread_t th;
    mu_http_app *a;
};

/* a request's image prompts, in the order its handler asks for them */
typedef struct {
    api_encoder *q;
    int run, next;             /* the handler run seen last, its next call's index */
    int n, cap;
    api_enc **v;
} enc_record;

static void enc_input_free(api_enc *e) {
    for (int i = 0; i < e->n_img; i++) free((void *)e->md[i].data);
    e->n_img = 0;
    free(e->text);
    e->text = NULL;
}

/* under q->mu */
static void enc_unref(api_enc *e) {
    if (--e->refs) return;
    enc_input_free(e);
    mu_mprompt_free(e->mp);
    free(e);
}

/* Tests (tests/e2e/test_serve_images.sh): with $MUSER_TEST_ENCODE_HOLD
 * set to a path, each encode first creates PATH.held, then waits until PATH
 * exists (or the server stops), so a test can see what the server does
 * while an encode is under way without depending on how long one takes. */
static void test_hold(api_encoder *q) {
    const char *f = getenv("MUSER_TEST_ENCODE_HOLD");
    if (!f || !*f) return;
    char held[4200];
    snprintf(held, sizeof held, "%s.held", f);
    int fd = open(held, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) close(fd);
    for (;;) {
        pthread_mutex_lock(&q->mu);
        const bool stop = q->stop;
        pthread_mutex_unlock(&q->mu);
        if (stop || !access(f, F_OK)) break;
        usleep(20000);
    }
}

static void *enc_main(void *p) {
    api_encoder *q = p;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        api_enc *e = q->head;
        if (!e) break; /* stopping, nothing queued */
        q->head = e->next;
        if (!q->head) q->tail = NULL;
        const bool skip = e->gone || q->stop;
        pthread_mutex_unlock(&q->mu);
        if (skip) {
            e->rc = mu_fail(&e->err, MU_E_STATE, "server: shutting down");
        } else {
            test_hold(q);
            e->rc = mu_mprompt_new(mu_sched_engine(q->a->sched), q->a->mmproj, e->text, strlen(e->text), true, e->md,
                                   e->n_img, &e->mp, &e->err);
        }
        enc_input_free(e);
        pthread_mutex_lock(&q->mu);
        e->done = true;
        if (!e->gone) mu_http_req_wake(e->r);
        enc_unref(e);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

int api_encoder_start(mu_http_app *a, mu_err *err) {
    api_encoder *q = calloc(1, sizeof *q);
    if (!q) return mu_fail(err, MU_E_NOMEM, "server: out of memory");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->a = a;
    if (pthread_create(&q->th, NULL, enc_main, q)) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q);
        return mu_fail(err, MU_E_NOMEM, "server: cannot start the image encode thread");
    }
    a->encoder = q;
    return 0;
}

void api_encoder_stop(mu_http_app *a) {
    api_encoder *q = a->encoder;
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->th, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
    a->encoder = NULL;
}

static void record_release(void *p) {
    enc_record *c = p;
    pthread_mutex_lock(&c->q->mu);
    for (int i = 0; i < c->n; i++) {
        c->v[i]->gone = true;
        enc_unref(c->v[i]);
    }
    pthread_mutex_unlock(&c->q->mu);
    free(c->v);
    free(c);
}

static bool enc_poll(void *state, mu_http_req *r) {
    api_enc *e = state;
    enc_record *c = mu_http_req_carry(r);
    pthread_mutex_lock(&c->q->mu);
    bool done = e->done;
    pthread_mutex_unlock(&c->q->mu);
    return done;
}

static bool reply_oom(mu_http_req *r) {
    mu_http_reply_error(r, 503, "server: out of memory", NULL);
    return false;
}

int api_encode_take(mu_http_req *r, mu_http_app *a, const char *text, const api_images *im, mu_mprompt **mp) {
    api_encoder *q = a->encoder;
    enc_record *c = mu_http_req_carry(r);
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return reply_oom(r), -1;
        c->q = q;
        mu_http_req_set_carry(r, c, record_release);
    }
    const int run = mu_http_req_runs(r);
    if (c->run != run) c->run = run, c->next = 0;
    const int k = c->next++;
    if (k < c->n) { /* done in an earlier run (the handler reruns only once its last encode is done) */
        api_enc *e = c->v[k];
        if (e->rc) {
            mu_http_reply_status(r, e->rc, &e->err);
            return -1;
        }
        *mp = mu_mprompt_ref(e->mp);
        return 1;
    }
    if (c->n == c->cap) {
        int nc = c->cap ? c->cap * 2 : 4;
        api_enc **v = realloc(c->v, (size_t)nc * sizeof *v);
        if (!v) return reply_oom(r), -1;
        c->v = v;
        c->cap = nc;
    }
    api_enc *e = calloc(1, sizeof *e);
    if (!e || !(e->text = strdup(text))) {
        free(e);
        return reply_oom(r), -1;
    }
    for (int i = 0; i < im->n; i++) {
        void *d = malloc(im->v[i].size);
        if (!d) {
            enc_input_free(e);
            free(e);
            return reply_oom(r), -1;
        }
        memcpy(d, im->v[i].data, im->v[i].size);
        e->md[e->n_img++] = (mu_media){.data = d, .size = im->v[i].size};
    }
    e->refs = 2;
    e->r = r;
    c->v[c->n++] = e;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = e;
    else q->head = e;
    q->tail = e;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    mu_http_reply_rerun(r, enc_poll, NULL, e);
    return 0;
}
