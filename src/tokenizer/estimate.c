/* Request estimation: the input, cached and output tokens of an Anthropic Messages,
 * OpenAI Chat Completions or OpenAI Responses body, from local token counts plus
 * documented overheads.
 *
 * Text is counted exactly with the Claude tokenizer; what the provider adds around it
 * (role markers, the tool-use system prompt, image encodings) is modelled by the
 * constants below, whose sources and limits are in docs/tokenizer.md. The engine's
 * calibration corrects the remaining error per model from actual usage. For Anthropic
 * the prompt is counted in cache order (tools, then system, then messages) so the
 * running total at the last block carrying cache_control is the cached prefix.
 *
 * Every shape the providers accept is counted, so that a caller's fallback (the proxy
 * reserves body bytes / 4) is left for bodies that are not what the API takes: block
 * types of server tools are counted as their JSON text, a PDF as pages of the largest
 * image, a Responses request as the Chat Completions request it amounts to. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer_internal.h"

/* Anthropic: role marker per message, and the closing assistant turn per request
 * (count_tokens gives 14 for system "You are a scientist" + user "Hello, Claude"). */
#define ANTHROPIC_MESSAGE_OVERHEAD_TOKENS 3
#define ANTHROPIC_REQUEST_OVERHEAD_TOKENS 4
/* The tool-use system prompt Anthropic adds when tools are present. */
#define ANTHROPIC_TOOLS_AUTO_OVERHEAD_TOKENS 346 /* tool_choice auto or none */
#define ANTHROPIC_TOOLS_ANY_OVERHEAD_TOKENS 313  /* tool_choice any or tool */
/* Images: tokens = width * height / 750 after fitting the long edge to 1568 px;
 * at most about 1,600 tokens. Unknown sizes (URLs, unreadable headers) cost the max. */
#define ANTHROPIC_IMAGE_PX_PER_TOKEN 750
#define ANTHROPIC_IMAGE_MAX_EDGE_PX 1568
#define ANTHROPIC_IMAGE_MAX_TOKENS 1600
/* PDFs: each page is sent as its text and an image of the page. The text is not read
 * here; a page costs the largest image (docs/tokenizer.md gives the range). */
#define ANTHROPIC_PDF_PAGE_TOKENS ANTHROPIC_IMAGE_MAX_TOKENS
/* OpenAI (their cookbook's count for chat models): 3 per message, 1 per name, and
 * the reply is primed with 3. */
#define OPENAI_MESSAGE_OVERHEAD_TOKENS 3
#define OPENAI_NAME_OVERHEAD_TOKENS 1
#define OPENAI_REPLY_OVERHEAD_TOKENS 3
/* OpenAI images: detail low 85; high: fit in 2048x2048, shortest side to 768, then
 * 85 + 170 per 512 px tile. Unknown size: the largest tile count, 8. */
#define OPENAI_IMAGE_BASE_TOKENS 85
#define OPENAI_IMAGE_TILE_TOKENS 170
#define OPENAI_IMAGE_MAX_TILES 8

typedef struct {
    sl_tokenizer_t *tok;
    int64_t total;       /* prompt tokens so far, in cache order */
    int64_t cached;      /* total at the last cache_control breakpoint */
    char *err;
    size_t err_size;
    int rc;              /* first error, 0 while none */
} est_t;

#define PATH_MAX_BYTES 160

