/* sched.h: the generation scheduler behind the HTTP server.
 * One engine thread owns every session (one per slot) and runs the decode
 * steps of all active slots, plus prompt chunks of slots still prefilling, as
 * ONE mu_forward call per step (continuous batching). HTTP threads submit
 * jobs into a bounded queue and read generated tokens back from the job;
 * they never touch a session. */
#ifndef MU_HTTP_SCHED_H
#define MU_HTTP_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "../../include/muser.h"
#include "jsonc.h"

#define MU_SCHED_MAX_SLOTS 4
#define MU_SCHED_MAX_TOP 20

typedef struct mu_sched mu_sched;
typedef struct mu_job mu_job;

typedef struct {
    int n_slots;       /* 1..4 */
    int n_ctx;         /* positions per slot */
    int queue_max;     /* jobs waiting for a slot before submit answers busy */
    int prefill_chunk; /* most prompt tokens per step (all slots together); 0 = 512 */
} mu_sched_opts;

typedef struct {
    const int32_t *prompt;  /* copied by submit; BOS already included if wanted */
    int n_prompt;
    int n_predict;          /* most tokens to generate; < 0 = until the context is full */
    mu_sample_params sp;
    bool logprobs;          /* fill logprob of each generated token */
    int n_top;              /* 0..MU_SCHED_MAX_TOP alternatives per token */
    bool ignore_eos;
    /* structured output (NULL = free text): the job keeps its own reference */
    mu_jsonc_schema *schema;
    bool schema_chat;       /* the output may start with the Muse answer header */
} mu_sched_req;

typedef struct {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_ids[MU_SCHED_MAX_TOP];
    float top_logprobs[MU_SCHED_MAX_TOP];
} mu_sched_tok;

enum {
    MU_FINISH_NONE = 0,   /* still running */
    MU_FINISH_STOP,       /* a stop token (eos/eot) */
    MU_FINISH_LENGTH,     /* n_predict reached */
    MU_FINISH_CTX,        /* the slot's context is full */
    MU_FINISH_CANCEL,     /* the client went away or asked to stop */
    MU_FINISH_ERROR,      /* the engine failed; stats.err says why */
};

typedef struct {
    int finish;
    int slot;
    int n_prompt, n_gen;
    double queue_ms;      /* submit -> slot assigned */
    double prompt_ms;     /* slot assigned -> first token sampled */
    double gen_ms;        /* first token -> last token */
    double constrain_ms;  /* of which structured-output token checks */
    bool prompt_shared;   /* the prompt's KV state was copied from another choice of the request */
    char err[256];
} mu_job_stats;

typedef struct {
    uint64_t n_requests, n_prompt_tokens, n_gen_tokens, n_forward, n_busy_rejects;
    double prompt_s, gen_s;
    int n_processing, n_queued, n_slots, n_ctx;
} mu_sched_metrics;

typedef struct {
    bool busy;
    int n_past;
    int n_prompt, n_gen;
} mu_sched_slot_info;

/* The engine must outlive the scheduler. Starts the engine thread. */
int mu_sched_new(mu_engine *e, const mu_sched_opts *o, mu_sched **out, mu_err *err);
/* Cancels everything, joins the thread, frees sessions. NULL is fine. */
void mu_sched_free(mu_sched *s);

/* MU_E_ARG for a prompt that does not fit or bad parameters; MU_E_STATE when
 * the queue is full (the caller answers 429). */
int mu_sched_submit(mu_sched *s, const mu_sched_req *r, mu_job **out, mu_err *err);

/* Submits n jobs for one prompt (n choices of one request) all or none:
 * MU_E_STATE when the free slots and the queue cannot take all n. The
 * prompt of r[0] is used for all; the first job to reach a slot evaluates
 * it and the others copy its KV state and last logits (when the engine can
 * save the state; else each evaluates it). Other fields may differ per job
 * (seeds). */
int mu_sched_submit_n(mu_sched *s, const mu_sched_req *r, int n, mu_job **out, mu_err *err);
#define MU_SCHED_MAX_CHOICES 128

/* Waits up to timeout_ms for tokens not yet read; copies up to cap of them
 * into out and returns how many (0 on timeout). *finish is the job's finish
 * reason once every token has been read, else MU_FINISH_NONE. */
int mu_job_next(mu_job *j, mu_sched_tok *out, int cap, int timeout_ms, int *finish);
/* Asks the engine to stop this job at its next step (idempotent). */
void mu_job_cancel(mu_job *j);
void mu_job_get_stats(mu_job *j, mu_job_stats *st);
/* Cancels and drops the caller's reference. NULL is fine. */
void mu_job_free(mu_job *j);

void mu_sched_get_metrics(mu_sched *s, mu_sched_metrics *m);
void mu_sched_get_slot(mu_sched *s, int i, mu_sched_slot_info *info);

#endif
