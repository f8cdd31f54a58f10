/* test_gen.c: the generation pipeline (src/gen) against plain references:
 * the scheduler's greedy tokens and log-probabilities against a direct
 * mu_forward + argmax loop (mini model, no tokenizer); forced tokens,
 * length and context limits, cancellation, the hold hook, the slots' replay
 * record for the prefill lane's deltas (mu_sched_slot_hold); and, on the
 * bundled model (it has a tokenizer), text events, stop strings cut and
 * held back at every position, and KV prefix reuse. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../include/muser_gen.h"
#include "../../src/gen/gen.h"
#include "mini_model.h"

static char dir[] = "/tmp/mutest_gen_XXXXXX";
static mu_model *M, *D;  /* mini model; the bundled model (NULL when absent) */
static mu_engine *E, *ED;
static int V;

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(dir)) return -1;
    mini_cfg c = mini_default();
    c.n_ctx = 1024;
    if (mini_open(dir, &c, 2, &M, &E)) return -1;
    V = mu_model_get_info(M)->n_vocab;
    mu_err err;
    mu_engine_opts o = {.n_threads = 2};
    if (mu_model_open("models/muser-default.gguf", &D, &err) == 0 && mu_engine_new(D, &o, &ED, &err)) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mu_engine_free(ED);
    mu_model_close(D);
    mu_engine_free(E);
    mu_model_close(M);
    rmdir(dir);
    return 0;
}

static void prompt(int32_t *ids, int n, int seed) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + seed * 11 + 3) % 70);
}

/* What one job produced. */
typedef struct {
    int32_t ids[600];
    float logprob[600];
    int n;
    char text[8192], reasoning[256];
    size_t n_text;
    int n_text_events;
    mu_finish finish;
    char stop_word[64];
    mu_gen_stats st;
} result;

static void read_job(mu_job *j, result *r) {
    memset(r, 0, sizeof *r);
    mu_gen_event ev;
    int got;
    while ((got = mu_job_next(j, &ev, -1)) == 1) {
        if (ev.kind == MU_EV_TOKEN) {
            assert_true(r->n < 600);
            r->logprob[r->n] = ev.tok.logprob;
            r->ids[r->n++] = ev.tok.id;
        } else if (ev.kind == MU_EV_TEXT && ev.channel == MU_CH_CONTENT) {
            assert_true(r->n_text + ev.len < sizeof r->text);
            memcpy(r->text + r->n_text, ev.text, ev.len);
            r->n_text += ev.len;
            r->n_text_events++;
        } else if (ev.kind == MU_EV_FINISH) {
            r->finish = ev.finish;
            r->st = ev.stats;
            if (ev.stop_word) snprintf(r->stop_word, sizeof r->stop_word, "%s", ev.stop_word);
            break;
        }
    }
    assert_int_equal(got, 1);
    assert_int_equal(mu_job_next(j, &ev, 0), 0); /* nothing after FINISH */
}

static void run_job(mu_sched *s, const mu_gen_req *q, result *r) {
    mu_job *j;
    mu_err err = {0};
    if (mu_sched_submit(s, q, 1, &j, &err)) fail_msg("submit: %s", err.msg);
    read_job(j, r);
    mu_job_free(j);
}

/* Chat logprobs cover the answer's tokens only: forced output with a
 * reasoning message, headers and an answer; the CONTENT_TOKEN events name
 * exactly the tokens whose pieces join to the answer text, each before the
 * TEXT event holding its first byte; with a stop string, none past the cut. */
static void test_content_tokens(void **state) {
    (void)state;
    if (!D) skip();
    mu_err err = {0};
    const mu_tok *tk = mu_model_tokenizer(D);
    const char *out = " to=self<|message|>Let me think.<|eom|><|start|>assistant to=user<|message|>Hello there, "
                      "world!<|eot|>";
    int32_t *f, *p;
    int nf, np;
    assert_int_equal(mu_tok_encode(tk, out, strlen(out), true, &f, &nf, &err), 0);
    const char *pr = "Hi";
    assert_int_equal(mu_tokenize(D, pr, strlen(pr), true, false, &p, &np, &err), 0);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 256};
    assert_int_equal(mu_sched_new(ED, &so, &s, &err), 0);
    for (int with_stop = 0; with_stop < 2; with_stop++) {
        const char *stops[1] = {"world"};
        mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = nf, .sp = {.temp = 0}, .forced = f, .n_forced = nf,
                        .chat = true, .logprobs = true, .stops = stops, .n_stops = with_stop};
        mu_job *j;
        assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
        mu_gen_event ev;
        char text[256] = "", joined[256] = "";
        size_t nt = 0, nj = 0, pending = 0;
        int n_tok = 0, n_ct = 0;
        while (mu_job_next(j, &ev, -1) == 1 && ev.kind != MU_EV_FINISH) {
            if (ev.kind == MU_EV_TOKEN) n_tok++;
            if (ev.kind == MU_EV_CONTENT_TOKEN) {
                assert_true(ev.tok_index >= 0 && ev.tok_index < n_tok);
                int k = mu_tok_piece(tk, f[ev.tok_index], false, joined + nj, sizeof joined - nj - 1);
                assert_true(k > 0);
                pending = nj; /* this token's first byte must be in the next TEXT */
                nj += (size_t)k;
                n_ct++;
            }
            if (ev.kind == MU_EV_TEXT && ev.channel == MU_CH_CONTENT) {
                assert_true(pending >= nt && pending < nt + ev.len);
                memcpy(text + nt, ev.text, ev.len);
                nt += ev.len;
            }
        }
        mu_job_free(j);
        const char *want = with_stop ? "Hello there, " : "Hello there, world!";
        assert_int_equal(nt, strlen(want));
        assert_memory_equal(text, want, nt);
        /* the answer's tokens, joined: the answer (with the stop, the token
         * holding the cut may run past it) */
        assert_true(n_ct > 0);
        assert_true(nj >= nt);
        assert_memory_equal(joined, want, nt);
        if (!with_stop) assert_int_equal(nj, nt);
    }
    mu_sched_free(s);
    free(f);
    free(p);
}