/* Formats a field path such as "messages[3].content[0]"; long paths are cut. */
static void path_fmt(char *dst, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

static int fail(est_t *e, int rc, const char *fmt, ...)
{
    if (e->rc == 0) {
        e->rc = rc;
        if (e->err && e->err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(e->err, e->err_size, fmt, ap);
            va_end(ap);
        }
    }
    return e->rc;
}

/* A short, printable rendering of a JSON value for error messages. */
static void describe(const json_t *v, char *buf, size_t n)
{
    if (json_is_string(v)) {
        snprintf(buf, n, "\"%.60s\"", json_string_value(v));
        return;
    }
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(buf, n, "%.60s", s ? s : "null");
    free(s);
}

static int bad_value(est_t *e, const char *path, const char *what, const json_t *v)
{
    char val[80];
    describe(v, val, sizeof(val));
    return fail(e, SL_TOK_EREQUEST, "%s: %s %s", path, what, val);
}

/* Writes into p[0, n) the path of an array item (`fmt` with its index, as path_fmt) and
 * checks that the item is an object: 0, or the error naming that path. */
static int item_object(est_t *e, char *p, size_t n, const json_t *item, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, n, fmt, ap);
    va_end(ap);
    return json_is_object(item) ? 0 : bad_value(e, p, "not an object:", item);
}

static int add_text(est_t *e, const char *s, size_t n)
{
    int64_t t;
    if (sl_tokenizer_count(e->tok, s, n, &t) != 0)
        return fail(e, SL_TOK_ENOMEM, "out of memory");
    e->total += t;
    return 0;
}

static int add_json(est_t *e, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return fail(e, SL_TOK_ENOMEM, "out of memory");
    int rc = add_text(e, s, strlen(s));
    free(s);
    return rc;
}

/* A block counted as its JSON text (keys sorted, cache_control left out: the marker is
 * not part of the prompt). */
static int add_block_json(est_t *e, const json_t *block)
{
    json_t *copy = json_copy((json_t *)block);
    if (!copy)
        return fail(e, SL_TOK_ENOMEM, "out of memory");
    json_object_del(copy, "cache_control");
    char *s = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(copy);
    if (!s)
        return fail(e, SL_TOK_ENOMEM, "out of memory");
    int rc = add_text(e, s, strlen(s));
    free(s);
    return rc;
}

/* Field `key` of obj must be a string when present; its text is counted. */
static int add_string_field(est_t *e, const json_t *obj, const char *key, const char *path,
                            int required)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return fail(e, SL_TOK_EREQUEST, "%s.%s: missing", path, key);
        return 0;
    }
    if (!json_is_string(v)) {
        char p[PATH_MAX_BYTES];
        path_fmt(p, sizeof(p), "%s.%s", path, key);
        return bad_value(e, p, "not a string:", v);
    }
    return add_text(e, json_string_value(v), json_string_length(v));
}

/* Records a breakpoint after the block when it carries cache_control. */
static void mark_cache(est_t *e, const json_t *block)
{
    if (json_is_object(block) && json_object_get(block, "cache_control"))
        e->cached = e->total;
}

static int64_t anthropic_image_tokens(uint32_t w, uint32_t h)
{
    double wd = w, hd = h;
    double long_edge = wd > hd ? wd : hd;
    if (long_edge > ANTHROPIC_IMAGE_MAX_EDGE_PX) {
        wd = wd * ANTHROPIC_IMAGE_MAX_EDGE_PX / long_edge;
        hd = hd * ANTHROPIC_IMAGE_MAX_EDGE_PX / long_edge;
    }
    int64_t t = (int64_t)((wd * hd + ANTHROPIC_IMAGE_PX_PER_TOKEN - 1) / ANTHROPIC_IMAGE_PX_PER_TOKEN);
    if (t < 1)
        t = 1;
    return t > ANTHROPIC_IMAGE_MAX_TOKENS ? ANTHROPIC_IMAGE_MAX_TOKENS : t;
}

static int64_t openai_image_tokens(uint32_t w, uint32_t h, int low_detail)
{
    if (low_detail)
        return OPENAI_IMAGE_BASE_TOKENS;
    double wd = w, hd = h;
    double long_edge = wd > hd ? wd : hd;
    if (long_edge > 2048) {
        wd = wd * 2048 / long_edge;
        hd = hd * 2048 / long_edge;
    }
    double short_edge = wd < hd ? wd : hd;
    if (short_edge > 768) {
        wd = wd * 768 / short_edge;
        hd = hd * 768 / short_edge;
    }
    int64_t tiles = ((int64_t)wd + 511) / 512 * (((int64_t)hd + 511) / 512);
    return OPENAI_IMAGE_BASE_TOKENS + OPENAI_IMAGE_TILE_TOKENS * tiles;
}

