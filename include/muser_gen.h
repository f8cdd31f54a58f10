/* muser_gen.h: the public generation API: the scheduler and the events of
 * a job, from logits to text. Implemented in src/gen; the server and the
 * programs generate only through it. */
#ifndef MUSER_GEN_H
#define MUSER_GEN_H

#include "muser.h"
#include "muser_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- generation ------------------------------------------------------- */
/*
 * One pipeline from logits to text (src/gen): a scheduler owns sessions
 * (slots) and one engine thread; each step it runs ONE mu_forward over the
 * decode tokens of every generating job plus prompt chunks of jobs still
 * prefilling (continuous batching), then, for each job that has logits,
 * samples (under the structured-output constraint when it has one),
 * detokenizes, splits the Muse channels, applies stop tokens, stop strings
 * and limits, and appends events to the job. Readers (HTTP threads, the
 * programs) only read events: a token goes one way, from the sampler to the
 * reader, and everything about it is decided on the engine thread.
 */

typedef enum {
    MU_FINISH_NONE = 0, /* still running */
    MU_FINISH_STOP,     /* an end-of-generation token, or the structured value is complete */
    MU_FINISH_WORD,     /* a stop string matched; the text ends before it */
    MU_FINISH_LENGTH,   /* n_predict tokens generated */
    MU_FINISH_CTX,      /* the context is full */
    MU_FINISH_CANCEL,   /* the reader cancelled (hang-up, Ctrl-C) or the scheduler shut down */
    MU_FINISH_ERROR,    /* the engine failed; the finish event says why */
} mu_finish;

/* A compiled structured-output schema (reference counted, immutable). */
typedef struct mu_schema mu_schema;
/* schema_json: a JSON Schema (the supported subset is in docs/api.md), or
 * NULL for any JSON value; object_only: the value must be an object
 * (json_object mode). where names the request field in error messages
 * ("response_format.json_schema.schema"). MU_E_ARG with the keyword's path
 * for what is not supported, MU_E_NOMEM. */
int mu_schema_new(const char *schema_json, bool object_only, const char *where, mu_schema **out, mu_err *err);
mu_schema *mu_schema_ref(mu_schema *s);
void mu_schema_unref(mu_schema *s);

/* A compiled GBNF grammar (reference counted, immutable): llama.cpp's
 * grammar dialect, applied as llama.cpp applies it (docs/api.md,
 * "Grammars"). text: NUL-terminated, its start symbol `root`; tok resolves
 * <text> token references (NULL: only <[id]> ones). MU_E_ARG with a one-line
 * message naming the line and column of what failed, MU_E_NOMEM. */
typedef struct mu_grammar mu_grammar;
#define MU_GRAMMAR_MAX_TEXT_BYTES (1u << 20) /* longer grammar text is refused */
int mu_grammar_new(const char *text, const mu_tok *tok, mu_grammar **out, mu_err *err);
mu_grammar *mu_grammar_ref(mu_grammar *g);
void mu_grammar_unref(mu_grammar *g);
/* llama.cpp's lazy grammars (grammar_lazy with grammar_triggers): the
 * grammar masks nothing until a trigger appears in the output, then
 * constrains from the trigger on. A TOKEN trigger is that token being
 * generated (the grammar starts with it); WORD, PATTERN and PATTERN_FULL
 * are regular expressions (src/gen/regex.h: llama.cpp's ECMAScript subset)
 * searched in the text generated so far after each token (a word is
 * escaped; a full pattern is anchored at both ends), and the grammar
 * starts where the first non-empty capturing group of the match begins
 * (the match's start without one). Call once, before g is shared.
 * MU_E_ARG naming the trigger whose pattern is refused, MU_E_NOMEM. */
typedef enum {
    MU_TRIGGER_TOKEN = 0, /* llama.cpp's type numbers */
    MU_TRIGGER_WORD = 1,
    MU_TRIGGER_PATTERN = 2,
    MU_TRIGGER_PATTERN_FULL = 3,
} mu_trigger_kind;
typedef struct {
    mu_trigger_kind kind;
    const char *value; /* WORD and patterns: len bytes */
    size_t len;
    int32_t token;     /* TOKEN */
} mu_grammar_trigger;
#define MU_GRAMMAR_MAX_TRIGGERS 1024
int mu_grammar_set_lazy(mu_grammar *g, const mu_grammar_trigger *t, int n, mu_err *err);
bool mu_grammar_is_lazy(const mu_grammar *g);

