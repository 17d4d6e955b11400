/* Pre-tokenisation: the vocabulary's split pattern run with PCRE2 (UTF + UCP, JIT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer_internal.h"

struct sl__pretok {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    size_t jit_stack_bytes; /* 0 while the JIT uses its default stack */
    int jit; /* 1 when JIT compilation succeeded */
};

/* A run of 100,000 spaces backtracks once inside \s+(?!\S); the JIT needs a stack
 * larger than its 32 KiB default only for such runs, so it grows on demand. */
#define JIT_STACK_START_BYTES (32 * 1024)
#define JIT_STACK_MAX_BYTES (64 * 1024 * 1024)

/* tiktoken's regex engine (Rust's regex, via fancy-regex) defines \s as the Unicode
 * White_Space property. PCRE2 with UCP adds \h and \v, which include U+180E MONGOLIAN
 * VOWEL SEPARATOR, no longer White_Space since Unicode 6.3. So \s and \S are spelled out
 * as White_Space: the C0 controls TAB..CR, U+0085 and the separators \p{Z}. */
#define WHITE_SPACE_SET "\\t-\\r\\x{85}\\p{Z}"

/* Copies pat_str into a new string with \s and \S replaced by explicit classes.
 * Returns NULL when out of memory. */
static char *rewrite_white_space(const char *pat_str)
{
    size_t n = strlen(pat_str);
    size_t cap = n * 8 + 1;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t o = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat_str[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat_str[i + 1];
            const char *rep = NULL;
            if (e == 's')
                rep = in_class ? WHITE_SPACE_SET : "[" WHITE_SPACE_SET "]";
            else if (e == 'S' && !in_class)
                rep = "[^" WHITE_SPACE_SET "]";
            if (rep) {
                memcpy(out + o, rep, strlen(rep));
                o += strlen(rep);
            } else {
                out[o++] = c;
                out[o++] = e;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            out[o++] = c;
            /* A ']' right after '[' or '[^' is a literal member. */
            if (i + 1 < n && pat_str[i + 1] == '^')
                out[o++] = pat_str[++i];
            if (i + 1 < n && pat_str[i + 1] == ']')
                out[o++] = pat_str[++i];
            continue;
        }
        if (c == ']' && in_class)
            in_class = 0;
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

sl__pretok_t *sl__pretok_new(const char *pat_str, char *err, size_t err_size)
{
    sl__pretok_t *pt = calloc(1, sizeof(*pt));
    if (!pt) {
        if (err)
            snprintf(err, err_size, "out of memory");
        return NULL;
    }
    int ecode;
    PCRE2_SIZE eoff;
    char *pattern = rewrite_white_space(pat_str);
    if (!pattern) {
        if (err)
            snprintf(err, err_size, "out of memory");
        goto fail;
    }
    pt->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                             &ecode, &eoff, NULL);
    free(pattern);
    if (!pt->code) {
        if (err) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ecode, msg, sizeof(msg));
            snprintf(err, err_size, "pat_str: does not compile at offset %zu: %s", (size_t)eoff,
                     (const char *)msg);
        }
        goto fail;
    }
    pt->jit = pcre2_jit_compile(pt->code, PCRE2_JIT_COMPLETE) == 0;
    pt->md = pcre2_match_data_create_from_pattern(pt->code, NULL);
    pt->mctx = pcre2_match_context_create(NULL);
    if (!pt->md || !pt->mctx) {
        if (err)
            snprintf(err, err_size, "out of memory");
        goto fail;
    }
    pcre2_set_match_limit(pt->mctx, UINT32_MAX);
    pcre2_set_depth_limit(pt->mctx, UINT32_MAX);
    return pt;
fail:
    sl__pretok_free(pt);
    return NULL;
}

void sl__pretok_free(sl__pretok_t *pt)
{
    if (!pt)
        return;
    pcre2_jit_stack_free(pt->jit_stack);
    pcre2_match_context_free(pt->mctx);
    pcre2_match_data_free(pt->md);
    pcre2_code_free(pt->code);
    free(pt);
}

/* Replaces the JIT stack with one twice as large. Returns 0, or -1 at the cap. */
static int grow_jit_stack(sl__pretok_t *pt)
{
    size_t cur = pt->jit_stack_bytes ? pt->jit_stack_bytes : JIT_STACK_START_BYTES;
    if (cur >= JIT_STACK_MAX_BYTES)
        return -1;
    pcre2_jit_stack *js = pcre2_jit_stack_create(JIT_STACK_START_BYTES, cur * 2, NULL);
    if (!js)
        return -1;
    pcre2_jit_stack_free(pt->jit_stack);
    pt->jit_stack = js;
    pt->jit_stack_bytes = cur * 2;
    pcre2_jit_stack_assign(pt->mctx, NULL, js);
    return 0;
}

int sl__pretok_each(sl__pretok_t *pt, const unsigned char *p, size_t n, sl__piece_cb piece_cb,
                    void *ctx)
{
    size_t off = 0;
    while (off < n) {
        int rc = pt->jit ? pcre2_jit_match(pt->code, p, n, off, 0, pt->md, pt->mctx)
                         : pcre2_match(pt->code, p, n, off, PCRE2_NO_UTF_CHECK, pt->md, pt->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            return 0;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && grow_jit_stack(pt) == 0)
            continue;
        if (rc < 0)
            return SL_TOK_ENOMEM;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(pt->md);
        size_t start = ov[0], end = ov[1];
        if (end > start) {
            int cb = piece_cb(ctx, p + start, end - start);
            if (cb != 0)
                return cb;
            off = end;
        } else {
            /* An empty match (not possible with the Claude pattern): step one character. */
            off = end + 1;
            while (off < n && (p[off] & 0xc0) == 0x80)
                off++;
        }
    }
    return 0;
}
