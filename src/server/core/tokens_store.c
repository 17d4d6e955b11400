/* tokens_store.c - minted agent tokens: made and revoked through the admin API, kept hashed on
 * disk.
 *
 * The store is one JSON file (auth.minted_file, by default "<state_file>.tokens"):
 * {"version":1,"tokens":[{"id","sha256","agent"|"agent_prefix","tier","created","bounds"}]}.
 * Never the token itself: a mint answers the token once and keeps its SHA-256.
 *
 * Durability: every mint and revoke rewrites the whole file (a temporary file, fdatasync,
 * rename over the old one, fsync of the directory) before it is answered, so an answered
 * mint survives a crash and a power failure, and a crash mid-write leaves the old file
 * whole. The state file's journal is fsynced at most every state_fsync_interval_s; a
 * token's owner cannot ask for it again, so this file is synced on every change. A
 * change whose write fails is undone in memory and answered 500: a refused request
 * changes nothing.
 *
 * Bounds: at most auth.max_minted_tokens live tokens (10,000 by default); one more is
 * refused with the key and its value. A revoked token leaves the index at once (401 from
 * then on) but its memory is kept RETIRE_KEEP_S, as a call that authenticated with it may
 * still be reading its body or waiting in the queue, then freed.
 */
#include "tokens_store.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#define STORE_VERSION      1
#define STORE_PATH_BYTES   4096
#define SECRET_BYTES       32
#define SECRET_PREFIX      "slt_"
#define RETIRE_KEEP_S      900.0 /* past the longest hold (proxy.max_hold_s 540, max_hold_s) */
#define MAX_RETIRED_ARRAYS 16    /* reloads' token arrays kept at once: the oldest goes first */

struct sl_token_store {
    char *path;              /* NULL: minting is off (no minted_file, no state_file) */
    int64_t max;             /* auth.max_minted_tokens */
    sl_token_rule_t **rules; /* live tokens, each allocated on its own (stable pointers) */
    size_t n;
    sl_token_index_t *index;   /* sized for the larger of max and n */
    sl_token_rule_t **retired; /* revoked, freed RETIRE_KEEP_S after */
    size_t n_retired;
    sl_file_stamp_t refused; /* the tokens_file version a reload last refused */
    struct retired_array {   /* a replaced configuration's tokens, freed RETIRE_KEEP_S after */
        sl_token_rule_t *rules;
        size_t n;
        double retired_s;
    } arrays[MAX_RETIRED_ARRAYS];
    size_t n_arrays;
};

sl_file_stamp_t *sl__token_store_refused_stamp(sl_token_store_t *s)
{
    return &s->refused;
}

static double unix_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static void rule_free(sl_token_rule_t *r)
{
    if (!r) return;
    sl__token_rule_clear(r);
    free(r);
}

static void free_array(struct retired_array *a)
{
    for (size_t i = 0; i < a->n; i++)
        sl__token_rule_clear(&a->rules[i]);
    free(a->rules);
}

/* ---- the file --------------------------------------------------------------------- */

static json_t *rule_record(const sl_token_rule_t *r)
{
    char sha[2 * SL_TOKEN_SHA256_BYTES + 1];
    hex(r->meta.sha256, SL_TOKEN_SHA256_BYTES, sha);
    json_t *o = json_pack("{s:s, s:s, s:f, s:o}", "id", r->meta.id, "sha256", sha, "created",
                          r->meta.created_s, "bounds", sl__token_bounds_json(&r->meta.own));
    if (!o) return NULL;
    if (r->agent) json_object_set_new(o, "agent", json_string(r->agent));
    if (r->agent_prefix) json_object_set_new(o, "agent_prefix", json_string(r->agent_prefix));
    if (r->meta.tier) json_object_set_new(o, "tier", json_string(r->meta.tier));
    return o;
}