/* Embedding jobs: how the final-norm hidden states of the prompt's tokens
 * become the answer (llama.cpp's pooling types). */
typedef enum {
    MU_EMBD_OFF = 0, /* not an embedding job: generate */
    MU_EMBD_NONE,    /* every token's row */
    MU_EMBD_MEAN,    /* the mean of the rows */
    MU_EMBD_CLS,     /* the first token's row */
    MU_EMBD_LAST,    /* the last token's row */
} mu_embd_pooling;

#define MU_GEN_MAX_STOPS 64  /* stop strings per request (editor clients send a dozen or more) */

/* Speculative decoding (docs/speculative.md): a job drafts tokens that
 * continue its output, and one forward of the target verifies the block;
 * the answer is exactly the one plain decoding gives (same tokens, same
 * probabilities, same samples for the same seed). */
typedef enum {
    MU_SPEC_NONE = 0,
    MU_SPEC_NGRAM,  /* prompt lookup + the job's n-gram cache (llama.cpp's ngram-cache) */
    MU_SPEC_SCRIPT, /* test hook: the draft at output position i is spec_script[i..] */
    MU_SPEC_DFLASH, /* a DFlash drafter's block (mu_sched_opts.drafter) */
} mu_spec;
#define MU_SPEC_DRAFT_MAX 64         /* most drafted tokens per step */
#define MU_SPEC_NGRAM_DRAFT_DEFAULT 8 /* llama.cpp's ngram-cache drafts at most 8 */
const char *mu_spec_name(mu_spec s);  /* "none", "ngram", "script", "dflash" */
int mu_spec_parse(const char *name);  /* -1 for an unknown name */
#define MU_GEN_MAX_CHOICES 16
#define MU_GEN_MAX_CALLS 128 /* functions a forced call may choose from */

