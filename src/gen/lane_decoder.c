/* lane_decoder.c: the prefill lane's decoding end (include/muser_lane.h,
 * docs/lane.md): the fetch (HELLO, then every frame checked in order
 * against what this decoder expects), the shadow and its atomic install
 * (a delta's prefix from the prefix cache first), the modes and the circuit
 * breaker, the counters.
 * Owns: mu_lane, the shadow. Does not own: the registry (lane_node.c), the
 * wire (src/net), the slot's session (the scheduler installs on its engine
 * thread through mu_gen_req.install).
 * Design: nothing reaches a session before the SEAL verifies and the
 * ledger admits the generation; the fetch runs on the caller's thread
 * (never the engine thread). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "lane.h"

void mu_lane_shadow_free(void *user) {
    shadow *sh = user;
    if (!sh) return;
    if (sh->cache && sh->tokens) mu_kv_cache_pin(sh->cache, sh->tokens, sh->n_have, false);
    mu_kv_lineage_free(sh->lin);
    free(sh->tokens);
    free(sh->mem);
    free(sh);
}

/* On the engine thread, into an empty session: a delta's prefix from the
 * prefix cache, then the shipped rows, then the position count. */
int mu_lane_shadow_install(void *user, mu_session *s, mu_err *err) {
    shadow *sh = user;
    int rc = 0;
    if (sh->n_have > 0 && sh->on_slot) {
        if (mu_session_n_past(s) != sh->n_have)
            rc = mu_fail(err, MU_E_STATE, "lane: delta: the slot holds %d positions, not the %d held", mu_session_n_past(s),
                         sh->n_have);
    } else if (sh->n_have > 0) {
        int src = 0, n = sh->cache && sh->lin ? mu_kv_cache_restore(sh->cache, s, sh->lin, sh->tokens, sh->n_have, 0, &src) : 0;
        if (n != sh->n_have)
            rc = mu_fail(err, MU_E_STATE, "lane: delta: the prefix cache restored %d positions, not the %d held", n, sh->n_have);
    }
    for (int il = 0; il < sh->n_layer && !rc; il++) {
        const uint8_t *k = sh->rows[il], *v = k + (size_t)sh->count[il] * sh->row_bytes;
        rc = mu_session_kv_write(s, il, (int)sh->lo[il], (int)sh->count[il], (const uint16_t *)k, (const uint16_t *)v, err);
    }
    if (!rc) rc = mu_session_kv_commit(s, sh->n_ship, err);
    if (rc) mu_session_reset(s);
    return rc;
}

static bool lane_pin(void *user, const uint8_t fp[32]) { return !memcmp(user, fp, 32); }

int mu_lane_connect(tls_ctx *tls, const node_ref *n, int timeout_ms, conn **c, mu_err *err) {
    int fd;
    int rc = conn_tcp_connect(n->host, n->port, timeout_ms, &fd, err);
    if (rc) return rc;
    rc = tls_connect(tls, fd, lane_pin, (void *)n->fp, timeout_ms, c, err);
    if (!rc) conn_timeouts(*c, timeout_ms, timeout_ms);
    return rc;
}

int mu_lane_peer_abort(const uint8_t *p, uint32_t len, mu_err *err) {
    uint32_t code;
    char why[300];
    mu_err e2;
    if (lane_abort_decode(p, len, &code, why, sizeof why, &e2)) return mu_fail(err, MU_E_FORMAT, "%s", e2.msg);
    if (code == LANE_ABORT_BUSY) return mu_fail(err, MU_E_STATE, "lane: busy: the producer said: %s", why);
    if (code == LANE_ABORT_IDENTITY) return mu_fail(err, MU_E_STATE, "lane: identity: the producer said: %s", why);
    if (code == LANE_ABORT_AUTH) return mu_fail(err, MU_E_STATE, "lane: auth: the producer said: %s", why);
    return mu_fail(err, MU_E_STATE, "lane: abort: the producer said (%u): %s", code, why);
}

