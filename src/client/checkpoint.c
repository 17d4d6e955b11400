/* Checkpoints: an agent's plan state saved atomically before it waits (docs/design.md,
 * "Agents: waiting, checkpoints, backoff").
 *
 * A wait must never force a re-plan. So before waiting the agent writes down the goal
 * and step, the files it read with their SHA-256, its decisions with one-line reasons,
 * and the exact next call; on resume only the files whose hash changed are re-read.
 * The file is JSON (format version 1, docs/client.md), written to a temporary file in
 * the same directory, fsync'ed, renamed over the old one and the directory fsync'ed,
 * so a crash leaves either the old or the new checkpoint, never half of one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "internal.h"
#include "../common/grow.h"

#define FORMAT_VERSION 1

typedef struct cp_file {
    char *path;
    char sha256[65];
    int64_t size_bytes;
    sl_file_state_t state;
} cp_file_t;

typedef struct cp_decision {
    char *decision;
    char *reason;
} cp_decision_t;

struct sl_checkpoint {
    char *goal, *step, *next_call, *request_id;
    double saved_at;
    cp_file_t *files;
    size_t n_files, cap_files;
    cp_decision_t *decisions;
    size_t n_decisions, cap_decisions;
    char err[512];
};

static int cp_fail(sl_checkpoint_t *cp, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int cp_fail(sl_checkpoint_t *cp, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cp->err, sizeof(cp->err), fmt, ap);
    va_end(ap);
    return code;
}

int sl_sha256_file(const char *path, char hex[65], char *err, size_t err_size)
{
    char scratch[8];
    if (!err) {
        err = scratch;
        err_size = sizeof(scratch);
    }
    hex[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return SL_EIO;
    }
    int rc = SL_EIO;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        snprintf(err, err_size, "%s: SHA-256 is unavailable in libcrypto", path);
        goto cleanup;
    }
    unsigned char buf[1 << 15];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (EVP_DigestUpdate(ctx, buf, n) != 1) {
            snprintf(err, err_size, "%s: SHA-256 update failed", path);
            goto cleanup;
        }
    }
    if (ferror(f)) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        goto cleanup;
    }
    if (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 32) {
        snprintf(err, err_size, "%s: SHA-256 final failed", path);
        goto cleanup;
    }
    for (unsigned i = 0; i < md_len; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    rc = 0;
cleanup:
    EVP_MD_CTX_free(ctx);
    fclose(f);
    return rc;
}

sl_checkpoint_t *sl_checkpoint_new(const char *goal)
{
    sl_checkpoint_t *cp = calloc(1, sizeof(*cp));
    if (cp && goal && sl_checkpoint_set_goal(cp, goal) != 0) {
        sl_checkpoint_free(cp);
        return NULL;
    }
    return cp;
}

void sl_checkpoint_free(sl_checkpoint_t *cp)
{
    if (!cp) return;
    for (size_t i = 0; i < cp->n_files; i++)
        free(cp->files[i].path);
    for (size_t i = 0; i < cp->n_decisions; i++) {
        free(cp->decisions[i].decision);
        free(cp->decisions[i].reason);
    }
    free(cp->files);
    free(cp->decisions);
    free(cp->goal);
    free(cp->step);
    free(cp->next_call);
    free(cp->request_id);
    free(cp);
}

static int one_line(const char *s)
{
    return s && !strchr(s, '\n') && !strchr(s, '\r');
}

static int replace_str(sl_checkpoint_t *cp, char **slot, const char *value, const char *field)
{
    if (!one_line(value)) return cp_fail(cp, SL_EARG, "%s must be one line of text", field);
    char *d = strdup(value);
    if (!d) return cp_fail(cp, SL_ENOMEM, "out of memory");
    free(*slot);
    *slot = d;
    return 0;
}

int sl_checkpoint_set_goal(sl_checkpoint_t *cp, const char *goal)
{
    return replace_str(cp, &cp->goal, goal, "goal");
}

int sl_checkpoint_set_step(sl_checkpoint_t *cp, const char *step)
{
    return replace_str(cp, &cp->step, step, "step");
}

int sl_checkpoint_set_request_id(sl_checkpoint_t *cp, const char *request_id)
{
    if (!request_id || !*request_id) {
        free(cp->request_id);
        cp->request_id = NULL;
        return 0;
    }
    if (strlen(request_id) >= 40)
        return cp_fail(cp, SL_EARG, "request_id \"%s\" is longer than 39 characters", request_id);
    return replace_str(cp, &cp->request_id, request_id, "request_id");
}

static int add_file_entry(sl_checkpoint_t *cp, const char *path, const char *sha256,
                          int64_t size_bytes)
{
    cp_file_t *f = NULL;
    for (size_t i = 0; i < cp->n_files; i++)
        if (strcmp(cp->files[i].path, path) == 0) f = &cp->files[i];
    if (!f) {
        cp_file_t *p = sl_grow(cp->files, cp->n_files, &cp->cap_files, sizeof(*p), 16);
        if (!p) return cp_fail(cp, SL_ENOMEM, "out of memory");
        cp->files = p;
        char *d = strdup(path);
        if (!d) return cp_fail(cp, SL_ENOMEM, "out of memory");
        f = &cp->files[cp->n_files++];
        f->path = d;
    }
    snprintf(f->sha256, sizeof(f->sha256), "%s", sha256);
    f->size_bytes = size_bytes;
    f->state = SL_FILE_UNCHECKED;
    return 0;
}

int sl_checkpoint_add_file(sl_checkpoint_t *cp, const char *path)
{
    if (!path || !*path) return cp_fail(cp, SL_EARG, "file path is empty");
    char hex[65];
    if (sl_sha256_file(path, hex, cp->err, sizeof(cp->err)) != 0) return SL_EIO;
    struct stat st;
    int64_t size = stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
    return add_file_entry(cp, path, hex, size);
}

int sl_checkpoint_add_decision(sl_checkpoint_t *cp, const char *decision, const char *reason)
{
    if (!one_line(decision) || !one_line(reason) || !*decision || !*reason)
        return cp_fail(cp, SL_EARG, "a decision and its reason must each be one non-empty line");
    cp_decision_t *p = sl_grow(cp->decisions, cp->n_decisions, &cp->cap_decisions, sizeof(*p), 8);
    if (!p) return cp_fail(cp, SL_ENOMEM, "out of memory");
    cp->decisions = p;
    char *d = strdup(decision), *r = strdup(reason);
    if (!d || !r) {
        free(d);
        free(r);
        return cp_fail(cp, SL_ENOMEM, "out of memory");
    }
    cp->decisions[cp->n_decisions++] = (cp_decision_t){d, r};
    return 0;
}

int sl_checkpoint_set_next_call(sl_checkpoint_t *cp, const char *json_text)
{
    if (!json_text) return cp_fail(cp, SL_EARG, "next call is NULL");
    json_error_t jerr;
    json_t *v = json_loads(json_text, JSON_DECODE_ANY, &jerr);
    if (!v)
        return cp_fail(cp, SL_EARG, "next call is not JSON: %s (line %d, column %d)", jerr.text,
                       jerr.line, jerr.column);
    char *compact = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    if (!compact) return cp_fail(cp, SL_ENOMEM, "out of memory");
    free(cp->next_call);
    cp->next_call = compact;
    return 0;
}

static json_t *to_json(const sl_checkpoint_t *cp)
{
    json_t *root = json_object(), *files = json_array(), *decisions = json_array();
    json_t *next = cp->next_call ? json_loads(cp->next_call, JSON_DECODE_ANY, NULL) : json_null();
    int bad = !root || !files || !decisions || !next;
    for (size_t i = 0; !bad && i < cp->n_files; i++)
        bad |= json_array_append_new(files, json_pack("{s:s, s:s, s:I}", "path", cp->files[i].path,
                                                      "sha256", cp->files[i].sha256, "size_bytes",
                                                      (json_int_t)cp->files[i].size_bytes));
    for (size_t i = 0; !bad && i < cp->n_decisions; i++)
        bad |= json_array_append_new(decisions,
                                     json_pack("{s:s, s:s}", "decision", cp->decisions[i].decision,
                                               "reason", cp->decisions[i].reason));
    if (!bad) {
        bad |= json_object_set_new(root, "sluice_checkpoint", json_integer(FORMAT_VERSION));
        bad |= json_object_set_new(root, "saved_at", json_real(cp->saved_at));
        bad |= json_object_set_new(root, "goal", cp->goal ? json_string(cp->goal) : json_null());
        bad |= json_object_set_new(root, "step", cp->step ? json_string(cp->step) : json_null());
        bad |= json_object_set_new(root, "files", files);
        bad |= json_object_set_new(root, "decisions", decisions);
        bad |= json_object_set_new(root, "next_call", next);
        bad |= json_object_set_new(root, "request_id",
                                   cp->request_id ? json_string(cp->request_id) : json_null());
        if (!bad) return root;
        json_decref(root);
        return NULL;
    }
    json_decref(root);
    json_decref(files);
    json_decref(decisions);
    json_decref(next);
    return NULL;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int sl_checkpoint_save(sl_checkpoint_t *cp, const char *path)
{
    if (!path || !*path) return cp_fail(cp, SL_EARG, "checkpoint path is empty");
    double previous_saved_at = cp->saved_at;
    cp->saved_at = sl__cl_now_unix_s();
    json_t *root = to_json(cp);
    char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(root);
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!text || !tmp) {
        free(text);
        free(tmp);
        cp->saved_at = previous_saved_at;
        return cp_fail(cp, SL_ENOMEM, "out of memory");
    }
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int rc = SL_EIO;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        cp_fail(cp, SL_EIO, "%s: cannot create a temporary file: %s", tmp, strerror(errno));
        goto cleanup;
    }
    if (write_all(fd, text, strlen(text)) != 0 || write_all(fd, "\n", 1) != 0 || fsync(fd) != 0) {
        cp_fail(cp, SL_EIO, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto cleanup;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        cp_fail(cp, SL_EIO, "%s: cannot replace it: %s", path, strerror(errno));
        unlink(tmp);
        goto cleanup;
    }
    /* The rename is durable only once the directory entry is on disk. */
    char *dir = strdup(path);
    if (!dir) {
        cp_fail(cp, SL_ENOMEM, "out of memory");
        rc = SL_ENOMEM;
        goto cleanup;
    }
    char *slash = strrchr(dir, '/');
    const char *dname = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
    int dfd = open(dname, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || fsync(dfd) != 0) {
        cp_fail(cp, SL_EIO, "%s: cannot sync the directory: %s", dname, strerror(errno));
        if (dfd >= 0) close(dfd);
        free(dir);
        goto cleanup;
    }
    close(dfd);
    free(dir);
    rc = 0;