typedef struct {
    const int32_t *prompt;  /* copied at submit; BOS included when wanted */
    int n_prompt;
    int n_predict;          /* most tokens to generate; < 0: until the context is full (with the
                               scheduler's ctx_shift: until a stop) */
    mu_sample_params sp;
    bool ignore_eos;        /* do not stop at end-of-generation tokens */
    const char *const *stops; /* stop strings (copied), matched in the answer text */
    int n_stops;            /* 0..MU_GEN_MAX_STOPS */
    bool chat;              /* split the Muse channels: reasoning, answer, tool calls */
    const int32_t *preserved; /* tokens whose text is written out even when they are control
                                 tokens (llama.cpp's preserved_tokens; copied); not chat */
    int n_preserved;
    bool no_text;           /* token events only (bench, --json) */
    bool valid_utf8;        /* text events carry U+FFFD for invalid UTF-8 (else the bytes as they are) */
    bool logprobs;          /* each token's log-probability */
    int n_top;              /* most probable alternatives per token (0..n_vocab) */
    mu_schema *schema;      /* structured output, NULL for free text (the job takes a reference) */
    bool schema_chat;       /* the output may start with the Muse answer header */
    mu_grammar *grammar;    /* a GBNF grammar over the whole output (the job takes a reference);
                               not with schema, forced tokens or call_one_of */
    bool post_sampling;     /* n_top / logprobs report the sampler chain's final candidates
                               (llama.cpp's post_sampling_probs), not the model's softmax */
    bool keep_prefix;       /* reuse KV state for the prompt's longest known prefix: the slot's
                               previous job's tokens (chat turns), else the scheduler's prefix
                               cache and pack store (mu_sched_opts.cache); off: a fresh session */
    const int32_t *forced;  /* the first n_forced generated tokens are these, not sampled (bench) */
    int n_forced;
    /* KV state installed instead of evaluating prompt[0, n_installed) (KV
     * packs, the prefill lane): called once on the engine thread with the
     * slot's session, empty or (install_keep) holding the prompt's first
     * install_keep positions; returns 0 after committing exactly n_installed positions
     * (0 < n_installed < n_prompt; the ids stand for them in the history);
     * an error ends the job with MU_FINISH_ERROR and its message, the
     * session reset. Not with n > 1 choices or keep_prefix. */
    int (*install)(void *user, mu_session *s, mu_err *err);
    void *install_user;
    int n_installed;
    /* with install: called once with install_user when the job is freed,
     * whether install ran or not (the prefill lane frees its verified rows);
     * not called when mu_sched_submit fails (the caller still owns them) */
    void (*install_free)(void *user);
    /* after the job ends with STOP, WORD, LENGTH or CTX, before its slot
     * takes other work: called once on the engine thread with the slot's
     * session, the n token ids whose positions it holds (the prompt and
     * every generated token but the last) and the last generated token
     * (sampled, not evaluated);
     * a nonzero return ends the job with MU_FINISH_ERROR and err's message
     * instead (the server's sessions persist their KV state as a pack here,
     * so the pack is exactly the state the job left). One choice only, not
     * with embeddings. */
    int (*save)(void *user, const mu_session *s, const int32_t *tokens, int n, int32_t last, mu_err *err);
    void *save_user;
    /* with save: called once with save_user when the job is freed, whether
     * save ran or not; not called when mu_sched_submit fails */
    void (*save_free)(void *user);
    /* with install: the kernel class that computed the installed rows when
     * it is not this engine's (a cross-class prefill lane handoff, e.g. CUDA
     * rows in a CPU decoder), NULL otherwise; must live as long as
     * install_user. The slot's session then holds rows of two classes: it
     * never feeds the prefix cache, a slot save refuses it, and the jobs
     * that reuse it say so (mu_gen_stats.rows_class), until it is emptied. */
    const char *install_class;
    /* with install, a delta on a live slot (the prefill lane, mu_sched_slot_hold): the job
     * runs in the slot reserved for slot_ticket, whose session keeps its first install_keep
     * positions (checked to be this prompt's) for the install to build on; 0: an empty session */
    uint64_t slot_ticket;
    int install_keep;
    /* with install: > 0 when the installed positions [install_keep, n_installed) were computed
     * in forwards of install_step tokens from install_keep (a prefill lane handoff), so the
     * slot can describe its rows to a producer for a later delta (mu_sched_slot_hold) */
    int install_step;
    mu_embd_pooling embd;   /* not OFF: evaluate the prompt, pool its final-norm rows, end with
                               MU_FINISH_STOP and no tokens (mu_job_embedding); one choice only.
                               Pooling other than LAST needs the whole prompt in one step
                               (at most prefill_chunk tokens) */
    const char *const *call_one_of; /* chat: the output must be a call of one of these functions
                               (OpenAI tool_choice "required" or a named function): the header
                               " to=NAME<|message|>" with NAME constrained to the list, then the
                               call block opened for NAME; the arguments are the model's (copied) */
    int n_call_one_of;      /* 0: off; at most MU_GEN_MAX_CALLS */
    int embd_normalize;     /* pooled rows: llama.cpp's embd_normalize (-1 none, 0 max-abs scaled
                               to int16, 2 Euclidean, p > 0 p-norm); the server's default is 2 */
    mu_spec spec;           /* speculative decoding (MU_SPEC_NONE: the scheduler's default) */
    bool spec_off;          /* no speculative decoding, whatever the scheduler's default */
    int draft_max;          /* most drafted tokens per step, 1..MU_SPEC_DRAFT_MAX; 0: the method's default
                               (with the scheduler's default method: its draft max) */
    int draft_min;          /* a draft shorter than this is not verified (a plain step instead);
                               0 with the scheduler's default method: its draft min */
    const int32_t *spec_script; /* MU_SPEC_SCRIPT: n_spec_script tokens (copied) */
    int n_spec_script;
    bool pin_slot;          /* run in slot id_slot (llama.cpp's id_slot), waiting for it while it is
                               busy (jobs behind it that can run elsewhere go first); with n choices
                               only the first is pinned, as llama.cpp's child tasks */
    int id_slot;
    bool progress;          /* MU_EV_PROGRESS events while the prompt is evaluated (llama.cpp's
                               return_progress, the programs' progress lines); readers that leave
                               it off never see one; none for embeddings */
    const mu_mprompt *media; /* a prompt with images (mu_mprompt_new): replaces prompt/n_prompt;
                               must outlive the job */
    bool media_take;         /* the job takes media: the scheduler frees it (mu_mprompt_free) when
                               the job is freed, also after a cancel mid-prefill; not when
                               mu_sched_submit fails (the caller still owns it) */
    /* with the scheduler's ctx_shift (llama.cpp's request fields): */
    int n_keep;             /* prompt tokens a shift keeps (-1: the whole prompt, BOS included);
                               one more when the model adds BOS */
    int n_discard;          /* tokens a shift drops (0: half of those after n_keep) */
} mu_gen_req;