/* The next frame that is not a PING; the whole handoff must end by deadline. */
static int read_data_frame(conn *c, uint8_t **buf, size_t *cap, unsigned *type, const uint8_t **pl, uint32_t *len,
                           double deadline, mu_err *err) {
    for (;;) {
        int rc = conn_read_frame(c, buf, cap, type, pl, len, err);
        if (rc || *type != LANE_PING) return rc;
        if (mu_lane_now_s() > deadline) return mu_fail(err, MU_E_IO, "lane: timeout: the handoff did not end within its deadline");
    }
}

/* Asks the node for the rows of positions [n_have, n_ship) of tokens (the
 * producer computes all of [0, n_ship)); *out holds them, verified. */
uint32_t *mu_lane_step_runs(int n_have, int step, int *n_runs) {
    *n_runs = 0;
    uint32_t *r = malloc((size_t)(n_have / step + 1) * sizeof *r);
    for (int p = 0; r && p < n_have; p += step) r[(*n_runs)++] = (uint32_t)(n_have - p < step ? n_have - p : step);
    return r;
}

int mu_lane_fetch(mu_lane *l, const int32_t *tokens, int n_have, const uint32_t *runs, int n_runs, int n_ship, int n_ctx,
                  shadow **out, mu_err *err) {
    const mu_model *model = mu_engine_model(l->e);
    conn *c = NULL;
    int rc = mu_lane_connect(l->tls, &l->node, l->o.timeout_ms, &c, err);
    if (rc) return rc;
    lane_hello h = {.version = LANE_VERSION, .ask = LANE_ASK_HANDOFF, .n_ctx = (uint32_t)n_ctx,
                    .step = (uint32_t)l->o.step, .n_have = (uint32_t)n_have, .n_ship = (uint32_t)n_ship,
                    .tokens = (const uint32_t *)tokens, .n_runs = (uint32_t)n_runs, .runs = runs};
    memcpy(h.kclass, l->node.kclass, LANE_CLASS_LEN);
    RAND_bytes(h.request_id, 16);
    mu_kv_ident_digest(l->kid, n_ctx, h.identity, NULL);
    lane_manifest *want = calloc(1, sizeof *want), *m = calloc(1, sizeof *m);
    shadow *sh = calloc(1, sizeof *sh);
    uint8_t *hb = NULL, *buf = NULL;
    size_t hn = 0, cap = 0;
    uint8_t(*dg)[32] = NULL;
    unsigned type;
    const uint8_t *pl;
    uint32_t len;
    if (!want || !m || !sh) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: out of memory");
        goto out;
    }
    /* what this decoder expects, from its own request and model */
    memcpy(want->request_id, h.request_id, 16);
    memcpy(want->identity, h.identity, 32);
    lane_token_digest((const uint32_t *)tokens, (uint32_t)n_ship, want->token_digest);
    lane_runs_digest(runs, (uint32_t)n_runs, want->runs_digest);
    memcpy(want->kclass, h.kclass, LANE_CLASS_LEN);
    want->n_ctx = h.n_ctx;
    want->step = h.step;
    want->n_have = h.n_have;
    want->n_ship = h.n_ship;
    want->key_epoch = l->node.epoch;
    mu_lane_plan(model, want);
    if ((rc = lane_hello_encode(&h, &hb, &hn, err)) || (rc = conn_write_frame(c, LANE_HELLO, hb, hn, err))) goto out;
    if ((rc = conn_read_frame(c, &buf, &cap, &type, &pl, &len, err))) goto out;
    if (type == LANE_ABORT) {
        rc = mu_lane_peer_abort(pl, len, err);
        goto out;
    }
    if (type != LANE_BEGIN) {
        rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where BEGIN belongs", type);
        goto out;
    }
    if ((rc = lane_begin_open(pl, len, l->node.key, m, err))) goto out;
    if (!lane_eq(m->request_id, want->request_id, 16)) {
        rc = mu_fail(err, MU_E_STATE, "lane: request: the handoff answers another request (replayed?)");
        goto out;
    }
    if (!lane_eq(m->identity, want->identity, 32)) {
        rc = mu_fail(err, MU_E_STATE, "lane: identity: the handoff's model identity differs from this decoder's");
        goto out;
    }
    if (memcmp(m->kclass, want->kclass, LANE_CLASS_LEN)) {
        rc = mu_fail(err, MU_E_STATE, "lane: identity: the rows come from kernel class %.31s, the node was qualified for %.31s",
                     m->kclass, want->kclass);
        goto out;
    }
    if (!lane_eq(m->token_digest, want->token_digest, 32) || !lane_eq(m->runs_digest, want->runs_digest, 32) ||
        m->n_ctx != want->n_ctx || m->step != want->step || m->n_ship != want->n_ship || m->n_have != want->n_have) {
        rc = mu_fail(err, MU_E_STATE, "lane: request: the handoff's tokens, held prefix, context or step differ from the request");
        goto out;
    }
    if (m->key_epoch != want->key_epoch) {
        rc = mu_fail(err, MU_E_STATE, "lane: request: key epoch %u, this node's is %u", m->key_epoch, want->key_epoch);
        goto out;
    }
    uint64_t hw = 0;
    if ((rc = ledger_high(l->led, l->node.kid, m->key_epoch, &hw, err))) goto out;
    if (m->generation <= hw) { /* refused early; ledger_admit decides again at the end */
        rc = mu_fail(err, MU_E_STATE, "lane: stale: generation %llu is not above the ledger's %llu",
                     (unsigned long long)m->generation, (unsigned long long)hw);
        goto out;
    }
    bool same = m->row_bytes == want->row_bytes && m->n_layer == want->n_layer && m->n_chunks == want->n_chunks;
    for (uint32_t i = 0; same && i < m->n_layer; i++)
        same = m->layers[i].cls == want->layers[i].cls && m->layers[i].lo == want->layers[i].lo &&
               m->layers[i].count == want->layers[i].count;
    if (!same) {
        rc = mu_fail(err, MU_E_STATE, "lane: layout: the layer table (classes, ranges, row size) differs from this model's");
        goto out;
    }
    /* the shadow: every layer's rows, in one allocation */
    uint64_t total = 0;
    for (uint32_t i = 0; i < m->n_layer; i++) total += 2ull * m->layers[i].count * m->row_bytes;
    if (total > LANE_MAX_TOTAL || !(sh->mem = malloc(total ? (size_t)total : 1)) ||
        !(dg = calloc(m->n_chunks ? m->n_chunks : 1, 32))) {
        rc = mu_fail(err, MU_E_NOMEM, "lane: limit: no memory for a handoff of %llu bytes", (unsigned long long)total);
        goto out;
    }
    sh->n_have = n_have;
    sh->n_ship = n_ship;
    memcpy(sh->kclass, m->kclass, LANE_CLASS_LEN);
    sh->cross = memcmp(m->kclass, l->own_class, LANE_CLASS_LEN) != 0;
    sh->n_layer = (int)m->n_layer;
    sh->row_bytes = m->row_bytes;
    uint64_t off = 0;
    for (uint32_t i = 0; i < m->n_layer; i++) {
        sh->lo[i] = m->layers[i].lo;
        sh->count[i] = m->layers[i].count;
        sh->rows[i] = sh->mem + off;
        off += 2ull * m->layers[i].count * m->row_bytes;
    }
    sh->wire_bytes = LANE_HDR + len;
    double deadline = mu_lane_now_s() + l->o.deadline_s;
    for (uint32_t i = 0; i < m->n_chunks; i++) {
        if ((rc = read_data_frame(c, &buf, &cap, &type, &pl, &len, deadline, err))) goto out;
        sh->wire_bytes += LANE_HDR + len;
        if (type == LANE_ABORT) {
            rc = mu_lane_peer_abort(pl, len, err);
            goto out;
        }
        if (type != LANE_LAYER) {
            rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where LAYER %u belongs", type, i);
            goto out;
        }
        const uint8_t *rows;
        if ((rc = lane_layer_check(pl, len, m, i, &rows, err))) goto out;
        lane_sha256(pl, len, dg[i]);
        uint32_t il, pos0, n;
        lane_chunk_at(m, i, &il, &pos0, &n);
        size_t rb = m->row_bytes, at = (size_t)(pos0 - sh->lo[il]) * rb, kbytes = (size_t)sh->count[il] * rb;
        memcpy(sh->rows[il] + at, rows, (size_t)n * rb);
        memcpy(sh->rows[il] + kbytes + at, rows + (size_t)n * rb, (size_t)n * rb);
    }
    if ((rc = read_data_frame(c, &buf, &cap, &type, &pl, &len, deadline, err))) goto out;
    sh->wire_bytes += LANE_HDR + len;
    if (type == LANE_ABORT) {
        rc = mu_lane_peer_abort(pl, len, err);
        goto out;
    }
    if (type != LANE_SEAL) {
        rc = mu_fail(err, MU_E_STATE, "lane: order: frame type %u where SEAL belongs", type);
        goto out;
    }
    if ((rc = lane_seal_open(pl, len, l->node.key, m, (const uint8_t(*)[32])dg, err))) goto out;
    if ((rc = ledger_admit(l->led, l->node.kid, m->key_epoch, m->generation, err))) goto out;
    uint8_t ack[20];
    lane_ack_encode(m->request_id, true, ack);
    mu_err e2;
    conn_write_frame(c, LANE_ACK, ack, sizeof ack, &e2); /* the handoff is ours already */
    *out = sh;
    sh = NULL;