cleanup:
    if (rc != 0) cp->saved_at = previous_saved_at;
    free(text);
    free(tmp);
    return rc;
}

static int load_fail(char *err, size_t err_size, int code, const char *path, const char *what)
{
    if (err) snprintf(err, err_size, "%s: %s", path, what);
    return code;
}

static int opt_string(json_t *root, const char *key, const char **out)
{
    json_t *v = json_object_get(root, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return -1;
    *out = json_string_value(v);
    return 0;
}

static int from_json(sl_checkpoint_t *cp, json_t *root, const char **what)
{
    const char *goal, *step, *rid;
    json_t *version = json_object_get(root, "sluice_checkpoint");
    json_t *files = json_object_get(root, "files"), *decisions = json_object_get(root, "decisions");
    if (!json_is_integer(version) || json_integer_value(version) != FORMAT_VERSION) {
        *what = "not a sluice checkpoint of format 1 (\"sluice_checkpoint\": 1)";
        return SL_ECORRUPT;
    }
    if (opt_string(root, "goal", &goal) || opt_string(root, "step", &step) ||
        opt_string(root, "request_id", &rid) || !json_is_array(files) ||
        !json_is_array(decisions)) {
        *what = "goal, step or request_id is not a string, or files/decisions not an array";
        return SL_ECORRUPT;
    }
    *what = "out of memory";
    if ((goal && sl_checkpoint_set_goal(cp, goal)) || (step && sl_checkpoint_set_step(cp, step)) ||
        (rid && sl_checkpoint_set_request_id(cp, rid)))
        return SL_ENOMEM;
    json_t *saved = json_object_get(root, "saved_at");
    cp->saved_at = json_is_number(saved) ? json_number_value(saved) : 0;
    size_t i;
    json_t *v;
    json_array_foreach(files, i, v)
    {
        const char *p = json_string_value(json_object_get(v, "path"));
        const char *h = json_string_value(json_object_get(v, "sha256"));
        json_t *size = json_object_get(v, "size_bytes");
        if (!p || !h || strlen(h) != 64) {
            *what = "a file entry lacks \"path\" or a 64-digit \"sha256\"";
            return SL_ECORRUPT;
        }
        if (add_file_entry(cp, p, h, json_is_integer(size) ? json_integer_value(size) : -1))
            return SL_ENOMEM;
    }
    json_array_foreach(decisions, i, v)
    {
        const char *d = json_string_value(json_object_get(v, "decision"));
        const char *r = json_string_value(json_object_get(v, "reason"));
        if (!d || !r || sl_checkpoint_add_decision(cp, d, r) != 0) {
            *what = "a decision lacks \"decision\" or a one-line \"reason\"";
            return SL_ECORRUPT;
        }
    }
    json_t *next = json_object_get(root, "next_call");
    if (next && !json_is_null(next)) {
        cp->next_call = json_dumps(next, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!cp->next_call) return SL_ENOMEM;
    }
    return 0;
}

int sl_checkpoint_load(const char *path, sl_checkpoint_t **out, char *err, size_t err_size)
{
    *out = NULL;
    if (!path) return load_fail(err, err_size, SL_EARG, "(null)", "no path");
    FILE *f = fopen(path, "rb");
    if (!f) return load_fail(err, err_size, SL_EIO, path, strerror(errno));
    json_error_t jerr;
    json_t *root = json_loadf(f, 0, &jerr);
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        json_decref(root);
        return load_fail(err, err_size, SL_EIO, path, "read error");
    }
    if (!root) {
        char what[300];
        snprintf(what, sizeof(what), "not JSON: %s (line %d)", jerr.text, jerr.line);
        return load_fail(err, err_size, SL_ECORRUPT, path, what);
    }
    sl_checkpoint_t *cp = calloc(1, sizeof(*cp));
    if (!cp) {
        json_decref(root);
        return load_fail(err, err_size, SL_ENOMEM, path, "out of memory");
    }
    const char *what = "";
    int rc = json_is_object(root) ? from_json(cp, root, &what) : SL_ECORRUPT;
    if (!json_is_object(root)) what = "not a JSON object";
    json_decref(root);
    if (rc < 0) {
        sl_checkpoint_free(cp);
        return load_fail(err, err_size, rc, path, what);
    }
    *out = cp;
    return 0;
}