/* Decodes base64 image data and reads its size. Returns 1 with the size, 0 when the
 * format is not recognised, or an error (invalid base64, out of memory). */
static int image_dims(est_t *e, const char *b64, size_t b64_len, const char *path, uint32_t *w,
                      uint32_t *h)
{
    size_t max = b64_len / 4 * 3 + 3;
    unsigned char *raw = malloc(max ? max : 1);
    if (!raw)
        return fail(e, SL_TOK_ENOMEM, "out of memory");
    long n = sl__base64_decode(b64, b64_len, raw, max);
    int rc;
    if (n < 0)
        rc = fail(e, SL_TOK_EREQUEST, "%s: invalid base64", path);
    else
        rc = sl__image_size(raw, (size_t)n, w, h) == 0 ? 1 : 0;
    free(raw);
    return rc;
}

static int anthropic_image(est_t *e, const json_t *block, const char *path)
{
    char p[PATH_MAX_BYTES];
    json_t *src = json_object_get(block, "source");
    path_fmt(p, sizeof(p), "%s.source", path);
    if (!json_is_object(src))
        return bad_value(e, p, "not an object:", src);
    json_t *type = json_object_get(src, "type");
    const char *t = json_string_value(type);
    if (t && strcmp(t, "base64") == 0) {
        json_t *data = json_object_get(src, "data");
        path_fmt(p, sizeof(p), "%s.source.data", path);
        if (!json_is_string(data))
            return bad_value(e, p, "not a string:", data);
        uint32_t w, h;
        int r = image_dims(e, json_string_value(data), json_string_length(data), p, &w, &h);
        if (r < 0)
            return r;
        e->total += r == 1 ? anthropic_image_tokens(w, h) : ANTHROPIC_IMAGE_MAX_TOKENS;
        return 0;
    }
    if (t && (strcmp(t, "url") == 0 || strcmp(t, "file") == 0)) {
        e->total += ANTHROPIC_IMAGE_MAX_TOKENS; /* size unknown without fetching */
        return 0;
    }
    path_fmt(p, sizeof(p), "%s.source.type", path);
    return bad_value(e, p, "unknown image source type", type);
}

/* Pages of a PDF: its "/Type /Page" objects (not "/Pages"); at least one. */
static int64_t pdf_pages(const unsigned char *pdf, size_t n)
{
    int64_t pages = 0;
    for (size_t i = 0; i + 5 <= n; i++) {
        if (memcmp(pdf + i, "/Type", 5) != 0)
            continue;
        size_t k = i + 5;
        while (k < n && (pdf[k] == ' ' || pdf[k] == '\r' || pdf[k] == '\n' || pdf[k] == '\t'))
            k++;
        if (k + 5 <= n && memcmp(pdf + k, "/Page", 5) == 0 && (k + 5 == n || pdf[k + 5] != 's'))
            pages++;
    }
    return pages > 0 ? pages : 1;
}

/* A document whose bytes are not text: a base64 PDF is decoded to count its pages; a
 * url or file source costs one page (its size is unknown without fetching). */
