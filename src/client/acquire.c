/* sl_acquire: ask sluiced for a lease and wait for it without giving up the turn.
 *
 * The order of a wait matters more than its length (docs/design.md, "Agents: waiting,
 * checkpoints, backoff"): the agent's
 * checkpoint is saved before the first wait, the wait callback hears every fresh ETA,
 * a queued request keeps its place by long-polling its ticket, and a rejected one
 * comes back at retry_at. One request_id covers transport retries of the same POST
 * so a retried acquire is never charged twice; after a reject or a lost ticket the
 * next POST is a new request and gets a new id. Any transport failure switches the
 * client to local mode at once (fail-open), so a dead sluiced costs at most one
 * connect timeout.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void sl_acquire_req_init(sl_acquire_req_t *req)
{
    memset(req, 0, sizeof(*req));
    req->max_wait_s = SL_WAIT_FOREVER;
}

double sl__cl_wait_left_s(const sl__cl_acq_t *acq)
{
    if (acq->req->max_wait_s < 0) return HUGE_VAL;
    double left_s = acq->req->max_wait_s - (sl__cl_now_mono_s() - acq->started_s);
    return left_s > 0 ? left_s : 0;
}

int sl__cl_before_wait(sl_client_t *c, sl__cl_acq_t *acq, sl_wait_kind_t kind, double eta_s,
                       int64_t position, const char *reason)
{
    const sl_acquire_req_t *req = acq->req;
    if (!acq->checkpoint_saved && req->checkpoint && req->checkpoint_path) {
        int rc = sl_checkpoint_set_request_id(req->checkpoint, acq->lease->request_id);
        if (rc == 0) rc = sl_checkpoint_save(req->checkpoint, req->checkpoint_path);
        if (rc < 0)
            return sl__cl_fail(c, rc, "saving the checkpoint before waiting: %s",
                               sl_checkpoint_errmsg(req->checkpoint));
        acq->checkpoint_saved = 1;
    }
    if (req->on_wait) {
        sl_wait_t w = {kind,   eta_s, position, reason, sl__cl_now_mono_s() - acq->started_s,
                       c->mode};
        if (req->on_wait(req->wait_userdata, &w) != 0)
            return sl__cl_fail(c, SL_ECANCELED, "the wait callback gave up the wait");
    }
    return 0;
}

static int check_request(sl_client_t *c, const sl_acquire_req_t *req)
{
    if (req->input_tokens < 0 || req->output_tokens < 0 || req->cached_tokens < 0 ||
        req->unblocks < 0)
        return sl__cl_fail(c, SL_EARG,
                           "token counts and unblocks must be >= 0 (input_tokens %lld, "
                           "cached_tokens %lld, output_tokens %lld, unblocks %lld)",
                           (long long)req->input_tokens, (long long)req->cached_tokens,
                           (long long)req->output_tokens, (long long)req->unblocks);
    if (!isfinite(req->max_wait_s) || (req->max_wait_s < 0 && req->max_wait_s != SL_WAIT_FOREVER))
        return sl__cl_fail(c, SL_EARG, "max_wait_s %g: expected >= 0 or SL_WAIT_FOREVER",
                           req->max_wait_s);
    if (!isfinite(req->ttl_s) || req->ttl_s < 0)
        return sl__cl_fail(c, SL_EARG, "ttl_s %g: expected > 0, or 0 for the pool's", req->ttl_s);
    if (!isfinite(req->cache_ttl_s) || req->cache_ttl_s < 0)
        return sl__cl_fail(c, SL_EARG, "cache_ttl_s %g: expected > 0, or 0 for the pool's",
                           req->cache_ttl_s);
    if (req->request_id && (!*req->request_id || strlen(req->request_id) >= 40))
        return sl__cl_fail(c, SL_EARG, "request_id \"%s\": expected 1-39 characters",
                           req->request_id);
    return 0;
}

static json_t *lease_body(const sl_client_t *c, const sl_acquire_req_t *req, const char *rid,
                          double wait_s, double max_wait_s)
{
    json_t *b = json_object();
    if (!b) return NULL;
    int bad = 0;
    bad |= json_object_set_new(b, "agent", json_string(c->agent));
    bad |= json_object_set_new(b, "pool", json_string(c->pool));
    bad |= json_object_set_new(b, "role", json_string(c->role));
    bad |= json_object_set_new(b, "input_tokens", json_integer(req->input_tokens));
    bad |= json_object_set_new(b, "cached_tokens", json_integer(req->cached_tokens));
    bad |= json_object_set_new(b, "output_tokens", json_integer(req->output_tokens));
    bad |= json_object_set_new(b, "request_id", json_string(rid));
    if (req->task) bad |= json_object_set_new(b, "task", json_string(req->task));
    if (req->unblocks) bad |= json_object_set_new(b, "unblocks", json_integer(req->unblocks));
    if (req->priority) bad |= json_object_set_new(b, "priority", json_string(req->priority));
    if (req->cache_key) bad |= json_object_set_new(b, "cache_key", json_string(req->cache_key));
    if (req->ttl_s > 0) bad |= json_object_set_new(b, "ttl", json_real(req->ttl_s));
    if (req->cache_ttl_s > 0)
        bad |= json_object_set_new(b, "cache_ttl_s", json_real(req->cache_ttl_s));
    if (wait_s > 0) bad |= json_object_set_new(b, "wait", json_real(wait_s));
    if (max_wait_s > 0) bad |= json_object_set_new(b, "max_wait", json_real(max_wait_s));
    if (bad) {
        json_decref(b);
        return NULL;
    }
    return b;
}

static double num(json_t *o, const char *key, double dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static void copy_str(char *dst, size_t n, json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    snprintf(dst, n, "%s", s ? s : "");
}

static int take_grant(sl_client_t *c, sl__cl_acq_t *acq, json_t *body)
{
    sl_lease_t *lease = acq->lease;
    const char *id = json_string_value(json_object_get(body, "lease"));
    if (!id) return sl__cl_fail(c, SL_EPROTO, "a grant without a \"lease\" id");
    lease->status = SL_LEASE_GRANTED;
    lease->local = 0;
    snprintf(lease->id, sizeof(lease->id), "%s", id);
    lease->expires_at = num(body, "expires_at", 0);
    lease->ttl_s = num(body, "ttl", 0);
    lease->weight = num(body, "weight", 1);
    json_t *charged = json_object_get(body, "charged");
    lease->charged_input_tokens = (int64_t)num(charged, "input_tokens", 0);
    lease->charged_output_tokens = (int64_t)num(charged, "output_tokens", 0);
    lease->cache_penalty = json_is_true(json_object_get(body, "cache_penalty"));
    copy_str(lease->reason, sizeof(lease->reason), body, "reason");
    lease->retry_at = lease->retry_after_s = 0;
    sl__cl_learn_limits(c);
    return 0;
}

static char *escaped_path(sl_client_t *c, const char *prefix, const char *id, const char *suffix)
{
    char *esc = curl_easy_escape(c->curl, id, 0);
    if (!esc) return NULL;
    size_t n = strlen(prefix) + strlen(esc) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s%s", prefix, esc, suffix);
    curl_free(esc);
    return p;
}

static void give_up_ticket(sl_client_t *c, const char *ticket)
{
    char *path = escaped_path(c, "/v1/tickets/", ticket, "");
    sl__cl_http_answer_t a;
    if (path && sl__cl_http(c, "DELETE", path, NULL, c->opts.request_timeout_s, &a) == 0)
        sl__cl_http_answer_clear(&a);
    free(path);
}

enum { WAIT_GRANTED = 0, WAIT_ASK_AGAIN = 1, WAIT_TRANSPORT = 2 };

/* Long-polls a queued ticket. Returns WAIT_GRANTED, WAIT_ASK_AGAIN (the ticket is gone),
 * WAIT_TRANSPORT (sluiced unreachable; c->err says why) or a negative error. */