/* A forced call (call_one_of): the output starts with " to=NAME<|message|>"
 * for a listed NAME and the call block opened for it, greedy or sampled,
 * for one name or several (with names that share a prefix). */
static void test_forced_call(void **state) {
    (void)state;
    if (!D) skip();
    mu_err err = {0};
    const mu_tok *tk = mu_model_tokenizer(D);
    int32_t *p;
    int np;
    const char *pr = "What is the weather in Paris?";
    assert_int_equal(mu_tokenize(D, pr, strlen(pr), true, false, &p, &np, &err), 0);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 256};
    assert_int_equal(mu_sched_new(ED, &so, &s, &err), 0);
    const char *one[] = {"get_weather"};
    const char *many[] = {"get_time", "get_timezone", "get_weather", "search"};
    for (int c = 0; c < 4; c++) {
        mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 40, .sp = mu_sample_defaults(), .chat = true,
                        .call_one_of = c < 2 ? one : many, .n_call_one_of = c < 2 ? 1 : 4};
        q.sp.seed = (uint64_t)c;
        if (c % 2 == 0) q.sp.temp = 0;
        result r;
        run_job(s, &q, &r);
        char out[4096];
        size_t n = 0;
        for (int i = 0; i < r.n; i++) {
            int k = mu_tok_piece(tk, r.ids[i], true, out + n, sizeof out - n - 1);
            assert_true(k >= 0);
            n += (size_t)k;
        }
        out[n] = 0;
        bool found = false;
        for (int i = 0; i < q.n_call_one_of && !found; i++) {
            char want[200];
            snprintf(want, sizeof want, " to=%s<|message|><atem:function_calls><atem:invoke name=\"%s\">",
                     q.call_one_of[i], q.call_one_of[i]);
            found = !strncmp(out, want, strlen(want));
        }
        if (!found) fail_msg("forced call %d: output starts '%.80s'", c, out);
    }
    mu_gen_req bad = {.prompt = p, .n_prompt = np, .n_predict = 4, .call_one_of = one, .n_call_one_of = 1};
    mu_job *j;
    assert_int_equal(mu_sched_submit(s, &bad, 1, &j, &err), MU_E_ARG); /* not a chat job */
    mu_sched_free(s);
    free(p);
}

/* An embedding job's result (one job, waited for). */
static int embd_job(mu_sched *s, const int32_t *p, int n, mu_embd_pooling pool, int norm, float *out, int cap,
                    int *rows, mu_err *err) {
    mu_gen_req q = {.prompt = p, .n_prompt = n, .n_predict = 1, .sp = {.temp = 0}, .no_text = true, .embd = pool,
                    .embd_normalize = norm};
    mu_job *j;
    int rc = mu_sched_submit(s, &q, 1, &j, err);
    if (rc) return rc;
    mu_gen_event ev;
    int n_tok = 0;
    while (mu_job_next(j, &ev, -1) == 1 && ev.kind != MU_EV_FINISH) n_tok += ev.kind == MU_EV_TOKEN;
    assert_int_equal(ev.kind, MU_EV_FINISH);
    assert_int_equal(ev.finish, MU_FINISH_STOP);
    assert_int_equal(n_tok, 0);
    assert_int_equal(ev.stats.n_prompt, n);
    int dim = 0;
    const float *e = mu_job_embedding(j, rows, &dim);
    assert_non_null(e);
    assert_int_equal(dim, mu_model_get_info(M)->n_embd);
    assert_true(*rows * dim <= cap);
    memcpy(out, e, (size_t)*rows * dim * sizeof(float));
    mu_job_free(j);
    return 0;
}

/* Embedding jobs: the pooling types against the per-token rows, llama.cpp's
 * normalizations, the one-batch rule and its LAST exception, one choice. */