static int anthropic_pdf(est_t *e, const json_t *src, const char *path)
{
    const char *st = json_string_value(json_object_get(src, "type"));
    if (!st || strcmp(st, "base64") != 0) {
        e->total += ANTHROPIC_PDF_PAGE_TOKENS;
        return 0;
    }
    char p[PATH_MAX_BYTES];
    json_t *data = json_object_get(src, "data");
    path_fmt(p, sizeof(p), "%s.data", path);
    if (!json_is_string(data))
        return bad_value(e, p, "not a string:", data);
    size_t len = json_string_length(data);
    size_t max = len / 4 * 3 + 3;
    unsigned char *raw = malloc(max);
    if (!raw)
        return fail(e, SL_TOK_ENOMEM, "out of memory");
    long n = sl__base64_decode(json_string_value(data), len, raw, max);
    if (n < 0) {
        free(raw);
        return fail(e, SL_TOK_EREQUEST, "%s: invalid base64", p);
    }
    e->total += pdf_pages(raw, (size_t)n) * ANTHROPIC_PDF_PAGE_TOKENS;
    free(raw);
    return 0;
}

int sl_estimate_counts_block_as_json(const char *t)
{
    static const char *const types[] = {
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "container_upload",
        "search_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "tool_reference",
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(t, types[i]) == 0)
            return 1;
    return 0;
}

static int anthropic_blocks(est_t *e, const json_t *content, const char *path, int nested);

static int anthropic_block(est_t *e, const json_t *block, const char *path, int nested)
{
    char p[PATH_MAX_BYTES];
    if (!json_is_object(block))
        return bad_value(e, path, "not an object:", block);
    json_t *type = json_object_get(block, "type");
    const char *t = json_string_value(type);
    path_fmt(p, sizeof(p), "%s.type", path);
    if (!t)
        return bad_value(e, p, "missing or not a string:", type);
    if (strcmp(t, "text") == 0) {
        add_string_field(e, block, "text", path, 1);
    } else if (strcmp(t, "image") == 0) {
        anthropic_image(e, block, path);
    } else if (!nested && strcmp(t, "tool_use") == 0) {
        add_string_field(e, block, "name", path, 1);
        json_t *input = json_object_get(block, "input");
        if (input)
            add_json(e, input);
    } else if (!nested && strcmp(t, "tool_result") == 0) {
        json_t *c = json_object_get(block, "content");
        path_fmt(p, sizeof(p), "%s.content", path);
        if (json_is_string(c))
            add_text(e, json_string_value(c), json_string_length(c));
        else if (c)
            anthropic_blocks(e, c, p, 1);
    } else if (!nested && strcmp(t, "thinking") == 0) {
        add_string_field(e, block, "thinking", path, 1);
    } else if (!nested && strcmp(t, "redacted_thinking") == 0) {
        add_string_field(e, block, "data", path, 0);
    } else if (strcmp(t, "document") == 0) {
        json_t *src = json_object_get(block, "source");
        const char *st = json_string_value(json_object_get(src, "type"));
        path_fmt(p, sizeof(p), "%s.source", path);
        if (st && strcmp(st, "text") == 0)
            add_string_field(e, src, "data", p, 1);
        else if (st && strcmp(st, "content") == 0)
            anthropic_blocks(e, json_object_get(src, "content"), p, 1);
        else if (st && (strcmp(st, "base64") == 0 || strcmp(st, "url") == 0 ||
                        strcmp(st, "file") == 0))
            anthropic_pdf(e, src, p);
        else
            return bad_value(e, p, "unknown document source type",
                             src ? json_object_get(src, "type") : NULL);
    } else if (sl_estimate_counts_block_as_json(t)) {
        add_block_json(e, block);
    } else {
        return fail(e, SL_TOK_EREQUEST, "%s.type: unknown block type \"%.60s\"", path, t);
    }
    if (e->rc == 0)
        mark_cache(e, block);
    return e->rc;
}

static int anthropic_blocks(est_t *e, const json_t *content, const char *path, int nested)
{
    if (!json_is_array(content))
        return bad_value(e, path, "not a string or an array of blocks:", content);
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        char p[PATH_MAX_BYTES];
        path_fmt(p, sizeof(p), "%s[%zu]", path, i);
        if (anthropic_block(e, b, p, nested) != 0)
            return e->rc;
    }
    return 0;
}