static int wait_ticket(sl_client_t *c, sl__cl_acq_t *acq, json_t *queued)
{
    sl_lease_t *lease = acq->lease;
    copy_str(lease->ticket, sizeof(lease->ticket), queued, "ticket");
    if (!lease->ticket[0]) return sl__cl_fail(c, SL_EPROTO, "a queued answer without a \"ticket\"");
    double eta_s = num(queued, "eta", 0);
    int64_t position = (int64_t)num(queued, "position", 0);
    char *path = escaped_path(c, "/v1/tickets/", lease->ticket, "");
    if (!path) return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    int rc;
    for (;;) {
        lease->status = SL_LEASE_QUEUED;
        lease->eta_s = eta_s;
        double left_s = sl__cl_wait_left_s(acq);
        if (left_s <= 0) {
            give_up_ticket(c, lease->ticket);
            rc = sl__cl_fail(c, SL_EMAXWAIT, "still queued (ticket %s, eta %.1f s) after %.1f s",
                             lease->ticket, eta_s, acq->req->max_wait_s);
            break;
        }
        rc = sl__cl_before_wait(c, acq, SL_WAIT_QUEUED, eta_s, position, NULL);
        if (rc < 0) {
            give_up_ticket(c, lease->ticket);
            break;
        }
        double wait_s = fmin(left_s, c->opts.poll_chunk_s);
        char query[64];
        snprintf(query, sizeof(query), "?wait=%.3f", wait_s);
        size_t n = strlen(path) + sizeof(query);
        char *url = malloc(n);
        if (!url) {
            rc = sl__cl_fail(c, SL_ENOMEM, "out of memory");
            break;
        }
        snprintf(url, n, "%s%s", path, query);
        sl__cl_http_answer_t a;
        rc = sl__cl_http(c, "GET", url, NULL, wait_s + c->opts.request_timeout_s, &a);
        free(url);
        if (rc == SL_EUNREACHABLE) {
            rc = WAIT_TRANSPORT;
            break;
        }
        if (rc < 0) break;
        if (a.status == 200) {
            rc = take_grant(c, acq, a.body);
        } else if (a.status == 202) {
            eta_s = num(a.body, "eta", eta_s);
            position = (int64_t)num(a.body, "position", position);
            sl__cl_http_answer_clear(&a);
            continue;
        } else if (a.status == 404) {
            rc = WAIT_ASK_AGAIN; /* expired, or granted and never claimed: ask anew */
        } else {
            rc = sl__cl_http_error(c, &a, "waiting on the ticket");
        }
        sl__cl_http_answer_clear(&a);
        break;
    }
    free(path);
    return rc;
}