typedef enum {
    MU_EV_TOKEN,     /* a generated token (id, probabilities) */
    MU_EV_TEXT,      /* a text delta of one channel: whole UTF-8 characters, never part of a stop string */
    MU_EV_TOOL_CALL, /* a complete tool call: name, arguments (JSON text) */
    MU_EV_FINISH,    /* the last event of a job */
    MU_EV_CONTENT_TOKEN, /* chat jobs with logprobs or n_top: token tok_index is part of the answer
                            text (not a channel header, reasoning or a tool call); sent just before
                            the TEXT event that holds its first byte */
    MU_EV_PROGRESS,  /* mu_gen_req.progress: the prompt's evaluation; one when the job has its slot
                        (n_done 0; stats.n_reused: the kept tokens), then one after
                        each prompt chunk evaluated; stats.n_prompt is the prompt's length,
                        stats.prompt_ms the time since the first of these events */
} mu_event_kind;

typedef enum { MU_CH_CONTENT, MU_CH_REASONING } mu_channel;

typedef struct {
    int32_t id;
    float logprob;               /* when logprobs or n_top */
    int n_top;                   /* the n_top most probable tokens, descending: */
    const int32_t *top_ids;
    const float *top_probs;      /* softmax probabilities (mu_token_probs) */
    const float *top_logprobs;
    float prob;                  /* post_sampling: the token's probability among the final candidates
                                    (else exp(logprob)); with post_sampling n_top counts only
                                    candidates of non-zero probability */
} mu_gen_token;

typedef struct {
    int slot;
    int n_prompt, n_gen;
    int n_reused;         /* prompt tokens whose KV state was reused (kept or restored) */
    int reuse_src;        /* where they came from: mu_kv_src (MU_KV_SRC_NONE when n_reused is 0) */
    double queue_ms;      /* submit -> slot assigned */
    double prompt_ms;     /* slot assigned -> first token sampled */
    double gen_ms;        /* first token -> last token */
    double constrain_ms;  /* of which structured-output token checks */
    bool prompt_shared;   /* the prompt's KV state was copied from another choice of the request */
    int n_draft;          /* speculative decoding: tokens drafted and verified */
    int n_draft_accepted; /* of which the target accepted */
    int n_spec_steps;     /* verification steps (forwards with a draft) */
    int n_draft_ngram;    /* of n_draft: a dflash job's drafts from n-gram lookups (the drafter's
                             are the rest; docs/speculative.md, "N-gram lookups in a dflash job") */
    int n_draft_ngram_accepted; /* of n_draft_accepted: those of them the target accepted */
    int n_spec_busy;      /* decode steps that did not draft because the batch was busy: other
                             jobs' rows made this job's drafts cost more than they would yield
                             (docs/speculative.md, "Busy batches") */
    /* per draft position k (0-based): the verification steps that checked
     * draft k (every draft before it was accepted), and of those, the ones
     * that accepted it; n_draft_pos[0] == n_spec_steps and the n_accept_pos
     * sum to n_draft_accepted */
    int n_draft_pos[MU_SPEC_DRAFT_MAX], n_accept_pos[MU_SPEC_DRAFT_MAX];
    char rows_class[32];  /* "" or, when some of the prompt's installed or reused rows were computed
                             by another kernel class (mu_gen_req.install_class), that class: the
                             answer then equals local prefill's under the tie-aware rule, not bit
                             for bit */
    int n_shift;          /* context shifts the job made (mu_sched_opts.ctx_shift): llama.cpp's
                             "truncated" */
    int n_discarded;      /* tokens those shifts dropped from the session */
} mu_gen_stats;