static int anthropic_tools(est_t *e, const json_t *root)
{
    json_t *tools = json_object_get(root, "tools");
    if (!tools)
        return 0;
    if (!json_is_array(tools))
        return bad_value(e, "tools", "not an array:", tools);
    if (json_array_size(tools) == 0)
        return 0;
    const char *choice = json_string_value(json_object_get(json_object_get(root, "tool_choice"), "type"));
    int forced = choice && (strcmp(choice, "any") == 0 || strcmp(choice, "tool") == 0);
    e->total += forced ? ANTHROPIC_TOOLS_ANY_OVERHEAD_TOKENS : ANTHROPIC_TOOLS_AUTO_OVERHEAD_TOKENS;
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool)
    {
        char p[PATH_MAX_BYTES];
        if (item_object(e, p, sizeof(p), tool, "tools[%zu]", i) != 0)
            return e->rc;
        json_t *schema = json_object_get(tool, "input_schema");
        if (schema) {
            add_string_field(e, tool, "name", p, 1);
            add_string_field(e, tool, "description", p, 0);
            add_json(e, schema);
        } else {
            add_json(e, tool); /* a server tool such as web_search: its definition */
        }
        if (e->rc)
            return e->rc;
        mark_cache(e, tool);
    }
    return 0;
}

static int read_count(est_t *e, const json_t *root, const char *key, int64_t *out)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad_value(e, key, "not a non-negative integer:", v);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int estimate_anthropic(est_t *e, const json_t *root, sl_estimate_t *out)
{
    if (read_count(e, root, "max_tokens", &out->output_tokens) || anthropic_tools(e, root))
        return e->rc;
    json_t *system = json_object_get(root, "system");
    if (json_is_string(system))
        add_text(e, json_string_value(system), json_string_length(system));
    else if (system && anthropic_blocks(e, system, "system", 1) != 0)
        return e->rc;
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_array(messages))
        return bad_value(e, "messages", "missing or not an array:", messages);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        char p[PATH_MAX_BYTES];
        if (item_object(e, p, sizeof(p), m, "messages[%zu]", i) != 0)
            return e->rc;
        json_t *role = json_object_get(m, "role");
        const char *r = json_string_value(role);
        /* "system" inside messages: accepted by the API, counted like a user turn. */
        if (!r || (strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 &&
                   strcmp(r, "system") != 0)) {
            path_fmt(p, sizeof(p), "messages[%zu].role", i);
            return bad_value(e, p, "unknown role", role);
        }
        e->total += ANTHROPIC_MESSAGE_OVERHEAD_TOKENS;
        json_t *content = json_object_get(m, "content");
        path_fmt(p, sizeof(p), "messages[%zu].content", i);
        if (json_is_string(content))
            add_text(e, json_string_value(content), json_string_length(content));
        else if (anthropic_blocks(e, content, p, 0) != 0)
            return e->rc;
    }
    if (e->rc)
        return e->rc;
    e->total += ANTHROPIC_REQUEST_OVERHEAD_TOKENS;
    out->cached_tokens = e->cached;
    out->input_tokens = e->total - e->cached;
    return 0;
}

static int openai_image(est_t *e, const json_t *part, const char *path)
{
    char p[PATH_MAX_BYTES];
    json_t *img = json_object_get(part, "image_url");
    path_fmt(p, sizeof(p), "%s.image_url", path);
    json_t *url = json_is_object(img) ? json_object_get(img, "url") : img;
    if (!json_is_string(url))
        return bad_value(e, p, "no url string:", img);
    const char *detail = json_string_value(json_object_get(img, "detail"));
    int low = detail && strcmp(detail, "low") == 0;
    const char *u = json_string_value(url);
    const char *comma = strchr(u, ',');
    uint32_t w, h;
    int r = 0;
    if (strncmp(u, "data:", 5) == 0 && comma && comma - u >= 7 && strncmp(comma - 7, ";base64", 7) == 0) {
        path_fmt(p, sizeof(p), "%s.image_url.url", path);
        r = image_dims(e, comma + 1, strlen(comma + 1), p, &w, &h);
        if (r < 0)
            return r;
    }
    e->total += r == 1 ? openai_image_tokens(w, h, low)
                       : (low ? OPENAI_IMAGE_BASE_TOKENS
                              : OPENAI_IMAGE_BASE_TOKENS + OPENAI_IMAGE_TILE_TOKENS * OPENAI_IMAGE_MAX_TILES);
    return 0;
}