/* Seconds to sleep after a reject: until retry_at by our clock, but never longer than
 * retry_after (an idempotent replay of an old reject carries an old retry_at). */
static double reject_wait_s(json_t *body)
{
    double retry_after_s = num(body, "retry_after", 1);
    double retry_at = num(body, "retry_at", 0);
    double until_s = retry_at - sl__cl_now_unix_s();
    if (retry_at > 0 && until_s < retry_after_s) return until_s > 0 ? until_s : 0;
    return retry_after_s > 0 ? retry_after_s : 0;
}

/* The `max_wait` to ask for: an acquire that saves a checkpoint loses nothing by waiting,
 * so it asks to be held queued (up to max_hold_s, and no longer than it will wait) rather
 * than rejected and left asleep until retry_at while capacity goes unused (issue 24 item
 * 5). 0: ask nothing, the pool's max_queue_wait_s applies. */
static double max_wait_to_ask_s(const sl_client_t *c, const sl__cl_acq_t *acq)
{
    const sl_acquire_req_t *req = acq->req;
    if (!req->checkpoint || !req->checkpoint_path) return 0;
    return fmin(c->opts.max_hold_s, sl__cl_wait_left_s(acq));
}

/* One coordinated attempt. Returns 0 (granted), WAIT_ASK_AGAIN, WAIT_TRANSPORT, or < 0. */
static int ask_sluiced(sl_client_t *c, sl__cl_acq_t *acq)
{
    const sl_acquire_req_t *req = acq->req;
    sl_lease_t *lease = acq->lease;
    /* Hold the POST open only when nothing has to happen before a wait. */
    int plain = !req->on_wait && !(req->checkpoint && req->checkpoint_path);
    double left_s = sl__cl_wait_left_s(acq);
    double hold_s = plain ? fmin(left_s, c->opts.poll_chunk_s) : 0;
    json_t *body = lease_body(c, req, lease->request_id, hold_s, max_wait_to_ask_s(c, acq));
    if (!body) return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    sl__cl_http_answer_t a;
    int rc = sl__cl_http(c, "POST", "/v1/leases", body, hold_s + c->opts.request_timeout_s, &a);
    json_decref(body);
    if (rc == SL_EUNREACHABLE) return WAIT_TRANSPORT;
    if (rc < 0) return rc;
    sl__cl_go_coordinated(c);
    if (a.status == 200) {
        rc = take_grant(c, acq, a.body);
    } else if (a.status == 202) {
        rc = wait_ticket(c, acq, a.body);
    } else if (a.status == 429 && json_is_object(a.body)) {
        lease->status = SL_LEASE_REJECTED;
        copy_str(lease->reason, sizeof(lease->reason), a.body, "reason");
        lease->retry_after_s = num(a.body, "retry_after", 0);
        lease->retry_at = num(a.body, "retry_at", 0);
        double wait_s = reject_wait_s(a.body);
        if (wait_s > sl__cl_wait_left_s(acq)) {
            rc =
                sl__cl_fail(c, SL_EREJECTED, "rejected (%s): retry after %.1f s, beyond max_wait_s",
                            lease->reason, wait_s);
        } else {
            rc = sl__cl_before_wait(c, acq, SL_WAIT_REJECTED, wait_s, 0, lease->reason);
            if (rc == 0) {
                /* A little jitter so the agents rejected together do not return together. */
                sl__cl_sleep_s(wait_s + fmin(0.25, 0.05 * wait_s) * sl__cl_rand01(&c->rng));
                rc = WAIT_ASK_AGAIN;
            }
        }
    } else {
        rc = sl__cl_http_error(c, &a, "POST /v1/leases");
    }
    sl__cl_http_answer_clear(&a);
    return rc;
}

