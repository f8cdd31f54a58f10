/* dash.h: the dashboard (GET / and /dashboard: one embedded page, no
 * outside resources) and the JSON snapshot that feeds it (GET /snapshot;
 * GET /telemetry sends it as server-sent events once a second), where
 * every number carries an honesty tag: "measured", "target" or
 * "unavailable" (docs/dashboard.md). */
#ifndef MU_HTTP_DASH_H
#define MU_HTTP_DASH_H

#include <jansson.h>

#include "api.h"
#include "server.h"

void api_dash_page(mu_http_req *r, const json_t *body);
void api_dash_snapshot(mu_http_req *r, const json_t *body);
void api_dash_telemetry(mu_http_req *r, const json_t *body);
void api_dash_login(mu_http_req *r, const json_t *body);
void api_dash_logout(mu_http_req *r, const json_t *body);
void api_dash_session(mu_http_req *r, const json_t *body);
/* Appends the dashboard's series to /metrics' text (time to first token,
 * KV cache, prefix cache). */
void api_dash_metrics(mu_http_app *a, mu_http_buf *b);

/* The page, generated at build time from src/http/dash.html (tools/embed.sh). */
extern const unsigned char mu_dash_html[];
extern const unsigned long mu_dash_html_len;

#endif