typedef struct {
    mu_event_kind kind;
    mu_channel channel;     /* TEXT */
    const char *text;       /* TEXT: the delta; TOOL_CALL: the arguments (JSON text, NUL-terminated) */
    size_t len;
    const char *name;       /* TOOL_CALL: the function name (NUL-terminated) */
    mu_gen_token tok;       /* TOKEN */
    int tok_index;          /* CONTENT_TOKEN: 0-based, in generation order (the TOKEN events' order) */
    mu_finish finish;       /* FINISH */
    int n_done, n_total;    /* PROGRESS: prompt tokens evaluated so far / to evaluate (the prompt less
                               the tokens whose KV state was kept or installed) */
    const char *stop_word;  /* FINISH with MU_FINISH_WORD: the string that matched */
    const char *err;        /* FINISH with MU_FINISH_ERROR or CANCEL: why ("" when nothing to say) */
    mu_gen_stats stats;     /* FINISH; PROGRESS: n_prompt, n_reused, prompt_ms */
} mu_gen_event;

typedef struct mu_sched mu_sched;
typedef struct mu_job mu_job;

#define MU_SCHED_TTFT_BUCKETS 12

#define MU_SCHED_MAX_SLOTS 4

typedef struct {
    int n_slots;       /* 1..MU_SCHED_MAX_SLOTS */
    int n_ctx;         /* positions per slot */
    int queue_max;     /* jobs waiting for a slot before submit answers busy */
    int prefill_chunk; /* most prompt tokens per step (all slots together); 0 = 512 */
    int hold_until;    /* test hook: start no job until this many are queued (0 = off) */
    int stall_after;   /* test hook: a job generates this many tokens, then waits for its cancel (0 = off) */
    mu_spec spec;      /* speculative decoding for requests that name none (the server's --spec) */
    int draft_max, draft_min; /* with spec, for those requests (mu_gen_req's meaning) */
    /* the resident prefix cache (and its pack store) shared by the slots;
     * NULL: only the live slot's prefix is reused. It must outlive the
     * scheduler. keep_prefix jobs climb the ladder live slot -> cache ->
     * pack store -> prefill, and every slot's completed blocks are captured. */
    mu_kv_cache *cache;
    mu_drafter *drafter; /* the DFlash drafter of MU_SPEC_DFLASH jobs (borrowed; outlives the
                            scheduler); NULL: such jobs are refused */
    bool ctx_shift;    /* llama.cpp's --context-shift: a job whose slot fills shifts its context
                          (mu_session_shift with the job's n_keep / n_discard) and goes on,
                          instead of ending with MU_FINISH_CTX; not for image prompts (llama.cpp
                          turns it off with a projector) */
} mu_sched_opts;

/* The engine must outlive the scheduler. Starts the engine thread. */
int mu_sched_new(mu_engine *e, const mu_sched_opts *o, mu_sched **out, mu_err *err);
/* The scheduler's engine (for mu_mprompt_new: image prompts for its jobs). */
mu_engine *mu_sched_engine(const mu_sched *s);
/* Cancels everything, joins the thread, frees sessions. NULL is fine. */
void mu_sched_free(mu_sched *s);

/* Submits n jobs for one prompt (the n choices of one request), all or
 * none; r[k] may differ in sampling (seeds) but shares r[0]'s prompt. The
 * first job to reach a slot evaluates the prompt and the others copy its KV
 * state and last logits. MU_E_ARG for a prompt that does not fit or bad
 * parameters; MU_E_STATE when the free slots and the queue cannot take all
 * n (the caller answers 429). */
int mu_sched_submit(mu_sched *s, const mu_gen_req *r, int n, mu_job **out, mu_err *err);

/* The prefill lane's delta from a live slot (docs/lane.md "Delta handoff").
 * Each slot knows the forwards that made the leading positions of its
 * session as a producer can replay them (each a run of tokens, MU_RUN_SOLO
 * when they ran as solo rows: a decode step, a verified draft block): a
 * forward counts while the slot ran alone in it (or as solo rows), a lane
 * handoff's steps count, a prefix from the cache, a pack or another slot
 * does not. */