/* Writes every live token to the file, atomically and durably. */
static int save(const sl_token_store_t *s, char *err, size_t errlen)
{
    json_t *list = json_array(),
           *doc = json_pack("{s:i, s:o}", "version", STORE_VERSION, "tokens", list);
    char *text = NULL, tmp[STORE_PATH_BYTES];
    int fd = -1, rc = -1;
    for (size_t i = 0; doc && i < s->n; i++)
        if (json_array_append_new(list, rule_record(s->rules[i])) < 0) goto done;
    if (!doc || !(text = json_dumps(doc, JSON_COMPACT))) {
        errno = ENOMEM;
        goto done;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", s->path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) goto done;
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto done;
        off += (size_t)w;
    }
    if (fdatasync(fd) < 0 || close(fd) < 0) {
        fd = -1;
        goto done;
    }
    fd = -1;
    if (rename(tmp, s->path) < 0 || sl_backend_sync_dir(s->path) < 0) goto done;
    rc = 0;
done:
    if (rc < 0) snprintf(err, errlen, "%s: cannot write: %s", s->path, strerror(errno));
    if (fd >= 0) close(fd);
    free(text);
    json_decref(doc);
    return rc;
}

/* One record of the file into a new rule, resolved against `cfg`. */
static sl_token_rule_t *rule_from_record(json_t *rec, const sl_token_config_t *cfg, char *what,
                                         size_t whatlen)
{
    sl_token_rule_t *r = calloc(1, sizeof(*r));
    const char *id = json_string_value(json_object_get(rec, "id"));
    const char *sha = json_string_value(json_object_get(rec, "sha256"));
    const char *agent = json_string_value(json_object_get(rec, "agent"));
    const char *prefix = json_string_value(json_object_get(rec, "agent_prefix"));
    const char *tier = json_string_value(json_object_get(rec, "tier"));
    json_t *bounds = json_object_get(rec, "bounds");
    if (!r) return snprintf(what, whatlen, "out of memory"), NULL;
    r->meta.source = SL_TOKEN_MINTED;
    r->meta.created_s = json_number_value(json_object_get(rec, "created"));
    if (!id || !sha || sl__token_sha256_parse(sha, r->meta.sha256) < 0 || !agent == !prefix) {
        snprintf(what, whatlen, "a record without its id, sha256 and agent or agent_prefix");
        goto fail;
    }
    if (!(r->meta.id = strdup(id)) || (agent && !(r->agent = strdup(agent))) ||
        (prefix && !(r->agent_prefix = strdup(prefix))) ||
        (tier && !(r->meta.tier = strdup(tier)))) {
        snprintf(what, whatlen, "out of memory");
        goto fail;
    }
    const char *k;
    json_t *v;
    json_object_foreach(bounds, k, v)
    {
        char why[300];
        if (sl__token_bound_set_json(&r->meta.own, k, v, why, sizeof why) < 0) {
            snprintf(what, whatlen, "token %s: bounds.%s: %s", id, k, why);
            goto fail;
        }
    }
    char why[400];
    if (sl__token_resolve(r, cfg, why, sizeof why) < 0) {
        snprintf(what, whatlen, "token %s: %s", id, why);
        goto fail;
    }
    return r;
fail:
    rule_free(r);
    return NULL;
}

static int load(sl_token_store_t *s, const sl_token_config_t *cfg, char *err, size_t errlen)
{
    json_error_t je;
    FILE *f = fopen(s->path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0; /* nothing minted yet */
        return snprintf(err, errlen, "%s: cannot open: %s", s->path, strerror(errno)), -1;
    }
    json_t *doc = json_loadf(f, 0, &je);
    fclose(f);
    json_t *list = json_object_get(doc, "tokens");
    int rc = -1;
    if (!doc || json_integer_value(json_object_get(doc, "version")) != STORE_VERSION ||
        !json_is_array(list)) {
        snprintf(err, errlen, "%s: not a minted-token file of version %d%s%s", s->path,
                 STORE_VERSION, doc ? "" : ": ", doc ? "" : je.text);
        goto done;
    }
    size_t i;
    json_t *rec;
    json_array_foreach(list, i, rec)
    {
        char what[512];
        sl_token_rule_t *r = rule_from_record(rec, cfg, what, sizeof what);
        if (!r) {
            snprintf(err, errlen, "%s: record %zu: %s", s->path, i, what);
            goto done;
        }
        sl_token_rule_t **grown = realloc(s->rules, (s->n + 1) * sizeof(*grown));
        if (!grown) {
            rule_free(r);
            snprintf(err, errlen, "%s: out of memory", s->path);
            goto done;
        }
        s->rules = grown;
        s->rules[s->n++] = r;
    }
    rc = 0;
done:
    json_decref(doc);
    return rc;
}