static void test_embedding_jobs(void **state) {
    (void)state;
    mu_err err = {0};
    const int W = mu_model_get_info(M)->n_embd;
    static int32_t p[40];
    prompt(p, 40, 9);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 2, .n_ctx = 64, .queue_max = 4, .prefill_chunk = 16};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    float *rows = calloc((size_t)16 * W, sizeof(float)), *v = calloc((size_t)16 * W, sizeof(float));
    assert_non_null(rows);
    assert_non_null(v);
    int n = 0;
    assert_int_equal(embd_job(s, p, 12, MU_EMBD_NONE, 2, rows, 16 * W, &n, &err), 0);
    assert_int_equal(n, 12); /* per token, never normalized */
    assert_int_equal(embd_job(s, p, 12, MU_EMBD_LAST, -1, v, 16 * W, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_memory_equal(v, rows + (size_t)11 * W, (size_t)W * sizeof(float));
    assert_int_equal(embd_job(s, p, 12, MU_EMBD_CLS, -1, v, 16 * W, &n, &err), 0);
    assert_memory_equal(v, rows, (size_t)W * sizeof(float));
    assert_int_equal(embd_job(s, p, 12, MU_EMBD_MEAN, -1, v, 16 * W, &n, &err), 0);
    for (int i = 0; i < W; i++) {
        double m = 0;
        for (int t = 0; t < 12; t++) m += rows[(size_t)t * W + i];
        assert_true(fabs(v[i] - m / 12) <= 1e-5 * (1 + fabs(m / 12)));
    }
    /* L2 (2), max-abs in the int16 range (0), p-norm (3) */
    assert_int_equal(embd_job(s, p, 12, MU_EMBD_LAST, 2, v, 16 * W, &n, &err), 0);
    double l2 = 0;
    for (int i = 0; i < W; i++) l2 += (double)v[i] * v[i];
    assert_true(fabs(l2 - 1) < 1e-5);
    assert_int_equal(embd_job(s, p, 12, MU_EMBD_LAST, 0, v, 16 * W, &n, &err), 0);
    double mx = 0;
    for (int i = 0; i < W; i++) mx = fmax(mx, fabs(v[i]));
    assert_true(fabs(mx - 32760) < 1e-2);
    assert_int_equal(embd_job(s, p, 12, MU_EMBD_LAST, 3, v, 16 * W, &n, &err), 0);
    double p3 = 0;
    for (int i = 0; i < W; i++) p3 += pow(fabs(v[i]), 3);
    assert_true(fabs(p3 - 1) < 1e-4);
    /* pooling over more than one step's tokens is refused, except LAST,
     * whose last row comes from the final chunk (chunking changes the bits:
     * compared with a tolerance against a whole evaluation) */
    assert_int_equal(embd_job(s, p, 17, MU_EMBD_MEAN, 2, v, 16 * W, &n, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "too large"));
    assert_int_equal(embd_job(s, p, 40, MU_EMBD_LAST, -1, v, 16 * W, &n, &err), 0);
    mu_sched *s2;
    mu_sched_opts so2 = {.n_slots = 1, .n_ctx = 64};
    assert_int_equal(mu_sched_new(E, &so2, &s2, &err), 0);
    float *all = calloc((size_t)40 * W, sizeof(float));
    assert_non_null(all);
    assert_int_equal(embd_job(s2, p, 40, MU_EMBD_NONE, -1, all, 40 * W, &n, &err), 0);
    assert_int_equal(n, 40);
    double md = 0, mv = 1e-9;
    for (int i = 0; i < W; i++) {
        md = fmax(md, fabs((double)v[i] - all[(size_t)39 * W + i]));
        mv = fmax(mv, fabs((double)v[i]));
    }
    assert_true(md / mv < 1e-4);
    free(all);
    mu_sched_free(s2);
    /* one choice only */
    mu_gen_req q[2] = {{.prompt = p, .n_prompt = 4, .embd = MU_EMBD_LAST}, {.prompt = p, .n_prompt = 4, .embd = MU_EMBD_LAST}};
    mu_job *js[2];
    assert_int_equal(mu_sched_submit(s, q, 2, js, &err), MU_E_ARG);
    mu_sched_free(s);
    free(rows);
    free(v);
}

/* The scheduler's greedy tokens and log-probabilities equal a direct loop
 * over mu_forward with argmax and mu_token_probs, prompt chunks included. */
static void test_greedy_matches_plain_loop(void **state) {
    (void)state;
    mu_err err = {0};
    static int32_t p[600];
    const int lens[] = {1, 9, 530};
    for (int li = 0; li < 3; li++) {
        int np = lens[li], ng = 12;
        prompt(p, np, li);
        mu_sched *s;
        mu_sched_opts so = {.n_slots = 1, .n_ctx = np + ng};
        assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
        mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = ng, .sp = {.temp = 0}, .ignore_eos = true,
                        .no_text = true, .logprobs = true};
        result r;
        run_job(s, &q, &r);
        mu_sched_free(s);
        assert_int_equal(r.finish, MU_FINISH_LENGTH);
        assert_int_equal(r.n, ng);
        assert_int_equal(r.st.n_prompt, np);
        /* the reference */
        mu_session *ss;
        assert_int_equal(mu_session_new(E, np + ng, &ss, &err), 0);
        mu_batch_item it = {.s = ss, .tokens = p, .n_tokens = np};
        int32_t tok;
        for (int k = 0; k < ng; k++) {
            assert_int_equal(mu_forward(E, &it, 1, &err), 0);
            const float *lg = mu_session_logits(ss, -1);
            tok = 0;
            for (int v = 1; v < V; v++)
                if (lg[v] > lg[tok]) tok = v;
            float lp;
            mu_token_probs(lg, V, tok, 0, &lp, NULL, NULL, NULL);
            assert_int_equal(r.ids[k], tok);
            assert_memory_equal(&r.logprob[k], &lp, sizeof lp);
            it.tokens = &tok;
            it.n_tokens = 1;
        }
        mu_session_free(ss);
    }
}

/* Forced tokens come first; the context cap ends with MU_FINISH_CTX. */
static void test_forced_and_limits(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t p[8];
    prompt(p, 8, 3);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 20};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    const int32_t forced[3] = {11, 12, 13};
    mu_gen_req q = {.prompt = p, .n_prompt = 8, .n_predict = 5, .sp = {.temp = 0}, .ignore_eos = true,
                    .no_text = true, .forced = forced, .n_forced = 3};
    result r;
    run_job(s, &q, &r);
    assert_int_equal(r.n, 5);
    assert_int_equal(r.ids[0], 11);
    assert_int_equal(r.ids[1], 12);
    assert_int_equal(r.ids[2], 13);
    assert_int_equal(r.finish, MU_FINISH_LENGTH);
    q.n_predict = -1; /* until the context is full: 20 - 8 */
    q.n_forced = 0;
    run_job(s, &q, &r);
    assert_int_equal(r.n, 12);
    assert_int_equal(r.finish, MU_FINISH_CTX);
    /* bad requests fail at submit */
    mu_job *j;
    q.n_prompt = 20;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), MU_E_ARG);
    q.n_prompt = 8;
    int32_t bad = V;
    q.forced = &bad;
    q.n_forced = 1;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), MU_E_ARG);
    mu_sched_free(s);
}

/* progress: a 20-token prompt in chunks of 8 gives one PROGRESS event when
 * its evaluation starts (0 done) and one per chunk (8, 16, 20), all before
 * the first token, with the prompt's length and a time that never goes
 * back; without progress, none. */