#define MU_RUN_SOLO 0x80000000u
typedef struct {
    int slot;        /* the reserved slot; -1: none */
    int n_have;      /* the prompt's positions it holds that a producer can replay */
    uint32_t *runs;  /* malloc'ed: the forwards that made them, [length | MU_RUN_SOLO] */
    int n_runs;
    uint64_t ticket; /* mu_gen_req.slot_ticket */
} mu_slot_hold;
/* Finds the free slot that holds the longest replayable prefix of
 * prompt[0, max_have) (one it can be cut back to) and reserves it for the
 * job carrying h->ticket: no other job is admitted there until that job
 * is, is cancelled while queued, or mu_sched_slot_unhold. Returns
 * h->n_have (0: nothing held, nothing reserved). Any thread. */
int mu_sched_slot_hold(mu_sched *s, const int32_t *prompt, int max_have, mu_slot_hold *h);
/* Ends h's reservation unless a job took it, frees h->runs. NULL s or an
 * empty h are fine. */
void mu_sched_slot_unhold(mu_sched *s, mu_slot_hold *h);

/* Waits up to timeout_ms (< 0: without limit) for the job's next event.
 * Returns 1 with *ev filled (its strings valid until the next call on j),
 * 0 on timeout. After the FINISH event it returns 0 at once. */
int mu_job_next(mu_job *j, mu_gen_event *ev, int timeout_ms);
/* Waits until the job has ended, without waking for each event (a reader
 * that wants only the result: the events are all there afterwards). */
void mu_job_wait_end(mu_job *j);
/* Asks the engine to stop this job at its next step; a job still waiting
 * in the queue ends at once (idempotent; any thread). */
void mu_job_cancel(mu_job *j);
/* Sets the reader's notification (fn NULL: none): fn(user) is called after
 * each event is queued for j, once the event is readable by mu_job_next (the
 * events of one accepted token become readable together: one call), by
 * the thread that queued it (the engine thread, or the thread whose
 * mu_job_cancel ended a queued job), outside the job's event lock. fn must be
 * quick and must not call any mu_job_* function on j. Events queued before
 * the call are not notified (read them after setting fn); a reader may take
 * an event before its notify runs (a later wake then finds nothing new). When
 * mu_job_set_notify or mu_job_free returns, no call of the previous fn is
 * running or will start: so do not call them while holding a lock fn takes. */
void mu_job_set_notify(mu_job *j, void (*fn)(void *user), void *user);
/* The result of an embedding job, once its FINISH (MU_FINISH_STOP) was read:
 * [*n_rows][*n_embd] floats (one row when pooled, one per prompt token for
 * MU_EMBD_NONE), valid until mu_job_free. NULL before that or for other jobs. */
const float *mu_job_embedding(mu_job *j, int *n_rows, int *n_embd);
/* Clears the notification, cancels and drops the reader's reference. NULL is
 * fine. */
void mu_job_free(mu_job *j);

typedef struct {
    uint64_t n_requests, n_prompt_tokens, n_gen_tokens, n_forward, n_busy_rejects;
    uint64_t n_cancelled;  /* jobs ended by a cancel (hang-up, Ctrl-C, shutdown) */
    uint64_t n_prompt_cached;  /* prompt tokens whose KV state a job reused (keep_prefix), all sources */
    uint64_t n_reused_src[MU_KV_SRC_COUNT];   /* of which from each source (mu_kv_src) */
    uint64_t n_reuse_jobs[MU_KV_SRC_COUNT];   /* keep_prefix jobs by where their prefix came from */
    uint64_t n_tokens_max;     /* the longest sequence seen in a slot (prompt + generated) */
    uint64_t n_busy_sum;       /* sessions in each forward call, summed (/ n_forward: slots busy per call) */
    uint64_t n_draft_tokens, n_draft_accepted, n_spec_steps; /* speculative decoding, all jobs */
    double spec_row_cost;      /* what the drafting policy charges a verified draft, in decode steps
                                  (0.4 on the CPU, 0.1 on a GPU, or $MUSER_SPEC_ROW_COST) */
    double prompt_s, gen_s;
    /* the prompt and generated tokens of finished jobs: prompt_s and gen_s
     * are added when a job ends, so throughput is these over those (the
     * live counts above include running jobs, whose time is not in yet) */
    uint64_t n_prompt_timed, n_gen_timed;
    int n_processing, n_queued, n_slots, n_ctx;
    /* time to first token: from submit to the first generated token sampled
     * (queue wait and prefill included), one per job that generated a token,
     * counted when that token is sampled */
    uint64_t n_ttft;
    double ttft_s_sum, ttft_s_last;
    uint64_t ttft_hist[MU_SCHED_TTFT_BUCKETS]; /* jobs per bucket, not cumulative: bucket k holds
                                                  ttft <= mu_sched_ttft_bounds()[k] (and above bucket k-1's) */
} mu_sched_metrics;

