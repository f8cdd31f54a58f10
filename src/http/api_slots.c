/* api_slots.c: llama.cpp's POST /slots/{id}?action=save|restore|erase on
 * KV packs (docs/api.md "Slot save and restore").
 * Owns: the route's arguments (slot id, action, file name) and llama.cpp's
 * answer shapes; the file name is confined to --slot-save-path.
 * Does not own: the slot's session (the scheduler's engine thread saves,
 * restores and erases it: mu_sched_slot_submit) or the pack format.
 * Design: the action is queued on the scheduler and the reply waits for it
 * without blocking a connection thread (mu_http_reply_later), as a
 * generation does. A slot that is generating answers 503 at once where
 * llama.cpp would defer the action until the slot is free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* llama.cpp's fs_validate_filename, stricter: 1..255 bytes, no path
 * separator, no control character, no leading dot (".", "..", hidden names
 * and the store's partial directories), none of : * ? " < > | \ */
static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 255 || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || strchr("/\\:*?\"<>|", c)) return false;
    }
    json_t *probe = json_string(s); /* UTF-8 */
    json_decref(probe);
    return probe != NULL;
}

typedef struct {
    mu_slot_op *op;
    int slot;
    mu_slot_action action;
    char filename[256];
} slot_state;

static bool slot_poll(void *state, mu_http_req *r) {
    slot_state *st = state;
    int rc = 0;
    mu_slot_result res;
    mu_err err = {0};
    if (!mu_slot_op_result(st->op, &rc, &res, &err)) return false;
    if (rc) {
        char m[400];
        if (rc == MU_E_STATE && strstr(err.msg, "busy")) {
            mu_http_reply_error(r, 503, err.msg, NULL);
        } else if (st->action == MU_SLOT_SAVE) {
            snprintf(m, sizeof m, "Unable to save slot: %s", err.msg);
            mu_http_reply_error(r, rc == MU_E_STATE ? 400 : 500, m, NULL);
        } else {
            snprintf(m, sizeof m, "Unable to restore slot: %s", err.msg);
            mu_http_reply_error(r, 400, m, NULL);
        }
        return true;
    }
    json_t *o;
    if (st->action == MU_SLOT_SAVE)
        o = json_pack("{s:i,s:s,s:i,s:I,s:{s:f}}", "id_slot", st->slot, "filename", st->filename, "n_saved",
                      res.n_tokens, "n_written", (json_int_t)res.n_bytes, "timings", "save_ms", res.ms);
    else if (st->action == MU_SLOT_RESTORE)
        o = json_pack("{s:i,s:s,s:i,s:I,s:{s:f}}", "id_slot", st->slot, "filename", st->filename, "n_restored",
                      res.n_tokens, "n_read", (json_int_t)res.n_bytes, "timings", "restore_ms", res.ms);
    else
        o = json_pack("{s:i,s:i}", "id_slot", st->slot, "n_erased", res.n_tokens);
    if (o) mu_http_reply_json(r, 200, o);
    else mu_http_reply_error(r, 503, "server: out of memory", NULL);
    return true;
}

static void slot_release(void *state) {
    slot_state *st = state;
    mu_slot_op_free(st->op);
    free(st);
}

void api_slots_action(mu_http_req *r, const json_t *body) {
    mu_http_app *a = mu_http_req_app(r);
    if (!a->slot_dir[0]) {
        mu_http_reply_error(r, 501, "This server does not support slots action. Start it with `--slot-save-path`",
                            NULL);
        return;
    }
    const char *p = mu_http_req_path(r) + strlen("/slots/");
    char *end;
    long id = strtol(p, &end, 10);
    if (!*p || *end || *p == '-' || *p == '+' || id >= a->n_slots) {
        mu_http_reply_error(r, 400, "Invalid slot ID", "id_slot");
        return;
    }
    const char *action = mu_http_req_query(r, "action");
    mu_slot_action act;
    if (action && !strcmp(action, "save")) act = MU_SLOT_SAVE;
    else if (action && !strcmp(action, "restore")) act = MU_SLOT_RESTORE;
    else if (action && !strcmp(action, "erase")) act = MU_SLOT_ERASE;
    else {
        mu_http_reply_error(r, 400, "Invalid action", "action");
        return;
    }
    slot_state *st = calloc(1, sizeof *st);
    if (!st) {
        mu_http_reply_error(r, 503, "server: out of memory", NULL);
        return;
    }
    st->slot = (int)id;
    st->action = act;
    char dir[sizeof a->slot_dir + 260];
    if (act != MU_SLOT_ERASE) {
        const char *fn = json_string_value(json_object_get(body, "filename"));
        if (!fn || !name_ok(fn)) {
            free(st);
            mu_http_reply_error(r, 400, "Invalid filename", "filename");
            return;
        }
        snprintf(st->filename, sizeof st->filename, "%s", fn);
        snprintf(dir, sizeof dir, "%s/%s", a->slot_dir, fn);
    }
    mu_slot_req rq = {.action = act, .slot = st->slot, .dir = act != MU_SLOT_ERASE ? dir : NULL, .id = a->kv_id,
                      .key = a->kv_key};
    mu_err err = {0};
    if (mu_sched_slot_submit(a->sched, &rq, mu_http_req_wake, r, &st->op, &err)) {
        free(st);
        mu_http_reply_status(r, err.code, &err);
        return;
    }
    mu_http_reply_later(r, slot_poll, slot_release, st);
}