/* (Re)builds the index for the larger of max and n. */
static int reindex(sl_token_store_t *s)
{
    size_t room = (size_t)s->max > s->n ? (size_t)s->max : s->n;
    sl_token_index_t *ix = sl__token_index_new(room);
    if (!ix) return -1;
    for (size_t i = 0; i < s->n; i++)
        if (sl__token_index_add(ix, s->rules[i], NULL) < 0) {
            sl__token_index_free(ix);
            return -1;
        }
    sl__token_index_free(s->index);
    s->index = ix;
    return 0;
}

sl_token_store_t *sl__token_store_open(const sl_token_config_t *cfg, char *err, size_t errlen)
{
    sl_token_store_t *s = calloc(1, sizeof(*s));
    if (!s || (cfg->minted_file && !(s->path = strdup(cfg->minted_file)))) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->max = cfg->max_minted;
    if ((s->path && load(s, cfg, err, errlen) < 0)) goto fail;
    if (reindex(s) < 0) {
        snprintf(err, errlen, "%s: a token is in the file twice, or out of memory",
                 s->path ? s->path : "minted tokens");
        goto fail;
    }
    return s;
fail:
    sl__token_store_free(s);
    return NULL;
}

void sl__token_store_free(sl_token_store_t *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        rule_free(s->rules[i]);
    for (size_t i = 0; i < s->n_retired; i++)
        rule_free(s->retired[i]);
    for (size_t i = 0; i < s->n_arrays; i++)
        free_array(&s->arrays[i]);
    free(s->rules);
    free(s->retired);
    sl__token_index_free(s->index);
    free(s->path);
    free(s);
}

sl_token_rule_t *sl__token_store_find(const sl_token_store_t *s,
                                      const unsigned char sha[SL_TOKEN_SHA256_BYTES])
{
    return s ? sl__token_index_find(s->index, sha) : NULL;
}

sl_token_rule_t *const *sl__token_store_rules(const sl_token_store_t *s, size_t *n)
{
    *n = s ? s->n : 0;
    return s ? s->rules : NULL;
}

/* Frees the revoked tokens, and the replaced configurations' ones, no call can still hold. */
static void sweep_retired(sl_token_store_t *s, double now_s)
{
    size_t arrays = 0;
    for (size_t i = 0; i < s->n_arrays; i++) {
        if (now_s - s->arrays[i].retired_s >= RETIRE_KEEP_S)
            free_array(&s->arrays[i]);
        else
            s->arrays[arrays++] = s->arrays[i];
    }
    s->n_arrays = arrays;
    size_t kept = 0;
    for (size_t i = 0; i < s->n_retired; i++) {
        if (now_s - s->retired[i]->meta.retired_s >= RETIRE_KEEP_S)
            rule_free(s->retired[i]);
        else
            s->retired[kept++] = s->retired[i];
    }
    s->n_retired = kept;
}

/* ---- mint and revoke ------------------------------------------------------------- */

static int refuse(sl_token_refusal_t *ref, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(sl_token_refusal_t *ref, int status, const char *type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ref->message, sizeof ref->message, fmt, ap);
    va_end(ap);
    ref->status = status;
    ref->type = type;
    return -1;
}

/* An agent name or prefix as a mint may give it: 1-128 characters. */
static int name_field(json_t *v, const char *field, char **out, sl_token_refusal_t *ref)
{
    const char *s = json_string_value(v);
    if (!s || !*s || strlen(s) > 128)
        return refuse(ref, 400, "invalid_request", "%s: expected a name of 1-128 characters",
                      field);
    if (!(*out = strdup(s))) return refuse(ref, 500, "internal", "%s: out of memory", field);
    return 0;
}

