/* serve.c: the public face of the server (include/muser_serve.h): builds
 * the application state every handler sees from the scheduler and the
 * model, and starts the transport with the route table. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>

#include "../../include/muser_serve.h"
#include "api.h"

struct mu_server {
    mu_http_app app;
    mu_http_server *srv;
};

int mu_serve_bind_check(const char *host, bool has_tls, bool has_key, mu_err *err) {
    return mu_http_bind_check(host, has_tls, has_key, NULL, err);
}

int mu_serve_read_key_file(const char *path, char *key, size_t cap, mu_err *err) {
    return mu_http_read_key_file(path, key, cap, err);
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int mu_serve_start(mu_sched *sched, const mu_model *m, const mu_serve_opts *o, mu_server **out, mu_err *err) {
    if (!mu_model_tokenizer(m)) return mu_fail(err, MU_E_MODEL, "server: the model has no tokenizer");
    mu_server *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(err, MU_E_NOMEM, "server: out of memory");
    mu_http_app *a = &s->app;
    mu_sched_metrics sm;
    mu_sched_get_metrics(sched, &sm);
    const char *path = o->model_path ? o->model_path : "";
    struct stat st;
    if (*path && !stat(path, &st)) {
        a->model_bytes = (uint64_t)st.st_size;
        a->model_mtime = (int64_t)st.st_mtime;
    }
    a->sched = sched;
    a->model = m;
    a->info = mu_model_get_info(m);
    a->tok = mu_model_tokenizer(m);
    a->chat_template = mu_model_chat_template(m);
    a->model_id = a->info->name && *a->info->name ? a->info->name : base_name(path);
    json_t *probe = json_string(a->model_id); /* ids go into JSON: must be UTF-8 */
    if (!probe || !*a->model_id) a->model_id = "model";
    json_decref(probe);
    a->model_path = path;
    a->n_ctx = sm.n_ctx;
    a->n_slots = sm.n_slots;
    a->t_start = api_unix_now();
    /* pooling: --pooling, else the GGUF's <arch>.pooling_type (llama.cpp's
     * enum: 0 none, 1 mean, 2 cls, 3 last), else none, as llama.cpp */
    a->pooling = o->pooling;
    int64_t pt = -1;
    if (a->pooling == MU_EMBD_OFF && !mu_model_meta_int(m, "muse-glimmer.pooling_type", &pt) && pt >= 0 && pt <= 3)
        a->pooling = (mu_embd_pooling)(MU_EMBD_NONE + pt);
    if (a->pooling == MU_EMBD_OFF) a->pooling = MU_EMBD_NONE;
    if (o->n_aliases < 0 || o->n_aliases > MU_SERVE_MAX_ALIASES) {
        free(s);
        return mu_fail(err, MU_E_ARG, "server: at most %d aliases: %d", MU_SERVE_MAX_ALIASES, o->n_aliases);
    }
    for (int i = 0; i < o->n_aliases; i++) {
        json_t *p = json_string(o->aliases[i]);
        json_decref(p);
        if (!p || !*o->aliases[i]) {
            free(s);
            return mu_fail(err, MU_E_ARG, "server: a model alias must be non-empty UTF-8");
        }
    }
    /* as llama.cpp's --alias: the aliases are a set (sorted, no
     * duplicates) whose first member is the id the server reports; the
     * GGUF's name is still answered to (listed last when no alias is it) */
    if (o->n_aliases > 0) {
        const char *gguf_name = a->model_id;
        for (int i = 0; i < o->n_aliases; i++) {
            int at = a->n_aliases;
            bool dup = false;
            for (int k = 0; k < a->n_aliases && !dup; k++) dup = !strcmp(a->aliases[k], o->aliases[i]);
            if (dup) continue;
            while (at > 0 && strcmp(a->aliases[at - 1], o->aliases[i]) > 0) {
                a->aliases[at] = a->aliases[at - 1];
                at--;
            }
            a->aliases[at] = o->aliases[i];
            a->n_aliases++;
        }
        a->model_id = a->aliases[0];
        a->gguf_name = gguf_name;
    }
    a->any_model = o->any_model;
    a->prefill = o->prefill;
    a->prefill_user = o->prefill_user;
    a->prefill_stats = o->prefill_stats;
    a->metrics = o->metrics;
    a->metrics_user = o->metrics_user;
    a->has_seed = o->has_seed;
    a->seed = o->seed;
    a->has_temp = o->has_temp;
    a->temp = o->temp;
    a->n_predict = o->n_predict > 0 ? o->n_predict : 0;
    a->cache_prompt = o->cache_prompt;
    a->no_slots = o->no_slots;
    a->no_ui = o->no_ui;
    a->no_metrics = o->no_metrics;
    a->tags = o->tags && *o->tags ? o->tags : NULL;
    a->mmproj = o->mmproj;
    snprintf(a->backend, sizeof a->backend, "%s", o->backend ? o->backend : "");
    snprintf(a->kernels, sizeof a->kernels, "%s", o->kernels ? o->kernels : "");
    a->cache = o->cache;
    if (o->slot_save_path) {
        if (snprintf(a->slot_dir, sizeof a->slot_dir, "%s", o->slot_save_path) >= (int)sizeof a->slot_dir || !o->kv_id ||
            !o->kv_key) {
            free(s);
            return mu_fail(err, MU_E_ARG, "server: --slot-save-path too long, or no identity and key");
        }
        a->kv_id = o->kv_id;
        memcpy(a->kv_key, o->kv_key, 32);
    }
    if (o->pack_dir) {
        if (snprintf(a->pack_dir, sizeof a->pack_dir, "%s", o->pack_dir) >= (int)sizeof a->pack_dir || !o->kv_id ||
            !o->kv_key) {
            free(s);
            return mu_fail(err, MU_E_ARG, "server: --pack-dir too long, or no identity and key");
        }
        a->kv_id = o->kv_id;
        memcpy(a->kv_key, o->kv_key, 32);
        a->pack_max_bytes = o->pack_max_bytes;
    }
    if (api_sessions_new(&a->sessions)) {
        free(s);
        return mu_fail(err, MU_E_NOMEM, "server: out of memory");
    }
    api_sessions_budget(a, NULL); /* a store over its budget is trimmed before the first request */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    a->t_start_mono = ts.tv_sec + ts.tv_nsec * 1e-9;
    mu_http_opts ho = {.host = o->host,
                       .port = o->port,
                       .tls_cert_pem = o->tls_cert_pem,
                       .tls_key_pem = o->tls_key_pem,
                       .api_key = o->api_key,
                       .max_connections = o->max_connections,
                       .max_per_ip = o->max_conns_per_ip,
                       .header_timeout_s = o->head_timeout_s,
                       .body_timeout_s = o->body_timeout_s,
                       .idle_timeout_s = o->idle_timeout_s,
                       .max_body_bytes = o->max_body_bytes,
                       .threads = o->http_threads,
                       .cors_origins = o->cors_origins,
                       .routes = mu_http_routes,
                       .app = a};
    int rc = a->mmproj ? api_encoder_start(a, err) : 0;
    if (!rc) rc = mu_http_server_start(&ho, &s->srv, err);
    if (rc) {
        api_encoder_stop(a);
        api_sessions_free(a->sessions);
        free(s);
        return rc;
    }
    a->server = s->srv;
    *out = s;
    return 0;
}

int mu_serve_port(const mu_server *s) { return mu_http_server_port(s->srv); }

int mu_serve_max_connections(const mu_server *s, int *requested) {
    mu_http_opts o;
    mu_http_server_limits(s->srv, &o);
    if (requested) *requested = o.requested_connections;
    return o.max_connections;
}

void mu_serve_stop(mu_server *s) {
    if (!s) return;
    mu_http_server_stop(s->srv);
    api_encoder_stop(&s->app); /* after the server: no request is left to wake */
    api_sessions_free(s->app.sessions);
    mu_kv_key_wipe(s->app.kv_key);
    free(s);
}
