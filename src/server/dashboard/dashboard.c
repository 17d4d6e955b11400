/* dashboard.c - the live dashboard: GET / and /dashboard/<file> from the binary, and its login.
 *
 * The page (src/server/dashboard/) is built into sluiced by embed.cmake and reads only
 * the API: GET /v1/pools, /v1/agents, /v1/limits and the /v1/events stream, from the
 * same origin. Every answer here carries a Content-Security-Policy that allows scripts,
 * styles, images and connections from this origin only (no inline script or style), so
 * text from the API that reached the page as markup could not run.
 *
 * First paint. GET / answers the page with the data it draws inlined (a
 * `<script id="initial" type="application/json">` block, which no CSP rule runs): the pools,
 * the first INITIAL_AGENTS agents and the last hour (history.c). So the page shows the
 * fleet before any request of its own returns, and a page opened during an incident shows
 * the hour before it. The page is then answered `no-store`, without an ETag.
 *
 * Auth. With auth off the page is served like the rest of the API (the Host rule of
 * http.c has already refused other names). With auth on it needs the admin token, but a
 * browser cannot send a bearer header on a navigation, nor on an EventSource. So:
 * `GET /?token=ADMIN` (the login page's form does this) compares the token in constant
 * time and answers 303 to `/` with a cookie `sluice_dashboard`: a random 256-bit session
 * key (not the token), HttpOnly, SameSite=Strict, no Max-Age (gone when the browser
 * closes). The key authorises GETs of the dashboard's files and of the read endpoints the
 * page uses, nothing else: no write, no ticket claim, no reload. It is valid until
 * sluiced restarts or a reload changes the admin token. SameSite=Strict keeps other
 * sites' pages from sending it. The token itself is never logged, echoed or kept in the
 * address bar (the redirect replaces it; `Referrer-Policy: no-referrer` keeps it out of
 * Referer headers). curl may instead send `Authorization: Bearer ADMIN`.
 */
#include "server.h"
#include "dashboard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>

#define COOKIE_NAME     "sluice_dashboard"
#define SESSION_BYTES   32
#define SESSION_HEX     (2 * SESSION_BYTES)
#define TOKEN_MAX_BYTES 4096
#define INITIAL_AGENTS  200
#define INITIAL_MARKER  "<!--initial-->"

/* The page may load from and connect to its own origin only; nothing inline, no frames,
 * no plugins, no form posting elsewhere. */
static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                          "form-action 'self'; frame-ancestors 'none'";

struct sl_dashboard {
    char session[SESSION_HEX + 1]; /* the cookie's value */
    char *issued_for;              /* the admin token it was issued under */
};

void sl__dashboard_free(sl_server_t *srv)
{
    if (!srv->dashboard) return;
    free(srv->dashboard->issued_for);
    free(srv->dashboard);
    srv->dashboard = NULL;
}

static const sl_dashboard_asset_t *asset(const char *name)
{
    for (size_t i = 0; i < sl__dashboard_n_assets; i++)
        if (!strcmp(sl__dashboard_assets[i].name, name)) return &sl__dashboard_assets[i];
    return NULL;
}

static void security_headers(sl_hreq_t *req)
{
    sl_hreq_add_header(req, "Content-Security-Policy", csp);
    sl_hreq_add_header(req, "X-Content-Type-Options", "nosniff");
    sl_hreq_add_header(req, "Referrer-Policy", "no-referrer");
}

/* ---- the session ------------------------------------------------------------------ */

/* Makes (or keeps) the session key for the admin token in force. Returns the key, or
 * NULL when no randomness or memory could be had (nothing is issued then). */
static const char *session_issue(sl_server_t *srv)
{
    const char *admin = srv->config.admin_token;
    sl_dashboard_t *d = srv->dashboard;
    if (d && sl__token_equal(d->issued_for, admin)) return d->session;
    sl__dashboard_free(srv);
    unsigned char raw[SESSION_BYTES];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(raw, 1, sizeof(raw), f) : 0;
    if (f) fclose(f);
    if (got != sizeof(raw)) return NULL;
    d = calloc(1, sizeof(*d));
    if (!d || !(d->issued_for = strdup(admin))) {
        free(d);
        return NULL;
    }
    for (size_t i = 0; i < SESSION_BYTES; i++)
        snprintf(d->session + 2 * i, 3, "%02x", raw[i]);
    srv->dashboard = d;
    return d->session;
}