static void test_progress_events(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t p[20];
    prompt(p, 20, 5);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 40, .prefill_chunk = 8};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    for (int want = 0; want < 2; want++) {
        mu_gen_req q = {.prompt = p, .n_prompt = 20, .n_predict = 2, .sp = {.temp = 0}, .ignore_eos = true,
                        .no_text = true, .progress = want};
        mu_job *j;
        assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
        int done[8], n_prog = 0, n_tok = 0;
        double last_ms = 0;
        mu_gen_event ev;
        while (mu_job_next(j, &ev, -1) == 1 && ev.kind != MU_EV_FINISH) {
            if (ev.kind == MU_EV_TOKEN) n_tok++;
            if (ev.kind != MU_EV_PROGRESS) continue;
            assert_int_equal(n_tok, 0);
            assert_true(n_prog < 8);
            assert_int_equal(ev.stats.n_prompt, 20);
            assert_int_equal(ev.stats.n_reused, 0);
            assert_true(ev.stats.prompt_ms >= last_ms);
            last_ms = ev.stats.prompt_ms;
            done[n_prog++] = ev.n_done + ev.stats.n_reused;
        }
        assert_int_equal(n_tok, 2);
        if (!want) {
            assert_int_equal(n_prog, 0);
        } else {
            assert_int_equal(n_prog, 4);
            assert_int_equal(done[0], 0);
            assert_int_equal(done[1], 8);
            assert_int_equal(done[2], 16);
            assert_int_equal(done[3], 20);
        }
        mu_job_free(j);
    }
    mu_sched_free(s);
}

/* The prefill lane's delta on a live slot (mu_sched_slot_hold): after a
 * job, the slot's record is its prompt's chunks, each alone in its forward,
 * and its decode steps as one solo run; a hold ends at a whole chunk or
 * anywhere in the solo run, and reserves the slot (a second hold finds
 * none) until unhold; a prompt the slot does not start with holds nothing. */
static void test_slot_hold(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t p[20], gen[4], x[40];
    prompt(p, 20, 5);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 64, .prefill_chunk = 8};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_gen_req q = {.prompt = p, .n_prompt = 20, .n_predict = 4, .sp = {.temp = 0}, .ignore_eos = true, .no_text = true};
    mu_job *j;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
    mu_gen_event ev;
    int n_tok = 0;
    while (mu_job_next(j, &ev, -1) == 1 && ev.kind != MU_EV_FINISH)
        if (ev.kind == MU_EV_TOKEN && n_tok < 4) gen[n_tok++] = ev.tok.id;
    assert_int_equal(n_tok, 4);
    mu_job_free(j);
    /* the slot holds the prompt and the fed tokens (all but the last) */
    memcpy(x, p, sizeof p);
    memcpy(x + 20, gen, 3 * sizeof *gen);
    for (int i = 23; i < 40; i++) x[i] = (i * 7) % 70;
    mu_slot_hold h, h2;
    assert_int_equal(mu_sched_slot_hold(s, x, 30, &h), 23);
    assert_int_equal(h.slot, 0);
    assert_true(h.ticket != 0);
    const uint32_t want[4] = {8, 8, 4, 3 | MU_RUN_SOLO};
    assert_int_equal(h.n_runs, 4);
    assert_memory_equal(h.runs, want, sizeof want);
    assert_int_equal(mu_sched_slot_hold(s, x, 30, &h2), 0); /* reserved */
    assert_int_equal(h2.slot, -1);
    mu_sched_slot_unhold(s, &h);
    assert_int_equal(h.ticket, 0);
    x[22] = (gen[2] + 1) % 70; /* inside the solo run */
    assert_int_equal(mu_sched_slot_hold(s, x, 30, &h), 22);
    assert_int_equal(h.n_runs, 4);
    assert_int_equal(h.runs[3], 2 | MU_RUN_SOLO);
    mu_sched_slot_unhold(s, &h);
    x[13] = (p[13] + 1) % 70; /* inside the second chunk: its rows are the chunk's, not a forward of 5 */
    assert_int_equal(mu_sched_slot_hold(s, x, 30, &h), 8);
    assert_int_equal(h.n_runs, 1);
    assert_int_equal(h.runs[0], 8);
    mu_sched_slot_unhold(s, &h);
    assert_int_equal(mu_sched_slot_hold(s, x, 5, &h), 0); /* less than a chunk asked */
    x[0] = (p[0] + 1) % 70;
    assert_int_equal(mu_sched_slot_hold(s, x, 30, &h), 0);
    mu_sched_slot_unhold(s, &h);
    mu_sched_free(s);
}

/* Telemetry: time to first token (count, sum, histogram), the log of
 * finished jobs (newest first, TTFT = queue + prefill), and the slots' KV
 * bytes as the session reports them. */