int sl_checkpoint_verify(sl_checkpoint_t *cp)
{
    int changed = 0;
    for (size_t i = 0; i < cp->n_files; i++) {
        cp_file_t *f = &cp->files[i];
        char hex[65];
        if (sl_sha256_file(f->path, hex, NULL, 0) != 0)
            f->state = SL_FILE_MISSING;
        else
            f->state = strcmp(hex, f->sha256) == 0 ? SL_FILE_SAME : SL_FILE_CHANGED;
        changed += f->state != SL_FILE_SAME;
    }
    return changed;
}

int sl_checkpoint_resume(const char *path, sl_checkpoint_t **out, size_t *changed, char *err,
                         size_t err_size)
{
    int rc = sl_checkpoint_load(path, out, err, err_size);
    if (rc < 0) return rc;
    rc = sl_checkpoint_verify(*out);
    if (changed) *changed = rc > 0 ? (size_t)rc : 0;
    return 0;
}

const char *sl_checkpoint_goal(const sl_checkpoint_t *cp)
{
    return cp->goal;
}

const char *sl_checkpoint_step(const sl_checkpoint_t *cp)
{
    return cp->step;
}

const char *sl_checkpoint_next_call(const sl_checkpoint_t *cp)
{
    return cp->next_call;
}

const char *sl_checkpoint_request_id(const sl_checkpoint_t *cp)
{
    return cp->request_id;
}