/* True when the request carries the session cookie of the admin token in force. */
static bool session_valid(const sl_call_t *call)
{
    const sl_server_t *srv = call->srv;
    const sl_dashboard_t *d = srv->dashboard;
    const char *admin = srv->config.admin_token;
    if (!d || !admin || !sl__token_equal(d->issued_for, admin)) return false;
    bool ok = false;
    for (size_t i = 0; i < sl_hreq_header_count(call->req); i++) {
        const char *name, *v;
        sl_hreq_header_at(call->req, i, &name, &v);
        if (strcasecmp(name, "Cookie") != 0) continue;
        while (*v) { /* "a=1; sluice_dashboard=KEY; b=2" */
            while (*v == ' ' || *v == ';')
                v++;
            size_t n = strcspn(v, ";");
            size_t name_len = sizeof(COOKIE_NAME) - 1;
            if (n == name_len + 1 + SESSION_HEX && !strncmp(v, COOKIE_NAME "=", name_len + 1)) {
                char value[SESSION_HEX + 1];
                memcpy(value, v + name_len + 1, SESSION_HEX);
                value[SESSION_HEX] = '\0';
                ok |= sl__token_equal(value, d->session);
            }
            v += n;
        }
    }
    return ok;
}

static bool bearer_is_admin(const sl_call_t *call)
{
    const char *admin = call->srv->config.admin_token;
    const char *h = sl_hreq_header(call->req, "Authorization");
    if (!admin || !h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ')
        h++;
    return sl__token_equal(h, admin);
}

/* The `token` parameter of a query, decoded into `out` (cap bytes). Returns false when
 * there is none (or it does not fit). */
static bool query_token(const char *query, char *out, size_t cap)
{
    for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, "token=", 6) != 0) continue;
        size_t n = strcspn(p + 6, "&");
        if (n >= cap) return false;
        char raw[TOKEN_MAX_BYTES];
        memcpy(raw, p + 6, n);
        raw[n] = '\0';
        size_t dlen = 0;
        char *dec = evhttp_uridecode(raw, 0, &dlen);
        bool ok = dec && dlen < cap && strlen(dec) == dlen;
        if (ok) memcpy(out, dec, dlen + 1);
        free(dec);
        return ok;
    }
    return false;
}

/* ---- answers ---------------------------------------------------------------------- */

static void serve(sl_call_t *call, const sl_dashboard_asset_t *a, int status)
{
    sl_hreq_t *req = call->req;
    security_headers(req);
    if (status != 200) { /* the login page: never cached, never a 304 */
        sl_hreq_add_header(req, "Cache-Control", "no-store");
        sl_hreq_reply(req, status, a->content_type, a->data, a->len);
    } else {
        /* Revalidated every time: a new sluiced binary may bring a new page. */
        sl_hreq_add_header(req, "Cache-Control", "no-cache");
        sl_hreq_add_header(req, "ETag", a->etag);
        const char *inm = sl_hreq_header(req, "If-None-Match");
        if (inm && strstr(inm, a->etag))
            sl_hreq_reply(req, 304, NULL, "", 0);
        else
            sl_hreq_reply(req, 200, a->content_type, a->data, a->len);
    }
    call->req = NULL;
    sl__call_free(call);
}

/* ---- the page with its data ------------------------------------------------------ */

/* Answers index.html with `initial` (stolen) written where the page has INITIAL_MARKER. */
static void serve_page(sl_call_t *call, json_t *initial)
{
    const sl_dashboard_asset_t *a = asset("index.html");
    char *js = initial ? json_dumps(initial, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(initial);
    const char *page_text = (const char *)a->data, *mark = NULL;
    size_t mlen = sizeof(INITIAL_MARKER) - 1;
    for (size_t i = 0; !mark && i + mlen <= a->len; i++)
        if (!memcmp(page_text + i, INITIAL_MARKER, mlen)) mark = page_text + i;
    if (!js || !mark || !call->req) { /* out of memory, or gone: the page fetches its data */
        free(js);
        if (call->req) serve(call, a, 200);
        else sl__call_free(call);
        return;
    }
    struct evbuffer *out = evbuffer_new();
    if (!out) {
        free(js);
        serve(call, a, 200);
        return;
    }
    size_t before = (size_t)(mark - page_text);
    evbuffer_add(out, page_text, before);
    evbuffer_add_printf(out, "<script id=\"initial\" type=\"application/json\">");
    for (const char *p = js; *p; p++) { /* '<' only inside JSON strings: \u003c there */
        if (*p == '<') evbuffer_add(out, "\\u003c", 6);
        else evbuffer_add(out, p, 1);
    }
    evbuffer_add_printf(out, "</script>");
    size_t after = before + mlen;
    evbuffer_add(out, page_text + after, a->len - after);
    free(js);
    sl_hreq_t *req = call->req;
    security_headers(req);
    sl_hreq_add_header(req, "Cache-Control", "no-store");
    size_t len = evbuffer_get_length(out);
    sl_hreq_reply(req, 200, a->content_type, (const char *)evbuffer_pullup(out, -1), len);
    evbuffer_free(out);
    call->req = NULL;
    sl__call_free(call);
}

typedef struct page_fetch {
    sl_call_t *call;
    json_t *pools;
} page_fetch_t;

static void on_page_agents(int rc, const sl_agent_info_t *agents, size_t n, void *ud)
{
    page_fetch_t *pf = ud;
    json_t *arr = json_array();
    for (size_t i = 0; arr && rc == SL_OK && i < n && i < INITIAL_AGENTS; i++)
        json_array_append_new(arr, sl__agent_json(pf->call->srv, &agents[i]));
    json_t *hist = sl__history_json(pf->call->srv, 0, 0, false);
    json_t *initial = json_pack("{s:o,s:o,s:o}", "pools", pf->pools ? pf->pools : json_array(),
                                "agents", arr ? arr : json_array(), "history",
                                hist ? hist : json_null());
    sl_call_t *call = pf->call;
    free(pf);
    serve_page(call, initial);
}

static void on_page_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg,
                          void *ud)
{
    page_fetch_t *pf = ud;
    (void)errmsg;
    pf->pools = json_array();
    for (size_t i = 0; pf->pools && rc == SL_OK && i < n; i++)
        json_array_append_new(pf->pools, sl__pool_json(pf->call->srv->backend, &pools[i]));
    sl_backend_agents(pf->call->srv->backend, on_page_agents, pf);
}