static void test_telemetry(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t p[8];
    prompt(p, 8, 3);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 20, .queue_max = 2};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_sched_metrics m;
    mu_sched_job_record rec[MU_SCHED_RECENT];
    mu_sched_get_metrics(s, &m);
    assert_int_equal((int)m.n_ttft, 0);
    assert_int_equal(mu_sched_recent(s, rec, MU_SCHED_RECENT), 0);
    mu_gen_req q = {.prompt = p, .n_prompt = 8, .n_predict = 5, .sp = {.temp = 0}, .ignore_eos = true, .no_text = true};
    result r;
    run_job(s, &q, &r);
    q.n_predict = 3;
    run_job(s, &q, &r);
    mu_sched_get_metrics(s, &m);
    assert_int_equal((int)m.n_ttft, 2);
    uint64_t in_hist = 0;
    for (int k = 0; k < MU_SCHED_TTFT_BUCKETS; k++) in_hist += m.ttft_hist[k];
    assert_int_equal((int)in_hist, 2);
    const double *le = mu_sched_ttft_bounds();
    for (int k = 1; k < MU_SCHED_TTFT_BUCKETS; k++) assert_true(le[k] > le[k - 1]);
    assert_true(isinf(le[MU_SCHED_TTFT_BUCKETS - 1]));
    assert_int_equal(mu_sched_recent(s, rec, MU_SCHED_RECENT), 2);
    assert_int_equal((int)rec[0].seq, 2);
    assert_int_equal((int)rec[1].seq, 1);
    assert_int_equal(rec[0].n_gen, 3);
    assert_int_equal(rec[1].n_gen, 5);
    assert_int_equal(rec[1].n_prompt, 8);
    assert_int_equal(rec[1].finish, MU_FINISH_LENGTH);
    assert_int_equal(rec[1].slot, 0);
    double sum = 0;
    for (int i = 0; i < 2; i++) {
        assert_true(rec[i].ttft_ms >= 0);
        assert_true(fabs(rec[i].ttft_ms - (rec[i].queue_ms + rec[i].prompt_ms)) < 1e-6);
        sum += rec[i].ttft_ms / 1e3;
    }
    assert_true(fabs(m.ttft_s_sum - sum) < 1e-9);
    assert_true(m.ttft_s_last == rec[0].ttft_ms / 1e3);
    assert_int_equal(mu_sched_recent(s, rec, 1), 1);
    assert_int_equal((int)rec[0].seq, 2);
    /* the slot's KV: the session's bytes at its n_past (8 prompt + 2 fed) */
    mu_sched_slot_info si;
    mu_sched_get_slot(s, 0, &si);
    assert_int_equal(si.n_past, 10);
    mu_session *ss;
    assert_int_equal(mu_session_new(E, 20, &ss, &err), 0);
    uint64_t res, used, res0, used0, resf, usedf;
    mu_session_kv_bytes(ss, si.n_past, &res, &used);
    mu_session_kv_bytes(ss, 0, &res0, &used0);
    mu_session_kv_bytes(ss, 1 << 20, &resf, &usedf);
    mu_session_free(ss);
    assert_true(res > 0 && used > 0 && used < res);
    assert_true(si.kv_reserved_bytes == res && si.kv_used_bytes == used);
    assert_true(used0 == 0 && res0 == res && usedf == res);
    /* a job cancelled in the queue: logged without a first token */
    so.hold_until = 2;
    mu_sched_free(s);
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_job *j;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
    mu_job_cancel(j);
    read_job(j, &r);
    mu_job_free(j);
    assert_int_equal(mu_sched_recent(s, rec, MU_SCHED_RECENT), 1);
    assert_true(rec[0].ttft_ms < 0);
    assert_int_equal(rec[0].slot, -1);
    assert_int_equal(rec[0].finish, MU_FINISH_CANCEL);
    mu_sched_get_metrics(s, &m);
    assert_int_equal((int)m.n_ttft, 0);
    mu_sched_free(s);
}

/* Reads a job's events: the PROGRESS ones into done[] (n_done, n_total
 * pairs), and whether any came after the first TOKEN. */
static int read_progress(mu_job *j, int (*done)[2], int cap, bool *late) {
    mu_gen_event ev;
    int n = 0;
    bool tok = false;
    *late = false;
    while (mu_job_next(j, &ev, -1) == 1) {
        if (ev.kind == MU_EV_PROGRESS) {
            assert_true(n < cap);
            done[n][0] = ev.n_done;
            done[n][1] = ev.n_total;
            n++;
            *late |= tok;
        }
        tok |= ev.kind == MU_EV_TOKEN;
        if (ev.kind == MU_EV_FINISH) break;
    }
    return n;
}

/* Prefill progress: with progress on, one event when the job gets its slot
 * (0 done) and one after each prompt chunk, all before the first token; the
 * total leaves out the tokens a kept prefix saved; with it off, none. */
static void test_progress(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t p[30];
    prompt(p, 30, 4);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 64, .prefill_chunk = 8};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_gen_req q = {.prompt = p, .n_prompt = 30, .n_predict = 2, .sp = {.temp = 0}, .ignore_eos = true,
                    .no_text = true, .progress = true, .keep_prefix = true};
    mu_job *j;
    int d[16][2];
    bool late;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
    assert_int_equal(read_progress(j, d, 16, &late), 5);
    mu_job_free(j);
    static const int want[5] = {0, 8, 16, 24, 30};
    for (int k = 0; k < 5; k++) {
        assert_int_equal(d[k][0], want[k]);
        assert_int_equal(d[k][1], 30);
    }
    assert_false(late);
    /* the same prompt again: 29 tokens kept (the last is fed again), 1 to evaluate */
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
    assert_int_equal(read_progress(j, d, 16, &late), 2);
    mu_job_free(j);
    assert_true(d[0][0] == 0 && d[0][1] == 1 && d[1][0] == 1 && d[1][1] == 1);
    q.progress = false;
    q.keep_prefix = false;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
    assert_int_equal(read_progress(j, d, 16, &late), 0);
    mu_job_free(j);
    mu_sched_free(s);
}

/* hold_until: no job starts until two are queued, so both share every
 * forward pass; a job cancelled before it starts ends with CANCEL. */
static void test_hold_and_cancel(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t pa[5], pb[30];
    prompt(pa, 5, 1);
    prompt(pb, 30, 2);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 2, .n_ctx = 64, .queue_max = 4, .hold_until = 2};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_gen_req qa = {.prompt = pa, .n_prompt = 5, .n_predict = 10, .sp = {.temp = 0}, .ignore_eos = true, .no_text = true};
    mu_gen_req qb = qa;
    qb.prompt = pb;
    qb.n_prompt = 30;
    mu_job *ja, *jb;
    assert_int_equal(mu_sched_submit(s, &qa, 1, &ja, &err), 0);
    mu_gen_event ev;
    assert_int_equal(mu_job_next(ja, &ev, 50), 0); /* held: nothing happens */
    assert_int_equal(mu_sched_submit(s, &qb, 1, &jb, &err), 0);
    result ra, rb;
    read_job(ja, &ra);
    read_job(jb, &rb);
    mu_sched_metrics m;
    mu_sched_get_metrics(s, &m);
    assert_int_equal(ra.n, 10);
    assert_int_equal(rb.n, 10);
    assert_int_equal((int)m.n_forward, 10); /* both prompts in the first pass, then 9 shared decode passes */
    /* the throughput's counts are the finished jobs' tokens, added with their seconds */
    assert_int_equal((int)m.n_gen_timed, 20);
    assert_int_equal((int)m.n_prompt_timed, 35);
    assert_int_equal((int)m.n_gen_tokens, 20);
    mu_job_free(ja);
    mu_job_free(jb);
    mu_sched_free(s);

    /* a job cancelled while it waits in the queue ends at once (the hold
     * keeps it there) and leaves its place */
    so.n_slots = 1;
    so.hold_until = 2;
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    assert_int_equal(mu_sched_submit(s, &qa, 1, &ja, &err), 0);
    mu_job_cancel(ja);
    read_job(ja, &ra);
    assert_int_equal(ra.finish, MU_FINISH_CANCEL);
    assert_int_equal(ra.n, 0);
    mu_sched_get_metrics(s, &m);
    assert_int_equal(m.n_queued, 0);
    assert_int_equal((int)m.n_cancelled, 1);
    mu_job *jc;
    assert_int_equal(mu_sched_submit(s, &qa, 1, &jb, &err), 0);
    assert_int_equal(mu_sched_submit(s, &qb, 1, &jc, &err), 0);
    read_job(jb, &ra);
    read_job(jc, &rb);
    assert_int_equal(ra.finish, MU_FINISH_LENGTH);
    assert_int_equal(rb.finish, MU_FINISH_LENGTH);
    mu_job_free(ja);
    mu_job_free(jb);
    mu_job_free(jc);
    mu_sched_free(s);
}

