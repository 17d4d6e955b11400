/* files.c - OpenAI's Files API: multipart upload, list, retrieve, content, delete.
 *
 * What the batch API reads its input from and writes its output to. A file is kept in
 * memory with its bytes (at most --max-body-bytes each, EMU_MAX_FILES in all; an upload
 * beyond is refused 400 like a provider's storage limit). Paths after /v1/files: "" (POST
 * upload, GET list), "/{id}" (GET, DELETE), "/{id}/content" (GET). */
#define _GNU_SOURCE /* memmem, strcasestr */
#include "batch.h"

#include <string.h>
#include <strings.h>

static const char *const purposes[] = {"batch",     "assistants", "fine-tune",   "vision",
                                       "user_data", "evals",      "batch_output"};

void sl__emu_send_bytes(struct evhttp_request *req, const char *content_type, const char *data,
                        size_t len)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", content_type);
    struct evbuffer *buf = evbuffer_new();
    if (buf) evbuffer_add(buf, data, len);
    evhttp_send_reply(req, 200, "OK", buf);
    if (buf) evbuffer_free(buf);
}

json_t *sl__emu_file_json(const sl_emu_file_t *f)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:n, s:s, s:s, s:s, s:n}", "id", f->id, "object", "file",
                     "bytes", (json_int_t)f->len, "created_at", (json_int_t)f->created_unix,
                     "expires_at", "filename", f->filename, "purpose", f->purpose, "status",
                     "processed", "status_details");
}

sl_emu_file_t *sl__emu_file(sl_emu_t *emu, const char *id)
{
    sl_emu_batches_t *b = sl__emu_batches(emu);
    for (size_t i = 0; b && i < b->n_files; i++)
        if (!strcmp(b->files[i]->id, id)) return b->files[i];
    return NULL;
}

sl_emu_file_t *sl__emu_file_add(sl_emu_t *emu, const char *filename, const char *purpose,
                                char *data, size_t len)
{
    sl_emu_batches_t *b = sl__emu_batches(emu);
    sl_emu_file_t *f = b && b->n_files < EMU_MAX_FILES ? calloc(1, sizeof *f) : NULL;
    if (!f || !(f->filename = strdup(filename)) || !(f->purpose = strdup(purpose))) {
        if (f) free(f->filename);
        free(f);
        free(data);
        return NULL;
    }
    sl__emu_new_id(emu, "file-", f->id, sizeof f->id);
    f->data = data;
    f->len = len;
    f->created_unix = (int64_t)sl__emu_now();
    b->files[b->n_files++] = f;
    return f;
}

static void file_free(sl_emu_file_t *f)
{
    free(f->filename);
    free(f->purpose);
    free(f->data);
    free(f);
}

/* One part of a multipart/form-data body: its name, filename and bytes. */
typedef struct part {
    char name[64];
    char filename[256];
    const char *data;
    size_t len;
} part_t;

/* Copies the quoted value of `key="..."` in head[0, n) into out (cap bytes). */
static void header_param(const char *head, size_t n, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    const char *p = memmem(head, n, key, strlen(key));
    if (!p) return;
    p += strlen(key);
    size_t k = 0;
    while (p < head + n && *p != '"' && k + 1 < cap)
        out[k++] = *p++;
    out[k] = '\0';
}

/* Splits `body` by the boundary of `ctype` into at most `cap` parts; returns how many
 * (-1: not multipart). */
static int multipart_parts(const char *body, size_t len, const char *ctype, part_t *parts, int cap)
{
    const char *b = ctype ? strcasestr(ctype, "boundary=") : NULL;
    if (!b || strncasecmp(ctype, "multipart/form-data", 19) != 0) return -1;
    b += 9;
    size_t blen = strcspn(b, "; ");
    if (blen > 0 && b[0] == '"') blen = strcspn(++b, "\"");
    char delim[220];
    if (blen == 0 || blen > 200) return -1;
    snprintf(delim, sizeof delim, "\r\n--%.*s", (int)blen, b);
    size_t dlen = strlen(delim);
    const char *end = body + len;
    const char *p = memmem(body, len, delim + 2, dlen - 2);
    int n = 0;
    while (p && n < cap) {
        const char *head = p + dlen - 2;
        const char *content = memmem(head, (size_t)(end - head), "\r\n\r\n", 4);
        if (!content) break;
        const char *next = memmem(content + 4, (size_t)(end - content - 4), delim, dlen);
        if (!next) break;
        part_t *pt = &parts[n++];
        header_param(head, (size_t)(content - head), " name=\"", pt->name, sizeof pt->name);
        header_param(head, (size_t)(content - head), "filename=\"", pt->filename,
                     sizeof pt->filename);
        pt->data = content + 4;
        pt->len = (size_t)(next - content - 4);
        p = next + 2;
    }
    return n;
}