/* A content part of `type` (NULL when missing or not a string) at `path`. */
typedef int (*part_fn)(est_t *e, json_t *part, const char *path, const char *type);

/* Content of OpenAI shapes: null, a string counted as text, or an array of part objects,
 * each handed to `fn`; stops at the first error. */
static int content_parts(est_t *e, const json_t *content, const char *path, part_fn fn)
{
    if (!content || json_is_null(content))
        return 0;
    if (json_is_string(content))
        return add_text(e, json_string_value(content), json_string_length(content));
    if (!json_is_array(content))
        return bad_value(e, path, "not a string or an array of parts:", content);
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        char p[PATH_MAX_BYTES];
        if (item_object(e, p, sizeof(p), part, "%s[%zu]", path, i) != 0)
            return e->rc;
        int rc = fn(e, part, p, json_string_value(json_object_get(part, "type")));
        if (rc) return rc;
        if (e->rc)
            return e->rc;
    }
    return 0;
}

static int openai_part(est_t *e, json_t *part, const char *p, const char *t)
{
    if (!t) return fail(e, SL_TOK_EREQUEST, "%s.type: missing or not a string", p);
    if (strcmp(t, "text") == 0)
        add_string_field(e, part, "text", p, 1);
    else if (strcmp(t, "refusal") == 0)
        add_string_field(e, part, "refusal", p, 1);
    else if (strcmp(t, "image_url") == 0)
        openai_image(e, part, p);
    else
        return fail(e, SL_TOK_EREQUEST, "%s.type: unknown part type \"%.60s\"", p, t);
    return 0;
}

static int openai_content(est_t *e, const json_t *content, const char *path)
{
    return content_parts(e, content, path, openai_part);
}

static int openai_message(est_t *e, const json_t *m, size_t i)
{
    char p[PATH_MAX_BYTES];
    if (item_object(e, p, sizeof(p), m, "messages[%zu]", i) != 0)
        return e->rc;
    json_t *role = json_object_get(m, "role");
    const char *r = json_string_value(role);
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool",
                                        "function"};
    int known = 0;
    for (size_t k = 0; r && k < sizeof(roles) / sizeof(roles[0]); k++)
        known |= strcmp(r, roles[k]) == 0;
    if (!known) {
        path_fmt(p, sizeof(p), "messages[%zu].role", i);
        return bad_value(e, p, "unknown role", role);
    }
    e->total += OPENAI_MESSAGE_OVERHEAD_TOKENS;
    add_text(e, r, strlen(r));
    if (json_object_get(m, "name")) {
        e->total += OPENAI_NAME_OVERHEAD_TOKENS;
        add_string_field(e, m, "name", p, 0);
    }
    char cp[PATH_MAX_BYTES];
    path_fmt(cp, sizeof(cp), "%s.content", p);
    if (openai_content(e, json_object_get(m, "content"), cp) != 0)
        return e->rc;
    json_t *calls = json_object_get(m, "tool_calls");
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call)
    {
        json_t *fn = json_object_get(call, "function");
        path_fmt(cp, sizeof(cp), "%s.tool_calls[%zu].function", p, k);
        if (!json_is_object(fn))
            return bad_value(e, cp, "not an object:", fn);
        add_string_field(e, fn, "name", cp, 1);
        add_string_field(e, fn, "arguments", cp, 0);
    }
    return e->rc;
}