/* llama.cpp's id_slot: a pinned job runs in its slot; while that slot is
 * busy it waits and an unpinned job behind it runs in the other slot; a
 * slot the scheduler does not have is refused. The first job stalls after
 * one token (the stall hook) until it is cancelled, so the order is decided
 * by the events, not by timing. With n choices only the first is pinned. */
static void test_pinned_slot(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t pa[5];
    prompt(pa, 5, 4);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 2, .n_ctx = 64, .queue_max = 4, .stall_after = 1};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_gen_req q = {.prompt = pa, .n_prompt = 5, .n_predict = 1, .sp = {.temp = 0}, .ignore_eos = true,
                    .no_text = true, .pin_slot = true, .id_slot = 1};
    mu_job *ja, *jb, *jc;
    mu_gen_req qa = q;
    qa.n_predict = 10; /* stalls after its first token, in slot 1 */
    assert_int_equal(mu_sched_submit(s, &qa, 1, &ja, &err), 0);
    mu_gen_event ev;
    assert_int_equal(mu_job_next(ja, &ev, -1), 1);
    assert_int_equal(ev.kind, MU_EV_TOKEN);
    assert_int_equal(mu_sched_submit(s, &q, 1, &jb, &err), 0); /* pinned to busy slot 1: waits */
    mu_gen_req qc = q;
    qc.pin_slot = false;
    assert_int_equal(mu_sched_submit(s, &qc, 1, &jc, &err), 0); /* passes it, runs in slot 0 */
    result rc, rb, ra;
    read_job(jc, &rc);
    assert_int_equal(rc.st.slot, 0);
    mu_sched_metrics m;
    mu_sched_get_metrics(s, &m);
    assert_int_equal(m.n_queued, 1); /* the pinned job still waits */
    mu_job_cancel(ja);
    read_job(ja, &ra);
    read_job(jb, &rb);
    assert_int_equal(rb.st.slot, 1);
    assert_int_equal(rb.finish, MU_FINISH_LENGTH);
    mu_gen_req qd = q;
    qd.id_slot = 2;
    mu_job *jd = NULL;
    assert_int_equal(mu_sched_submit(s, &qd, 1, &jd, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "no slot 2"));
    /* n choices pinned to slot 1: the first runs there, the other in slot 0
     * (llama.cpp's child tasks take no id_slot) */
    mu_gen_req qn[2] = {q, q};
    mu_job *jn[2];
    assert_int_equal(mu_sched_submit(s, qn, 2, jn, &err), 0);
    result rn0, rn1;
    read_job(jn[0], &rn0);
    read_job(jn[1], &rn1);
    assert_int_equal(rn0.st.slot, 1);
    assert_int_equal(rn1.st.slot, 0);
    assert_int_equal(rn0.finish, MU_FINISH_LENGTH);
    assert_int_equal(rn1.finish, MU_FINISH_LENGTH);
    assert_int_equal(rn0.ids[0], rn1.ids[0]); /* greedy: the same token */
    mu_job_free(jn[0]);
    mu_job_free(jn[1]);
    mu_job_free(ja);
    mu_job_free(jb);
    mu_job_free(jc);
    mu_sched_free(s);
}

/* install_free (the prefill lane's verified rows): called exactly once when
 * the job is freed, whether the install ran, the job was cancelled in the
 * queue before it, or the scheduler refused the submit as busy (then never:
 * the caller still owns the rows). */
typedef struct {
    int installs, frees;
    int32_t prompt[20];
} inst;

static int inst_install(void *user, mu_session *s, mu_err *err) {
    inst *in = user;
    in->installs++;
    mu_batch_item it = {.s = s, .tokens = in->prompt, .n_tokens = 8};
    return mu_forward(E, &it, 1, err) /* the session is a slot of E */;
}

static void inst_free(void *user) { ((inst *)user)->frees++; }

static void test_install_free(void **state) {
    (void)state;
    mu_err err = {0};
    inst a = {0}, b = {0}, c = {0};
    prompt(a.prompt, 20, 3);
    memcpy(b.prompt, a.prompt, sizeof a.prompt);
    memcpy(c.prompt, a.prompt, sizeof a.prompt);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 64, .queue_max = 0, .hold_until = 2};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_gen_req q = {.prompt = a.prompt, .n_prompt = 20, .n_predict = 3, .sp = {.temp = 0}, .ignore_eos = true,
                    .no_text = true, .install = inst_install, .install_user = &a, .install_free = inst_free,
                    .n_installed = 8};
    mu_job *ja, *jb, *jc;
    assert_int_equal(mu_sched_submit(s, &q, 1, &ja, &err), 0); /* held in the queue */
    q.install_user = &c;
    assert_int_equal(mu_sched_submit(s, &q, 1, &jc, &err), MU_E_STATE); /* busy: the caller keeps c */
    assert_int_equal(c.frees, 0);
    mu_job_cancel(ja);
    result r;
    read_job(ja, &r);
    assert_int_equal(r.finish, MU_FINISH_CANCEL);
    mu_job_free(ja);
    assert_int_equal(a.installs, 0);
    assert_int_equal(a.frees, 1);
    mu_sched_free(s);
    so.hold_until = 0;
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    q.install_user = &b;
    assert_int_equal(mu_sched_submit(s, &q, 1, &jb, &err), 0);
    read_job(jb, &r);
    assert_int_equal(r.finish, MU_FINISH_LENGTH);
    assert_int_equal(b.installs, 1);
    mu_job_free(jb);
    mu_sched_free(s);
    assert_int_equal(b.frees, 1);
    assert_int_equal(a.frees, 1);
}