/* The rule a mint body asks for (everything but the secret), resolved against `cfg`. */
static sl_token_rule_t *rule_from_body(json_t *body, const sl_token_config_t *cfg,
                                       sl_token_refusal_t *ref)
{
    sl_token_rule_t *r = calloc(1, sizeof(*r));
    if (!r) return refuse(ref, 500, "internal", "out of memory"), NULL;
    r->meta.source = SL_TOKEN_MINTED;
    if (!json_is_object(body)) {
        refuse(ref, 400, "invalid_request", "body: expected a JSON object");
        goto fail;
    }
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        char what[400];
        int rc = 0;
        if (!strcmp(k, "agent"))
            rc = name_field(v, "agent", &r->agent, ref);
        else if (!strcmp(k, "agent_prefix"))
            rc = name_field(v, "agent_prefix", &r->agent_prefix, ref);
        else if (!strcmp(k, "tier"))
            rc = name_field(v, "tier", &r->meta.tier, ref);
        else if ((rc = sl__token_bound_set_json(&r->meta.own, k, v, what, sizeof what)) < 0)
            rc = rc == -2 ? refuse(ref, 400, "invalid_request",
                                   "%s: %s; and agent, agent_prefix, tier", k, what)
                          : refuse(ref, 400, "invalid_request", "%s: %s", k, what);
        if (rc < 0) goto fail;
    }
    if (!r->agent == !r->agent_prefix) {
        refuse(ref, 400, "invalid_request", "agent: give exactly one of `agent` or `agent_prefix`");
        goto fail;
    }
    char what[400];
    if (sl__token_resolve(r, cfg, what, sizeof what) < 0) {
        refuse(ref, 400, "invalid_request", "%s", what);
        goto fail;
    }
    return r;
fail:
    rule_free(r);
    return NULL;
}

json_t *sl__token_store_mint(sl_token_store_t *s, const sl_token_config_t *cfg, json_t *body,
                             sl_token_refusal_t *ref)
{
    double now = unix_now_s();
    sweep_retired(s, now);
    if (!s->path) {
        refuse(ref, 409, "conflict",
               "auth.minted_file: minted tokens must survive a restart, and no file is set for "
               "them (set auth.minted_file, or state_file for the default next to it)");
        return NULL;
    }
    if ((int64_t)s->n >= s->max) {
        refuse(ref, 409, "conflict",
               "auth.max_minted_tokens: %lld minted tokens exist, the most there may be; revoke "
               "some (DELETE /v1/admin/tokens/ID) or raise auth.max_minted_tokens",
               (long long)s->max);
        return NULL;
    }
    sl_token_rule_t *r = rule_from_body(body, cfg, ref);
    if (!r) return NULL;
    unsigned char raw[SECRET_BYTES], idraw[8];
    char secret[sizeof SECRET_PREFIX + 2 * SECRET_BYTES], id[4 + 2 * sizeof idraw + 1];
    sl_token_rule_t **grown = realloc(s->rules, (s->n + 1) * sizeof(*grown));
    if (!grown || RAND_bytes(raw, sizeof raw) != 1 || RAND_bytes(idraw, sizeof idraw) != 1) {
        rule_free(r);
        refuse(ref, 500, "internal", "tokens: no memory or no randomness for a new token");
        return NULL;
    }
    s->rules = grown;
    memcpy(secret, SECRET_PREFIX, sizeof SECRET_PREFIX - 1);
    hex(raw, sizeof raw, secret + sizeof SECRET_PREFIX - 1);
    memcpy(id, "tok_", 4);
    hex(idraw, sizeof idraw, id + 4);
    sl__token_sha256(secret, r->meta.sha256);
    r->meta.created_s = now;
    if (!(r->meta.id = strdup(id)) || sl__token_index_add(s->index, r, NULL) < 0) {
        rule_free(r);
        refuse(ref, 500, "internal", "tokens: out of memory");
        return NULL;
    }
    s->rules[s->n++] = r;
    char err[STORE_PATH_BYTES + 128];
    if (save(s, err, sizeof err) < 0) { /* undone: a refused mint changes nothing */
        s->n--;
        sl__token_index_remove(s->index, r);
        rule_free(r);
        refuse(ref, 500, "internal", "auth.minted_file: %s", err);
        return NULL;
    }
    json_t *answer = sl__token_rule_json(r);
    json_object_set_new(answer, "token", json_string(secret));
    OPENSSL_cleanse(secret, sizeof secret);
    OPENSSL_cleanse(raw, sizeof raw);
    return answer;
}