static int estimate_openai(est_t *e, const json_t *root, sl_estimate_t *out)
{
    json_t *v = json_object_get(root, "max_completion_tokens");
    if (read_count(e, root, v ? "max_completion_tokens" : "max_tokens", &out->output_tokens))
        return e->rc;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_array(tools))
        return bad_value(e, "tools", "not an array:", tools);
    if (tools && json_array_size(tools) && add_json(e, tools))
        return e->rc;
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_array(messages))
        return bad_value(e, "messages", "missing or not an array:", messages);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        if (openai_message(e, m, i) != 0)
            return e->rc;
    }
    e->total += OPENAI_REPLY_OVERHEAD_TOKENS;
    out->input_tokens = e->total;
    out->cached_tokens = 0;
    return 0;
}

/* ---- OpenAI Responses: counted as the Chat Completions request it amounts to ---- */

/* One message's overhead and its role's text. */
static int responses_turn(est_t *e, const char *role)
{
    e->total += OPENAI_MESSAGE_OVERHEAD_TOKENS;
    return add_text(e, role, strlen(role));
}

/* Content of a message or a function_call_output: a string, or parts with text
 * (input_text, output_text, refusal, summary_text, ...) or input_image; any other part
 * is counted as its JSON text. */
static int responses_part(est_t *e, json_t *part, const char *p, const char *t)
{
    json_t *text = json_object_get(part, "text");
    if (t && strcmp(t, "input_image") == 0 && json_is_string(json_object_get(part, "image_url")))
        openai_image(e, part, p);
    else if (json_is_string(text) && !(t && strcmp(t, "input_image") == 0))
        add_text(e, json_string_value(text), json_string_length(text));
    else
        add_block_json(e, part);
    return 0;
}

static int responses_content(est_t *e, const json_t *content, const char *path)
{
    return content_parts(e, content, path, responses_part);
}

static int responses_item(est_t *e, const json_t *item, size_t i)
{
    char p[PATH_MAX_BYTES], cp[PATH_MAX_BYTES];
    if (item_object(e, p, sizeof(p), item, "input[%zu]", i) != 0)
        return e->rc;
    json_t *type = json_object_get(item, "type");
    const char *t = json_string_value(type);
    if (type && !t) {
        path_fmt(cp, sizeof(cp), "%s.type", p);
        return bad_value(e, cp, "not a string:", type);
    }
    if (!t || strcmp(t, "message") == 0) {
        json_t *role = json_object_get(item, "role");
        const char *r = json_string_value(role);
        static const char *const roles[] = {"user", "assistant", "system", "developer"};
        int known = 0;
        for (size_t k = 0; r && k < sizeof(roles) / sizeof(roles[0]); k++)
            known |= strcmp(r, roles[k]) == 0;
        if (!known) {
            path_fmt(cp, sizeof(cp), "%s.role", p);
            return bad_value(e, cp, "unknown role", role);
        }
        responses_turn(e, r);
        path_fmt(cp, sizeof(cp), "%s.content", p);
        return responses_content(e, json_object_get(item, "content"), cp);
    }
    if (strcmp(t, "function_call") == 0) {
        responses_turn(e, "assistant");
        add_string_field(e, item, "name", p, 1);
        add_string_field(e, item, "arguments", p, 0);
        return e->rc;
    }
    if (strcmp(t, "function_call_output") == 0) {
        responses_turn(e, "tool");
        path_fmt(cp, sizeof(cp), "%s.output", p);
        return responses_content(e, json_object_get(item, "output"), cp);
    }
    if (strcmp(t, "reasoning") == 0) {
        /* What the model reads back of its reasoning: the summary texts. */
        responses_turn(e, "assistant");
        path_fmt(cp, sizeof(cp), "%s.summary", p);
        json_t *summary = json_object_get(item, "summary");
        return json_is_array(summary) ? responses_content(e, summary, cp) : 0;
    }
    /* Item types of built-in tools (web_search_call, computer_call, ...): their JSON. */
    responses_turn(e, "user");
    return add_block_json(e, item);
}