static int sleep_out_backoff(sl_client_t *c, sl__cl_acq_t *acq)
{
    double wait_s = c->backoff_until_s - sl__cl_now_mono_s();
    if (wait_s <= 0) return 0;
    if (wait_s > sl__cl_wait_left_s(acq)) {
        acq->lease->status = SL_LEASE_REJECTED;
        acq->lease->retry_after_s = wait_s;
        acq->lease->retry_at = sl__cl_now_unix_s() + wait_s;
        snprintf(acq->lease->reason, sizeof(acq->lease->reason), "backoff");
        return sl__cl_fail(c, SL_EREJECTED, "backing off %.1f s after a 429, beyond max_wait_s",
                           wait_s);
    }
    int rc = sl__cl_before_wait(c, acq, SL_WAIT_BACKOFF, wait_s, 0, "backoff");
    if (rc < 0) return rc;
    sl__cl_sleep_s(wait_s);
    return 0;
}

int sl_acquire(sl_client_t *c, const sl_acquire_req_t *req, sl_lease_t *lease)
{
    if (!c || !req || !lease) return SL_EARG;
    memset(lease, 0, sizeof(*lease));
    c->err[0] = '\0';
    int rc = check_request(c, req);
    if (rc < 0) return rc;
    sl__cl_acq_t acq = {req, lease, sl__cl_now_mono_s(), 0};
    if (req->request_id)
        snprintf(lease->request_id, sizeof(lease->request_id), "%s", req->request_id);
    else
        sl__cl_random_hex(lease->request_id, 32);
    rc = sleep_out_backoff(c, &acq);
    while (rc == 0) {
        if (c->mode == SL_MODE_LOCAL) {
            rc = sl__cl_local_acquire(c, &acq);
            if (rc != 1) break;
            rc = 0; /* sluiced is back: ask it */
        }
        rc = ask_sluiced(c, &acq);
        if (rc == WAIT_ASK_AGAIN) {
            sl__cl_random_hex(lease->request_id, 32);
            rc = 0;
        } else if (rc == WAIT_TRANSPORT) {
            char why[512];
            snprintf(why, sizeof(why), "%s", c->err);
            rc = sl__cl_go_local(c, why);
        } else {
            break;
        }
    }
    lease->waited_s = sl__cl_now_mono_s() - acq.started_s;
    return rc;
}