/* GET / for a reader: the page, once the pools and agents it inlines are read. A
 * revalidation (If-None-Match) is not answered 304: the data is new every time. */
static void page(sl_call_t *call)
{
    page_fetch_t *pf = calloc(1, sizeof(*pf));
    if (!pf) {
        serve(call, asset("index.html"), 200);
        return;
    }
    pf->call = call;
    sl_backend_pools(call->srv->backend, NULL, on_page_pools, pf);
}

static void login_redirect(sl_call_t *call)
{
    const char *key = session_issue(call->srv);
    if (!key) {
        sl__reply_error(call, 503, "out_of_memory",
                        "dashboard: no session key could be made (no /dev/urandom or memory)");
        return;
    }
    char cookie[128];
    snprintf(cookie, sizeof(cookie), COOKIE_NAME "=%s; Path=/; HttpOnly; SameSite=Strict", key);
    sl_hreq_t *req = call->req;
    security_headers(req);
    sl_hreq_add_header(req, "Cache-Control", "no-store");
    sl_hreq_add_header(req, "Set-Cookie", cookie);
    sl_hreq_add_header(req, "Location", "/");
    sl_hreq_reply(req, 303, NULL, "", 0);
    call->req = NULL;
    sl__call_free(call);
}

static void handle(sl_call_t *call, const char *file, const char *query)
{
    const sl_dashboard_asset_t *a = asset(file);
    if (!a || !strcmp(file, "login.html")) {
        sl__reply_error(call, 404, "not_found",
                        "path: /dashboard/%.128s is not a file of the dashboard", file);
        return;
    }
    if (call->method != SL_HTTP_GET) {
        sl_hreq_add_header(call->req, "Allow", "GET");
        sl__reply_error(call, 405, "method_not_allowed", "method: this path allows GET");
        return;
    }
    const sl_config_t *c = &call->srv->config;
    if (!sl_config_auth_enabled(c) || bearer_is_admin(call) || session_valid(call)) {
        if (!strcmp(file, "index.html")) page(call);
        else serve(call, a, 200);
        return;
    }
    /* Only the page's own address takes the token; it is never echoed back. */
    char token[TOKEN_MAX_BYTES];
    if (!strcmp(file, "index.html") && query_token(query, token, sizeof(token)) && c->admin_token &&
        sl__token_equal(token, c->admin_token)) {
        login_redirect(call);
        return;
    }
    serve(call, asset("login.html"), 401);
}

bool sl__dashboard_route(sl_call_t *call, int n, char **seg, const char *query)
{
    if (n == 0) {
        handle(call, "index.html", query);
        return true;
    }
    if (strcmp(seg[0], "dashboard") != 0) return false;
    if (n != 2) {
        sl__reply_error(call, 404, "not_found", "path: '%.256s' is not a file of the dashboard",
                        sl_hreq_target(call->req));
        return true;
    }
    handle(call, seg[1], query);
    return true;
}

/* The read endpoints the page uses; `*` matches any one segment. */
static const struct {
    int n;
    const char *seg[3];
} readable[] = {
    {2, {"v1", "pools"}},  {3, {"v1", "pools", "*"}},  {2, {"v1", "agents"}}, {2, {"v1", "events"}},
    {2, {"v1", "limits"}}, {3, {"v1", "limits", "*"}}, {2, {"v1", "tasks"}},  {2, {"v1", "fleet"}},
    {2, {"v1", "history"}},
};

bool sl__dashboard_authenticate(sl_call_t *call, int n, char **seg)
{
    if (!sl_config_auth_enabled(&call->srv->config) || call->method != SL_HTTP_GET ||
        sl_hreq_header(call->req, "Authorization"))
        return false;
    bool listed = false;
    for (size_t i = 0; !listed && i < sizeof(readable) / sizeof(readable[0]); i++) {
        listed = readable[i].n == n;
        for (int k = 0; listed && k < n; k++)
            listed = !strcmp(readable[i].seg[k], "*") || !strcmp(readable[i].seg[k], seg[k]);
    }
    if (!listed || !session_valid(call)) return false;
    call->admin = true;
    return true;
}