int sl__token_store_revoke(sl_token_store_t *s, const char *id, sl_token_refusal_t *ref,
                           sl_token_rule_t **revoked)
{
    double now = unix_now_s();
    sweep_retired(s, now);
    size_t i = 0;
    while (i < s->n && strcmp(s->rules[i]->meta.id, id) != 0)
        i++;
    if (i == s->n) return refuse(ref, 404, "not_found", "id: '%.128s' is not a minted token", id);
    sl_token_rule_t **grown = realloc(s->retired, (s->n_retired + 1) * sizeof(*grown));
    if (!grown) return refuse(ref, 500, "internal", "tokens: out of memory");
    s->retired = grown;
    sl_token_rule_t *r = s->rules[i];
    s->rules[i] = s->rules[--s->n];
    char err[STORE_PATH_BYTES + 128];
    if (save(s, err, sizeof err) < 0) { /* undone: the token still works */
        s->rules[s->n++] = s->rules[i];
        s->rules[i] = r;
        return refuse(ref, 500, "internal", "auth.minted_file: %s", err);
    }
    sl__token_index_remove(s->index, r);
    r->meta.retired_s = now;
    s->retired[s->n_retired++] = r;
    *revoked = r;
    return 0;
}

sl_token_rule_t *sl__token_store_by_id(const sl_token_store_t *s, const char *id)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (!strcmp(s->rules[i]->meta.id, id)) return s->rules[i];
    return NULL;
}

/* ---- reload ------------------------------------------------------------------------ */

int sl__token_store_check(const sl_token_store_t *s, const sl_token_config_t *next, char *err,
                          size_t errlen)
{
    for (size_t i = 0; s && i < s->n; i++) {
        sl_token_rule_t probe = *s->rules[i];
        /* Resolved on a copy whose lists are not the rule's: only the verdict is kept. */
        probe.roles = probe.pools = probe.priorities = NULL;
        probe.n_roles = probe.n_pools = probe.n_priorities = 0;
        char what[400];
        int rc = sl__token_resolve(&probe, next, what, sizeof what);
        for (size_t k = 0; k < probe.n_roles; k++)
            free(probe.roles[k]);
        for (size_t k = 0; k < probe.n_pools; k++)
            free(probe.pools[k]);
        for (size_t k = 0; k < probe.n_priorities; k++)
            free(probe.priorities[k]);
        free(probe.roles), free(probe.pools), free(probe.priorities);
        if (rc < 0) {
            snprintf(err, errlen, "minted token %s (%s): %s", s->rules[i]->meta.id,
                     s->path ? s->path : "", what);
            return -1;
        }
    }
    return 0;
}

void sl__token_store_reconfigure(sl_token_store_t *s, const sl_token_config_t *cfg)
{
    for (size_t i = 0; i < s->n; i++) {
        char what[400];
        if (sl__token_resolve(s->rules[i], cfg, what, sizeof what) < 0)
            sl__log(SL_LOG_WARN, "reload: minted token %s keeps its bounds: %s",
                    s->rules[i]->meta.id, what);
    }
    if (cfg->max_minted != s->max) {
        int64_t was = s->max;
        s->max = cfg->max_minted;
        if (reindex(s) < 0) {
            s->max = was;
            sl__log(SL_LOG_WARN, "reload: auth.max_minted_tokens keeps %lld (out of memory)",
                    (long long)was);
        }
    }
    if ((cfg->minted_file == NULL) != (s->path == NULL) ||
        (cfg->minted_file && strcmp(cfg->minted_file, s->path) != 0))
        sl__log(SL_LOG_WARN, "reload: auth.minted_file changes need a restart; keeping %s",
                s->path ? s->path : "none");
}

void sl__token_store_retire_rules(sl_token_store_t *s, sl_token_rule_t *rules, size_t n)
{
    double now = unix_now_s();
    sweep_retired(s, now);
    if (s->n_arrays == MAX_RETIRED_ARRAYS) { /* many reloads in 15 minutes: the oldest goes */
        free_array(&s->arrays[0]);
        memmove(s->arrays, s->arrays + 1, (MAX_RETIRED_ARRAYS - 1) * sizeof(s->arrays[0]));
        s->n_arrays--;
    }
    s->arrays[s->n_arrays++] = (struct retired_array){rules, n, now};
}