double sl_checkpoint_saved_at(const sl_checkpoint_t *cp)
{
    return cp->saved_at;
}

size_t sl_checkpoint_file_count(const sl_checkpoint_t *cp)
{
    return cp->n_files;
}

const char *sl_checkpoint_file_path(const sl_checkpoint_t *cp, size_t i)
{
    return i < cp->n_files ? cp->files[i].path : NULL;
}

const char *sl_checkpoint_file_sha256(const sl_checkpoint_t *cp, size_t i)
{
    return i < cp->n_files ? cp->files[i].sha256 : NULL;
}

sl_file_state_t sl_checkpoint_file_state(const sl_checkpoint_t *cp, size_t i)
{
    return i < cp->n_files ? cp->files[i].state : SL_FILE_UNCHECKED;
}

size_t sl_checkpoint_decision_count(const sl_checkpoint_t *cp)
{
    return cp->n_decisions;
}

const char *sl_checkpoint_decision(const sl_checkpoint_t *cp, size_t i)
{
    return i < cp->n_decisions ? cp->decisions[i].decision : NULL;
}

const char *sl_checkpoint_decision_reason(const sl_checkpoint_t *cp, size_t i)
{
    return i < cp->n_decisions ? cp->decisions[i].reason : NULL;
}

const char *sl_checkpoint_errmsg(const sl_checkpoint_t *cp)
{
    return cp ? cp->err : "";
}