/* mu_job_set_notify: one call per event queued after it is set, each after
 * the event is readable; a queued job's cancel notifies on the cancelling
 * thread; after mu_job_set_notify(NULL) returns no call runs. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    pthread_t last;
} notes;

static void on_note(void *user) {
    notes *n = user;
    pthread_mutex_lock(&n->mu);
    n->calls++;
    n->last = pthread_self();
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

/* Waits until n has at least k calls (600 s: a hang detector only). */
static int wait_calls(notes *n, int k) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 600;
    pthread_mutex_lock(&n->mu);
    while (n->calls < k && !pthread_cond_timedwait(&n->cv, &n->mu, &ts)) {
    }
    int c = n->calls;
    pthread_mutex_unlock(&n->mu);
    return c;
}

static void test_notify(void **state) {
    (void)state;
    mu_err err = {0};
    int32_t pa[5];
    prompt(pa, 5, 1);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 2, .n_ctx = 64, .queue_max = 4, .hold_until = 2};
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    mu_gen_req qa = {.prompt = pa, .n_prompt = 5, .n_predict = 7, .sp = {.temp = 0}, .ignore_eos = true, .no_text = true};
    notes na = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    notes nb = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    mu_job *ja, *jb;
    assert_int_equal(mu_sched_submit(s, &qa, 1, &ja, &err), 0);
    mu_job_set_notify(ja, on_note, &na); /* held: no event yet */
    assert_int_equal(mu_sched_submit(s, &qa, 1, &jb, &err), 0);
    int n_ev = 0, n_tok = 0;
    mu_gen_event ev;
    for (;;) {
        assert_int_equal(mu_job_next(ja, &ev, -1), 1);
        n_ev++;
        n_tok += ev.kind == MU_EV_TOKEN;
        if (ev.kind == MU_EV_FINISH) break;
    }
    assert_int_equal(n_tok, 7);
    /* the engine thread notifies after an event is readable: the last call
     * may come after the reader took the event */
    assert_int_equal(wait_calls(&na, n_ev), n_ev);
    mu_job_set_notify(ja, NULL, NULL);
    assert_int_equal(na.calls, n_ev);
    mu_job_free(ja);
    mu_job_free(jb);
    mu_sched_free(s);

    /* a queued job's cancel: FINISH, notified on this thread */
    assert_int_equal(mu_sched_new(E, &so, &s, &err), 0);
    assert_int_equal(mu_sched_submit(s, &qa, 1, &ja, &err), 0);
    mu_job_set_notify(ja, on_note, &nb);
    mu_job_cancel(ja);
    assert_int_equal(nb.calls, 1);
    assert_true(pthread_equal(nb.last, pthread_self()));
    assert_int_equal(mu_job_next(ja, &ev, 0), 1);
    assert_int_equal(ev.kind, MU_EV_FINISH);
    assert_int_equal(ev.finish, MU_FINISH_CANCEL);
    mu_job_free(ja);
    assert_int_equal(nb.calls, 1);
    mu_sched_free(s);
}

/* Broken weights (a NaN in the output matrix) end the job with an error
 * naming the cause instead of sampling garbage. */
static void test_nonfinite_logits(void **state) {
    (void)state;
    mini_cfg c = mini_default();
    c.nan_tensor = "output.weight";
    mu_err err = {0};
    mu_model *m;
    mu_engine *e;
    mu_sched *s;
    assert_int_equal(mini_open(dir, &c, 1, &m, &e), 0);
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 32};
    assert_int_equal(mu_sched_new(e, &so, &s, &err), 0);
    int32_t p[4] = {1, 2, 3, 4};
    mu_gen_req q = {.prompt = p, .n_prompt = 4, .n_predict = 4, .sp = {.temp = 0}, .no_text = true};
    mu_job *j;
    assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
    mu_gen_event ev;
    int n_tok = 0;
    while (mu_job_next(j, &ev, -1) == 1 && ev.kind != MU_EV_FINISH) n_tok += ev.kind == MU_EV_TOKEN;
    assert_int_equal(ev.kind, MU_EV_FINISH);
    assert_int_equal(ev.finish, MU_FINISH_ERROR);
    assert_non_null(strstr(ev.err, "non-finite"));
    assert_int_equal(n_tok, 0);
    mu_job_free(j);
    mu_sched_free(s);
    mu_engine_free(e);
    mu_model_close(m);
}