static void not_found(sl_emu_t *emu, struct evhttp_request *req, const char *id)
{
    char msg[320];
    snprintf(msg, sizeof msg, "No such File object: %.256s", id);
    sl__emu_send_error(emu, req, SL_EMU_OPENAI, 404, "invalid_request_error", msg, "id", NULL);
}

static void upload(sl_emu_t *emu, struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *ctype = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    part_t parts[8];
    int n = (int64_t)len > emu->opt.max_body_bytes
                ? -2
                : multipart_parts((const char *)evbuffer_pullup(in, -1), len, ctype, parts, 8);
    const part_t *file = NULL, *purpose = NULL;
    for (int i = 0; i < n; i++) {
        if (!strcmp(parts[i].name, "file")) file = &parts[i];
        if (!strcmp(parts[i].name, "purpose")) purpose = &parts[i];
    }
    const char *why = n == -2    ? "The file is larger than the upload limit (--max-body-bytes)."
                      : n < 0    ? "Expected a multipart/form-data body with a boundary."
                      : !file    ? "Missing required parameter: 'file'."
                      : !purpose ? "Missing required parameter: 'purpose'."
                                 : NULL;
    char purpose_s[32] = "";
    if (!why) {
        snprintf(purpose_s, sizeof purpose_s, "%.*s", (int)(purpose->len < 31 ? purpose->len : 31),
                 purpose->data);
        bool known = false;
        for (size_t i = 0; i < sizeof purposes / sizeof purposes[0] - 1; i++)
            known |= !strcmp(purpose_s, purposes[i]);
        if (!known)
            why = "purpose: must be one of batch, assistants, fine-tune, vision, "
                  "user_data, evals.";
    }
    if (why) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error", why, NULL, NULL);
        return;
    }
    char *data = malloc(file->len + 1);
    if (data) {
        memcpy(data, file->data, file->len);
        data[file->len] = '\0';
    }
    sl_emu_file_t *f = data ? sl__emu_file_add(emu, file->filename[0] ? file->filename : "upload",
                                               purpose_s, data, file->len)
                            : NULL;
    if (!f) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error",
                           "The emulator's file store is full.", NULL, NULL);
        return;
    }
    sl__emu_send_json(req, 200, sl__emu_file_json(f));
}

void sl__openai_files(sl_emu_t *emu, struct evhttp_request *req, const char *rest)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    sl_emu_batches_t *b = sl__emu_batches(emu);
    if (!b) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 500, "server_error", "out of memory", NULL,
                           NULL);
        return;
    }
    if (!*rest && m == EVHTTP_REQ_POST) {
        upload(emu, req);
        return;
    }
    if (!*rest && m == EVHTTP_REQ_GET) {
        json_t *data = json_array();
        for (size_t i = b->n_files; i-- > 0;) /* newest first */
            json_array_append_new(data, sl__emu_file_json(b->files[i]));
        json_t *first = json_array_get(data, 0), *last = json_array_get(data, b->n_files - 1);
        sl__emu_send_json(req, 200,
                          json_pack("{s:s, s:o, s:b, s:O?, s:O?}", "object", "list", "data", data,
                                    "has_more", 0, "first_id", json_object_get(first, "id"),
                                    "last_id", json_object_get(last, "id")));
        return;
    }
    char id[64];
    size_t idlen = strcspn(rest + 1, "/");
    snprintf(id, sizeof id, "%.*s", (int)(idlen < 63 ? idlen : 63), rest + 1);
    const char *tail = rest + 1 + idlen;
    sl_emu_file_t *f = sl__emu_file(emu, id);
    if (!f) {
        not_found(emu, req, id);
        return;
    }
    if (!*tail && m == EVHTTP_REQ_GET) {
        sl__emu_send_json(req, 200, sl__emu_file_json(f));
    } else if (!*tail && m == EVHTTP_REQ_DELETE) {
        for (size_t i = 0; i < b->n_files; i++)
            if (b->files[i] == f) {
                memmove(&b->files[i], &b->files[i + 1], (b->n_files - i - 1) * sizeof f);
                b->n_files--;
                break;
            }
        sl__emu_send_json(req, 200,
                          json_pack("{s:s, s:s, s:b}", "id", id, "object", "file", "deleted", 1));
        file_free(f);
    } else if (!strcmp(tail, "/content") && m == EVHTTP_REQ_GET) {
        sl__emu_send_bytes(req, "application/octet-stream", f->data, f->len);
    } else {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 405, "invalid_request_error",
                           "Method not allowed for this files path", NULL, NULL);
    }
}

void sl__emu_files_free(sl_emu_batches_t *b)
{
    for (size_t i = 0; i < b->n_files; i++)
        file_free(b->files[i]);
    b->n_files = 0;
}