out:
    conn_close(c);
    mu_lane_shadow_free(sh);
    free(hb);
    free(buf);
    free(dg);
    free(want);
    free(m);
    return rc;
}

int mu_prefill_parse(const char *name) {
    if (!strcmp(name, "local")) return MU_PREFILL_LOCAL;
    if (!strcmp(name, "auto")) return MU_PREFILL_AUTO;
    if (!strcmp(name, "remote")) return MU_PREFILL_REMOTE;
    return -1;
}

int mu_lane_open(mu_engine *e, const char *model_path, const char *node, const mu_lane_opts *o, mu_lane **out,
                     mu_err *err) {
    mu_lane *l = calloc(1, sizeof *l);
    if (!l) return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    l->e = e;
    l->o = *o;
    if (l->o.step <= 0) l->o.step = 512;
    if (l->o.step > 4096) {
        free(l);
        return mu_fail(err, MU_E_ARG, "lane: a prefill step of %d tokens (the lane serves 1..4096)", o->step);
    }
    if (l->o.breaker_failures <= 0) l->o.breaker_failures = 3;
    if (l->o.breaker_s <= 0) l->o.breaker_s = 30;
    if (l->o.timeout_ms <= 0) l->o.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (l->o.deadline_s <= 0) l->o.deadline_s = 3600;
    l->st.breaker_failures = l->o.breaker_failures;
    l->st.breaker_s = l->o.breaker_s;
    pthread_mutex_init(&l->mu, NULL);
    char cert[PATH_MAX], key[PATH_MAX], dir[PATH_MAX - 64], path[PATH_MAX];
    uint8_t fp[32];
    int rc = mu_lane_node_load(node, &l->node, NULL, err);
    if (!rc) rc = mu_lane_own_cert("decoder", "localhost", cert, key, sizeof cert, fp, err);
    if (!rc) rc = tls_ctx_new(false, cert, key, &l->tls, err);
    if (!rc) rc = mu_lane_home_sub(dir, sizeof dir, "lane", err);
    if (!rc) {
        snprintf(path, sizeof path, "%s/ledger.db", dir);
        rc = ledger_open(path, &l->led, err);
    }
    if (!rc) rc = mu_kv_ident_new(e, model_path, &l->kid, err);
    if (!rc) {
        const char *kc = "";
        mu_kv_ident_digest(l->kid, 0, l->identity, &kc);
        if (!lane_class_put(l->own_class, kc)) rc = mu_fail(err, MU_E_STATE, "lane: the kernel class is not a name: %s", kc);
    }
    if (rc) {
        mu_lane_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int mu_lane_new(mu_engine *e, const char *model_path, const mu_lane_opts *o, mu_lane **out, mu_err *err) {
    *out = NULL;
    if (o->mode == MU_PREFILL_LOCAL) return 0;
    char name[64];
    const char *node = o->node;
    if (!node) {
        int rc = mu_lane_only_node(name, sizeof name, err);
        if (rc) return rc;
        node = name;
    }
    return mu_lane_open(e, model_path, node, o, out, err);
}

void mu_lane_free(mu_lane *l) {
    if (!l) return;
    tls_ctx_free(l->tls);
    ledger_close(l->led);
    mu_kv_ident_free(l->kid);
    OPENSSL_cleanse(&l->node, sizeof l->node);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* The positions the node prefills for a prompt of n tokens (0: none, the
 * prompt is at most one step). The same kernel class: the whole steps
 * before the last token, so that every forward splits as local prefill's
 * and the answer is bit for bit local prefill's. Another class: every
 * token but the last (the answer is local prefill's under the tie-aware
 * rule either way, and the decoder then computes one token, not up to a
 * step: the point of a fast producer). */
int mu_lane_ship_count(const mu_lane *l, int n, int n_have) {
    int step = l->o.step, left = n - 1 - n_have;
    if (left < step) return 0;
    return strcmp(l->node.kclass, l->own_class) ? n - 1 : n_have + left / step * step;
}

int mu_lane_prepare(mu_lane *l, mu_gen_req *q, bool *remote, mu_err *err) {
    *remote = false;
    if (!l || l->o.mode == MU_PREFILL_LOCAL || q->install || q->embd) return 0;
    if (q->n_prompt >= l->o.n_ctx) return 0; /* the scheduler refuses it: no handoff for nothing */
    int n_ship = mu_lane_ship_count(l, q->n_prompt, 0);
    pthread_mutex_lock(&l->mu);
    if (n_ship < 1) {
        l->st.n_local_short++;
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    if (l->o.mode == MU_PREFILL_AUTO && mu_lane_now_s() < l->open_until) {
        l->st.n_skipped_open++;
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    pthread_mutex_unlock(&l->mu);
    /* a delta, only for requests that reuse a prefix anyway: a free slot
     * holds a prefix (reserved for q from here), else the prefix cache (pinned
     * from here); the node replays the forwards that made it and ships the rest */
    mu_slot_hold hold = {.slot = -1};
    int n_have = 0, n_runs = 0;
    uint32_t *step_runs = NULL; /* a delta from the cache: steps from 0 */
    const uint32_t *runs = NULL;
    if (q->keep_prefix && l->o.sched && mu_sched_slot_hold(l->o.sched, q->prompt, q->n_prompt - 1, &hold) < l->o.step)
        mu_sched_slot_unhold(l->o.sched, &hold); /* nothing worth a delta there */
    if (hold.n_have > 0) {
        n_have = hold.n_have;
        n_ship = mu_lane_ship_count(l, q->n_prompt, n_have);
        runs = hold.runs;
        n_runs = hold.n_runs;
    } else if (q->keep_prefix && l->o.cache) {
        n_have = mu_kv_cache_hold(l->o.cache, q->prompt, n_ship, l->o.step);
        if (n_have > 0 && n_ship - n_have < l->o.step) n_ship = 0;
        else if (n_have > 0 && !(runs = step_runs = mu_lane_step_runs(n_have, l->o.step, &n_runs))) n_ship = 0;
        if (n_have > 0 && !n_ship) mu_kv_cache_pin(l->o.cache, q->prompt, n_have, false);
    }
    if (n_ship < 1) { /* less than a step to gain: the reuse ladder's job */
        mu_sched_slot_unhold(l->o.sched, &hold);
        free(step_runs);
        pthread_mutex_lock(&l->mu);
        l->st.n_local_cached++;
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    shadow *sh = NULL;
    mu_err e2 = {0};
    int rc = mu_lane_fetch(l, q->prompt, n_have, runs, n_runs, n_ship, l->o.n_ctx, &sh, &e2);
    const bool on_slot = hold.n_have > 0;
    if (on_slot) { /* the reservation goes with the request, or ends */
        if (rc) {
            mu_sched_slot_unhold(l->o.sched, &hold);
        } else {
            sh->on_slot = true;
            q->slot_ticket = hold.ticket;
            q->install_keep = n_have;
            free(hold.runs);
        }
    }
    free(step_runs);
    if (!rc && n_have > 0 && !on_slot) {
        sh->cache = l->o.cache;
        if (!(sh->tokens = malloc((size_t)n_have * sizeof *sh->tokens)) ||
            mu_kv_lineage_new(l->o.cache, l->o.n_ctx, &sh->lin, &e2)) {
            free(sh->tokens);
            sh->tokens = NULL;
            mu_lane_shadow_free(sh);
            sh = NULL;
            rc = mu_fail(&e2, MU_E_NOMEM, "lane: out of memory");
        } else {
            memcpy(sh->tokens, q->prompt, (size_t)n_have * sizeof *sh->tokens);
        }
    }
    if (n_have > 0 && !on_slot && !(sh && sh->tokens)) mu_kv_cache_pin(l->o.cache, q->prompt, n_have, false); /* not handed on */
    pthread_mutex_lock(&l->mu);
    if (rc) {
        l->st.n_failed++;
        snprintf(l->st.last_error, sizeof l->st.last_error, "%s", e2.msg);
        if (++l->st.fails_in_row >= l->o.breaker_failures && l->o.mode == MU_PREFILL_AUTO) {
            l->open_until = mu_lane_now_s() + l->o.breaker_s;
            l->st.fails_in_row = 0;
        }
        if (l->o.mode == MU_PREFILL_AUTO) l->st.n_fallback++;
    } else {
        l->st.fails_in_row = 0;
        l->st.n_remote++;
        l->st.n_bytes += sh->wire_bytes;
        if (sh->cross) l->st.n_cross_class++;
        if (n_have > 0) l->st.n_delta++, l->st.n_delta_held += (uint64_t)n_have;
        if (on_slot) l->st.n_delta_slot++;
    }
    pthread_mutex_unlock(&l->mu);
    if (rc) {
        if (l->o.mode == MU_PREFILL_AUTO) return 0;
        *err = e2;
        return rc;
    }
    q->install = mu_lane_shadow_install;
    q->install_user = sh;
    q->install_free = mu_lane_shadow_free;
    q->n_installed = n_ship;
    q->install_class = sh->cross ? sh->kclass : NULL;
    q->install_step = l->o.step;
    q->keep_prefix = false;
    *remote = true;
    return 0;
}

void mu_lane_get_stats(mu_lane *l, mu_lane_stats *st) {
    pthread_mutex_lock(&l->mu);
    *st = l->st;
    snprintf(st->node_class, sizeof st->node_class, "%.31s", l->node.kclass);
    snprintf(st->own_class, sizeof st->own_class, "%.31s", l->own_class);
    double left = l->open_until - mu_lane_now_s();
    st->open = left > 0;
    st->open_left_s = left > 0 ? left : 0;
    pthread_mutex_unlock(&l->mu);
}

int mu_lane_metrics(mu_lane *l, char *buf, size_t cap) {
    if (!l) return 0;
    mu_lane_stats s;
    mu_lane_get_stats(l, &s);
    int n = snprintf(buf, cap,
                     "# HELP muser:lane_remote_total Prompts prefilled by the node.\n# TYPE muser:lane_remote_total counter\n"
                     "muser:lane_remote_total %llu\n"
                     "# HELP muser:lane_failed_total Handoffs that failed (any reason).\n# TYPE muser:lane_failed_total counter\n"
                     "muser:lane_failed_total %llu\n"
                     "# HELP muser:lane_fallback_total auto: failed handoffs prefilled locally instead.\n# TYPE muser:lane_fallback_total counter\n"
                     "muser:lane_fallback_total %llu\n"
                     "# HELP muser:lane_skipped_open_total auto: prompts prefilled locally while the breaker was open.\n# TYPE muser:lane_skipped_open_total counter\n"
                     "muser:lane_skipped_open_total %llu\n"
                     "# HELP muser:lane_local_short_total Prompts shorter than one step, prefilled locally.\n# TYPE muser:lane_local_short_total counter\n"
                     "muser:lane_local_short_total %llu\n"
                     "# HELP muser:lane_bytes_total Bytes received in handoffs.\n# TYPE muser:lane_bytes_total counter\n"
                     "muser:lane_bytes_total %llu\n"
                     "# HELP muser:lane_breaker_open 1 while the circuit breaker skips the node.\n# TYPE muser:lane_breaker_open gauge\n"
                     "muser:lane_breaker_open %d\n"
                     "# HELP muser:lane_breaker_failures Failures in a row that open the breaker.\n# TYPE muser:lane_breaker_failures gauge\n"
                     "muser:lane_breaker_failures %d\n"
                     "# HELP muser:lane_breaker_seconds How long the breaker stays open.\n# TYPE muser:lane_breaker_seconds gauge\n"
                     "muser:lane_breaker_seconds %d\n"
                     "# HELP muser:lane_cross_class_total Handoffs whose rows another kernel class computed (the node's).\n# TYPE muser:lane_cross_class_total counter\n"
                     "muser:lane_cross_class_total %llu\n"
                     "# HELP muser:lane_node_info The node's kernel class as enrolled and this decoder's.\n# TYPE muser:lane_node_info gauge\n"
                     "muser:lane_node_info{node_class=\"%s\",decoder_class=\"%s\"} 1\n"
                     "# HELP muser:lane_delta_total Delta handoffs: a live slot or the prefix cache held a prefix, the node shipped the rest.\n# TYPE muser:lane_delta_total counter\n"
                     "muser:lane_delta_total %llu\n"
                     "# HELP muser:lane_delta_slot_total Delta handoffs on a live slot's prefix (chat turns, a conversation's next request).\n# TYPE muser:lane_delta_slot_total counter\n"
                     "muser:lane_delta_slot_total %llu\n"
                     "# HELP muser:lane_delta_held_positions_total Positions delta handoffs did not ship (the decoder held them).\n# TYPE muser:lane_delta_held_positions_total counter\n"
                     "muser:lane_delta_held_positions_total %llu\n"
                     "# HELP muser:lane_local_cached_total Prompts left to the reuse ladder: a slot or the cache held all but less than a step.\n# TYPE muser:lane_local_cached_total counter\n"
                     "muser:lane_local_cached_total %llu\n",
                     (unsigned long long)s.n_remote, (unsigned long long)s.n_failed, (unsigned long long)s.n_fallback,
                     (unsigned long long)s.n_skipped_open, (unsigned long long)s.n_local_short,
                     (unsigned long long)s.n_bytes, s.open ? 1 : 0, s.breaker_failures, s.breaker_s,
                     (unsigned long long)s.n_cross_class, s.node_class, s.own_class, (unsigned long long)s.n_delta,
                     (unsigned long long)s.n_delta_slot, (unsigned long long)s.n_delta_held, (unsigned long long)s.n_local_cached);
    return n < 0 ? 0 : n >= (int)cap ? (int)cap - 1 : n;
}