static int estimate_responses(est_t *e, const json_t *root, sl_estimate_t *out)
{
    if (read_count(e, root, "max_output_tokens", &out->output_tokens))
        return e->rc;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_array(tools))
        return bad_value(e, "tools", "not an array:", tools);
    if (tools && json_array_size(tools) && add_json(e, tools))
        return e->rc;
    json_t *instructions = json_object_get(root, "instructions");
    if (json_is_string(instructions)) {
        responses_turn(e, "system");
        add_text(e, json_string_value(instructions), json_string_length(instructions));
    } else if (instructions && !json_is_null(instructions)) {
        return bad_value(e, "instructions", "not a string:", instructions);
    }
    json_t *input = json_object_get(root, "input");
    if (json_is_string(input)) {
        responses_turn(e, "user");
        add_text(e, json_string_value(input), json_string_length(input));
    } else if (json_is_array(input)) {
        size_t i;
        json_t *item;
        json_array_foreach(input, i, item)
        {
            if (responses_item(e, item, i) != 0)
                return e->rc;
        }
    } else if (input && !json_is_null(input)) {
        return bad_value(e, "input", "not a string or an array of items:", input);
    }
    if (e->rc)
        return e->rc;
    e->total += OPENAI_REPLY_OVERHEAD_TOKENS;
    out->input_tokens = e->total;
    out->cached_tokens = 0;
    return 0;
}

/* The rules of SL_API_AUTO, documented in the header. */
sl_api_t sl_estimate_detect_api(const json_t *root)
{
    if (json_object_get(root, "max_completion_tokens"))
        return SL_API_OPENAI;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(root, "messages"), i, m)
    {
        const char *r = json_string_value(json_object_get(m, "role"));
        if (r && (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0 ||
                  strcmp(r, "tool") == 0))
            return SL_API_OPENAI;
        size_t k;
        json_t *part;
        json_array_foreach(json_object_get(m, "content"), k, part)
        {
            const char *t = json_string_value(json_object_get(part, "type"));
            if (t && strcmp(t, "image_url") == 0)
                return SL_API_OPENAI;
        }
    }
    return SL_API_ANTHROPIC;
}

int sl_estimate_request(sl_tokenizer_t *tok, sl_api_t api, const char *body, size_t body_len,
                        sl_estimate_t *out, char *err, size_t err_size)
{
    if (!tok || !body || !out)
        return SL_TOK_EINVAL;
    memset(out, 0, sizeof(*out));
    est_t e = {tok, 0, 0, err, err_size, 0};
    json_error_t jerr;
    json_t *root = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fail(&e, SL_TOK_EREQUEST, "body:%d:%d: invalid JSON: %s", jerr.line, jerr.column,
                    jerr.text);
    int rc = sl_estimate_json(tok, api, root, out, err, err_size);
    json_decref(root);
    return rc;
}

int sl_estimate_json(sl_tokenizer_t *tok, sl_api_t api, const json_t *root, sl_estimate_t *out,
                     char *err, size_t err_size)
{
    if (!tok || !root || !out)
        return SL_TOK_EINVAL;
    memset(out, 0, sizeof(*out));
    est_t e = {tok, 0, 0, err, err_size, 0};
    if (!json_is_object(root)) {
        bad_value(&e, "body", "not a JSON object:", root);
    } else {
        if (api == SL_API_AUTO)
            api = sl_estimate_detect_api(root);
        if (api == SL_API_OPENAI)
            estimate_openai(&e, root, out);
        else if (api == SL_API_OPENAI_RESPONSES)
            estimate_responses(&e, root, out);
        else
            estimate_anthropic(&e, root, out);
    }
    if (e.rc)
        memset(out, 0, sizeof(*out));
    return e.rc;
}