/* The upper bounds in seconds of the time-to-first-token buckets
 * (MU_SCHED_TTFT_BUCKETS of them, increasing, the last +INFINITY). */
const double *mu_sched_ttft_bounds(void);

typedef struct {
    bool busy;
    int n_past;
    int n_prompt, n_gen;
    /* the slot's KV cache (mu_session_kv_bytes): all its cells, and the
     * cells its n_past positions occupy (kept after a job for the next) */
    uint64_t kv_reserved_bytes, kv_used_bytes;
} mu_sched_slot_info;

/* ---- a slot's KV state as a pack (llama.cpp's /slots/{id}?action=...) ---- */
typedef enum { MU_SLOT_SAVE, MU_SLOT_RESTORE, MU_SLOT_ERASE } mu_slot_action;
typedef struct {
    mu_slot_action action;
    int slot;                 /* 0..n_slots-1 */
    const char *dir;          /* SAVE, RESTORE: the pack directory (copied) */
    const mu_kv_ident *id;    /* SAVE, RESTORE: the engine's identity (must outlive the op) */
    const uint8_t *key;       /* SAVE, RESTORE: the root key (copied, wiped with the op) */
} mu_slot_req;
typedef struct {
    int n_tokens;             /* saved, restored or erased positions */
    uint64_t n_bytes;         /* SAVE: bytes written; RESTORE: bytes of the pack read */
    double ms;                /* how long the engine thread worked on it */
} mu_slot_result;
typedef struct mu_slot_op mu_slot_op;
/* Queues the action; the engine thread runs it between steps. SAVE writes
 * the slot's session and token ids (mu_kv_save_opts.with_tokens) to dir;
 * RESTORE replaces the slot's session and history with the pack's, so the
 * next keep_prefix job reuses them; ERASE forgets them. A slot with a job
 * running (or assigned by then) fails with MU_E_STATE. notify(user) runs on
 * the engine thread once the result is readable (not after mu_slot_op_free
 * returned). */
int mu_sched_slot_submit(mu_sched *s, const mu_slot_req *rq, void (*notify)(void *user), void *user,
                         mu_slot_op **out, mu_err *err);
/* 1 when done (*rc the status, res or err filled), 0 while pending. */
int mu_slot_op_result(mu_slot_op *op, int *rc, mu_slot_result *res, mu_err *err);
/* Any time; NULL is fine. */
void mu_slot_op_free(mu_slot_op *op);

void mu_sched_get_metrics(mu_sched *s, mu_sched_metrics *m);
void mu_sched_get_slot(mu_sched *s, int i, mu_sched_slot_info *info);

/* One finished job, for request logs. */
typedef struct {
    uint64_t seq;         /* 1, 2, ... in the order jobs ended */
    double t_end_s;       /* when it ended, CLOCK_MONOTONIC seconds */
    mu_finish finish;
    int slot;             /* -1: ended in the queue */
    int n_prompt, n_reused, n_gen;
    double queue_ms;      /* submit -> slot */
    double ttft_ms;       /* submit -> first token sampled; < 0: no token */
    double prompt_ms, gen_ms; /* as mu_gen_stats */
    bool embedding;
} mu_sched_job_record;
#define MU_SCHED_RECENT 32
/* The last (up to MU_SCHED_RECENT) finished jobs, newest first: at most
 * cap records into out; returns how many. */
int mu_sched_recent(mu_sched *s, mu_sched_job_record *out, int cap);

#ifdef __cplusplus
}
#endif
#endif