/* Text, stop strings and prefix reuse on the bundled model. */
static void test_text_and_stops(void **state) {
    (void)state;
    if (!D) skip();
    mu_err err = {0};
    int32_t *p;
    int np;
    const char *text = "The tar command";
    assert_int_equal(mu_tokenize(D, text, strlen(text), mu_model_get_info(D)->add_bos, false, &p, &np, &err), 0);
    mu_sched *s;
    mu_sched_opts so = {.n_slots = 1, .n_ctx = 256};
    assert_int_equal(mu_sched_new(ED, &so, &s, &err), 0);
    mu_gen_req q = {.prompt = p, .n_prompt = np, .n_predict = 40, .sp = {.temp = 0}, .ignore_eos = true};
    result full;
    run_job(s, &q, &full);
    assert_int_equal(full.n, 40);
    assert_true(full.n_text > 30);
    /* the text is the concatenation of the tokens' pieces */
    char pieces[8192];
    size_t np_ = 0;
    for (int i = 0; i < full.n; i++) {
        int k = mu_tok_piece(mu_model_tokenizer(D), full.ids[i], false, pieces + np_, sizeof pieces - np_);
        assert_true(k >= 0);
        np_ += (size_t)k;
    }
    assert_int_equal(np_, full.n_text);
    assert_memory_equal(pieces, full.text, np_);

    /* a token's events are readable together: once its TOKEN is read, the
     * TEXT it released is there too (no wait), for every token whose piece
     * is whole ASCII text (llama.cpp's stream: each chunk a token and its
     * text) */
    {
        mu_job *j;
        assert_int_equal(mu_sched_submit(s, &q, 1, &j, &err), 0);
        mu_gen_event ev;
        int n_checked = 0;
        while (mu_job_next(j, &ev, -1) == 1 && ev.kind != MU_EV_FINISH) {
            if (ev.kind != MU_EV_TOKEN) continue;
            char pc[64];
            int k = mu_tok_piece(mu_model_tokenizer(D), ev.tok.id, false, pc, sizeof pc);
            bool ascii = k > 0;
            for (int b = 0; b < k; b++) ascii &= (unsigned char)pc[b] < 0x80;
            if (!ascii) continue;
            assert_int_equal(mu_job_next(j, &ev, 0), 1);
            assert_int_equal(ev.kind, MU_EV_TEXT);
            n_checked++;
        }
        assert_true(n_checked > 20);
        mu_job_free(j);
    }

    /* a stop string cut at every position of the text: the answer ends right
     * before its first occurrence, no TEXT event ever carries it, and the
     * generation ends there (fewer tokens) */
    static result r;
    for (size_t at = 1; at + 4 <= full.n_text; at += 4) {
        char stop[8];
        memcpy(stop, full.text + at, 4);
        stop[4] = 0;
        const char *first = memmem(full.text, full.n_text, stop, 4);
        size_t cut = (size_t)(first - full.text);
        const char *stops[2] = {"\x01never", stop};
        q.stops = stops;
        q.n_stops = 2;
        run_job(s, &q, &r);
        assert_int_equal(r.finish, MU_FINISH_WORD);
        assert_string_equal(r.stop_word, stop);
        assert_int_equal(r.n_text, cut);
        assert_memory_equal(r.text, full.text, cut);
        assert_memory_equal(r.ids, full.ids, (size_t)r.n * sizeof *r.ids);
        assert_true(r.n <= full.n);
    }
    /* a stop string that never matches holds nothing back at the end */
    const char *never[1] = {"\x02\x03"};
    q.stops = never;
    q.n_stops = 1;
    run_job(s, &q, &r);
    assert_int_equal(r.finish, MU_FINISH_LENGTH);
    assert_int_equal(r.n_text, full.n_text);
    assert_memory_equal(r.text, full.text, full.n_text);
    q.stops = NULL;
    q.n_stops = 0;

    /* prefix reuse: the second turn's prompt extends the first job's
     * tokens; all of them but the last are reused */
    q.keep_prefix = true;
    q.n_predict = 8;
    run_job(s, &q, &r);
    assert_int_equal(r.st.n_reused, np - 1); /* the slot still holds the last job's tokens */
    static int32_t p2[128];
    memcpy(p2, p, (size_t)np * sizeof *p);
    memcpy(p2 + np, r.ids, 8 * sizeof *p2);
    p2[np + 8] = 42;
    mu_gen_req q2 = q;
    q2.prompt = p2;
    q2.n_prompt = np + 9;
    result r2;
    run_job(s, &q2, &r2);
    assert_int_equal(r2.st.n_reused, np + 7); /* the last generated token was never fed */
    assert_int_equal(r2.n, 8);
    mu_sched_free(s);
    free(p);
}

static void on_event(void *user, const mu_gen_event *ev) {
    (void)user;
    (void)ev;
}

/* The sampler's history: the prompt first, then every accepted token (as
 * llama.cpp's server feeds it), seen through a repeat penalty on made-up
 * logits. */
static void test_sampler_history(void **state) {
    (void)state;
    static const int32_t pr[] = {3, 5};
    mu_gen_req q = {.prompt = pr, .n_prompt = 2, .n_predict = 8, .no_text = true};
    q.sp = mu_sample_defaults();
    q.sp.temp = 0;
    q.sp.penalty_repeat = 10;
    mu_gen *g;
    mu_err err = {0};
    assert_int_equal(mu_gen_new(M, &q, 8, false, &g, &err), 0);
    float *lg = calloc((size_t)V, sizeof *lg);
    assert_non_null(lg);
    lg[5] = 2;   /* in the prompt: 2 / 10 */
    lg[6] = 1.5f;
    lg[7] = 1;
    const char *why = NULL;
    int32_t id = mu_gen_pick(g, lg, -1, &why);
    assert_int_equal(id, 6);
    assert_int_equal(mu_gen_accept(g, id, lg, on_event, NULL), MU_FINISH_NONE);
    assert_int_equal(mu_gen_pick(g, lg, -1, &why), 7); /* 6 is in the history now */
    mu_gen_free(g);
    /* without the penalty: the plain argmax */
    q.sp.penalty_repeat = 1;
    assert_int_equal(mu_gen_new(M, &q, 8, false, &g, &err), 0);
    assert_int_equal(mu_gen_pick(g, lg, -1, &why), 5);
    mu_gen_free(g);
    free(lg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_matches_plain_loop),
        cmocka_unit_test(test_forced_and_limits),
        cmocka_unit_test(test_progress_events),
        cmocka_unit_test(test_hold_and_cancel),
        cmocka_unit_test(test_pinned_slot),
        cmocka_unit_test(test_telemetry),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_notify),
        cmocka_unit_test(test_nonfinite_logits),
        cmocka_unit_test(test_text_and_stops),
        cmocka_unit_test(test_embedding_jobs),
        cmocka_unit_test(test_install_free),
        cmocka_unit_test(test_slot_hold),
        cmocka_unit_test(test_content_tokens),
        cmocka_unit_test(test_forced_call),
        cmocka_unit_test(test_sampler_history),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
