/* Generates the tokenizer corpus: prose, C, Python, JSON, CJK, emoji, right-to-left text,
 * compatibility characters, a sweep of every assigned code point, and adversarial inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "corpus.h"

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
    uint64_t rng;
} gen_t;

static void put(gen_t *g, const char *s, size_t n)
{
    if (g->oom)
        return;
    if (g->n + n + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 1 << 16;
        while (g->n + n + 1 > cap)
            cap *= 2;
        char *p = realloc(g->p, cap);
        if (!p) {
            g->oom = 1;
            return;
        }
        g->p = p;
        g->cap = cap;
    }
    memcpy(g->p + g->n, s, n);
    g->n += n;
}

static void puts_(gen_t *g, const char *s)
{
    put(g, s, strlen(s));
}

static uint32_t rnd(gen_t *g, uint32_t below)
{
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return (uint32_t)(g->rng % below);
}

static const char *pick(gen_t *g, const char *const *list, size_t n)
{
    return list[rnd(g, (uint32_t)n)];
}

#define PICK(g, list) pick(g, list, sizeof(list) / sizeof(list[0]))

static void put_cp(gen_t *g, uint32_t cp)
{
    utf8proc_uint8_t b[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, b);
    put(g, (const char *)b, (size_t)n);
}

static const char *const words[] = {
    "the", "quota", "of", "a", "provider", "is", "shared", "by", "every", "agent", "in",
    "fleet", "tokens", "per", "minute", "and", "requests", "Sluice", "leases", "budget",
    "when", "limit", "reached", "it's", "they're", "we've", "I'm", "you'll", "he'd", "don't",
    "can't", "Internationalization", "antidisestablishmentarianism", "however", "Therefore",
    "naïve", "café", "résumé", "coöperate", "jalapeño", "Straße", "Zürich", "façade",
    "2024", "3.14159", "1,000,000", "v1.2.3", "e.g.", "i.e.", "U.S.", "O'Brien", "x86_64",
    "rate-limited", "well-known", "self-hosted", "HTTP/1.1", "https://example.com/a?b=c"};
static const char *const punct[] = {".", ",", ";", ":", "!", "?", " -", " --", "...", "\u2014",
                                    "\u201c", "\u201d", "(", ")", "'", "\""};

static void gen_prose(gen_t *g, size_t bytes)
{
    while (g->n < bytes) {
        size_t sentence = 4 + rnd(g, 18);
        for (size_t w = 0; w < sentence; w++) {
            const char *word = PICK(g, words);
            if (w == 0 && word[0] >= 'a' && word[0] <= 'z') {
                char c = (char)(word[0] - 32);
                put(g, &c, 1);
                puts_(g, word + 1);
            } else {
                puts_(g, word);
            }
            if (rnd(g, 9) == 0)
                puts_(g, PICK(g, punct));
            puts_(g, rnd(g, 40) == 0 ? "  " : " ");
        }
        puts_(g, rnd(g, 2) ? ". " : "? ");
        if (rnd(g, 6) == 0)
            puts_(g, rnd(g, 3) ? "\n\n" : "\n   \n\t");
    }
}

static const char *const c_types[] = {"int", "size_t", "uint64_t", "const char *", "double",
                                      "struct sl_pool *", "void"};
static const char *const c_names[] = {"tokens_in", "budget_per_s", "lease", "queue_head",
                                      "refill_ms", "n", "i", "err", "pool", "bucket_level"};

static void gen_c(gen_t *g, size_t bytes)
{
    char line[256];
    unsigned fn = 0;
    while (g->n < bytes) {
        snprintf(line, sizeof(line), "/* Returns %s of the %s; -1 on error. */\n%s sl_fn_%u(%s%s, %s %s)\n{\n",
                 PICK(g, c_names), PICK(g, c_names), PICK(g, c_types), fn++, PICK(g, c_types),
                 PICK(g, c_names), PICK(g, c_types), PICK(g, c_names));
        puts_(g, line);
        size_t stmts = 2 + rnd(g, 8);
        for (size_t s = 0; s < stmts; s++) {
            switch (rnd(g, 5)) {
            case 0:
                snprintf(line, sizeof(line), "    if (%s >= %u && %s != NULL)\n        return -%u;\n",
                         PICK(g, c_names), rnd(g, 100000), PICK(g, c_names), rnd(g, 10));
                break;
            case 1:
                snprintf(line, sizeof(line), "    for (size_t %s = 0; %s < %u; %s++)\n        %s[%s] += 0x%x;\n",
                         "i", "i", rnd(g, 1000), "i", PICK(g, c_names), "i", rnd(g, 65536));
                break;
            case 2:
                snprintf(line, sizeof(line), "    fprintf(stderr, \"%s: %%s (%%d)\\n\", %s, errno);\n",
                         PICK(g, words), PICK(g, c_names));
                break;
            case 3:
                snprintf(line, sizeof(line), "    %s->%s = (%s)%s * 1e-%u;  // %s\n", PICK(g, c_names),
                         PICK(g, c_names), PICK(g, c_types), PICK(g, c_names), rnd(g, 9), PICK(g, words));
                break;
            default:
                snprintf(line, sizeof(line), "\t%s <<= %u; %s ^= ~%s;\n", PICK(g, c_names), rnd(g, 63),
                         PICK(g, c_names), PICK(g, c_names));
            }
            puts_(g, line);
        }
        puts_(g, "    return 0;\n}\n\n");
    }
}

static void gen_python(gen_t *g, size_t bytes)
{
    char line[256];
    unsigned cls = 0;
    while (g->n < bytes) {
        snprintf(line, sizeof(line), "class Pool%u(Base):\n    \"\"\"%s %s %s.\"\"\"\n\n", cls++,
                 PICK(g, words), PICK(g, words), PICK(g, words));
        puts_(g, line);
        size_t methods = 1 + rnd(g, 4);
        for (size_t m = 0; m < methods; m++) {
            snprintf(line, sizeof(line),
                     "    def %s_%zu(self, %s: int = %u, *args, **kwargs) -> dict[str, float]:\n"
                     "        result = {k: v ** 2 for k, v in self.%s.items() if v > %u}\n"
                     "        if not result:\n            raise ValueError(f\"{%s!r} is empty\")\n"
                     "        return result  # %s\n\n",
                     PICK(g, c_names), m, PICK(g, c_names), rnd(g, 512), PICK(g, c_names),
                     rnd(g, 99), PICK(g, c_names), PICK(g, words));
            puts_(g, line);
        }
    }
}

static void gen_json(gen_t *g, size_t bytes)
{
    char line[320];
    puts_(g, "[\n");
    unsigned id = 0;
    while (g->n < bytes) {
        snprintf(line, sizeof(line),
                 "  {\"id\": %u, \"name\": \"%s\", \"tokens_per_minute\": %u, \"ratio\": %u.%03u,"
                 " \"tags\": [\"%s\", \"%s\"], \"nested\": {\"ok\": %s, \"v\": null,"
                 " \"s\": \"\\u00e9\\n\\t%s\"}},\n",
                 id++, PICK(g, words), rnd(g, 4000000), rnd(g, 3), rnd(g, 1000), PICK(g, words),
                 PICK(g, words), rnd(g, 2) ? "true" : "false", PICK(g, words));
        puts_(g, line);
    }
    puts_(g, "  {}\n]\n");
}

/* Code points drawn from ranges; each range is [lo, hi]. */
typedef struct {
    uint32_t lo, hi;
} range_t;

static void gen_script(gen_t *g, size_t bytes, const range_t *r, size_t nr, const char *const *extra,
                       size_t nextra, const char *space)
{
    while (g->n < bytes) {
        size_t run = 1 + rnd(g, 12);
        const range_t *rg = &r[rnd(g, (uint32_t)nr)];
        for (size_t k = 0; k < run; k++)
            put_cp(g, rg->lo + rnd(g, rg->hi - rg->lo + 1));
        if (rnd(g, 3) == 0)
            puts_(g, extra[rnd(g, (uint32_t)nextra)]);
        puts_(g, rnd(g, 4) ? space : "\n");
    }
}

static void gen_cjk(gen_t *g, size_t bytes)
{
    static const range_t r[] = {{0x4e00, 0x9fff}, {0x3041, 0x3096}, {0x30a1, 0x30fa},
                                {0xac00, 0xd7a3}, {0xff10, 0xff5a}, {0xff66, 0xff9d},
                                {0x3400, 0x4dbf}, {0x20000, 0x2a6df}, {0x3200, 0x32ff}};
    static const char *const extra[] = {"\u3002", "\u3001", "\uff01", "\uff1f", "\u300c", "\u300d",
                                        "2024\u5e74", "GPU", "\u3000", "\u30fc"};
    gen_script(g, bytes, r, sizeof(r) / sizeof(r[0]), extra, sizeof(extra) / sizeof(extra[0]), "");
}

static void gen_emoji(gen_t *g, size_t bytes)
{
    static const char *const e[] = {
        "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467",
        "\U0001F1EF\U0001F1F5", "\u2764\uFE0F", "\U0001F3F3\uFE0F\u200D\U0001F308", "\u263A",
        "\U0001F9D1\u200D\U0001F4BB", "#\uFE0F\u20E3", "\U0001F525", "\U0001FAE0", "\u2728"};
    while (g->n < bytes) {
        puts_(g, PICK(g, words));
        puts_(g, rnd(g, 2) ? " " : "");
        size_t k = 1 + rnd(g, 4);
        while (k--)
            puts_(g, PICK(g, e));
        puts_(g, rnd(g, 5) ? " " : "\n");
    }
}

static void gen_rtl(gen_t *g, size_t bytes)
{
    static const range_t r[] = {{0x0621, 0x064a}, {0x05d0, 0x05ea}, {0x0660, 0x0669},
                                {0xfe70, 0xfefc}, {0xfb50, 0xfbb1}, {0x064b, 0x0652},
                                {0x06f0, 0x06f9}, {0x05b0, 0x05c2}};
    static const char *const extra[] = {"\u060c", "\u061f", "\u200f", "\u200e", " 123 ", "\u202b",
                                        "\u202c", " ABC "};
    gen_script(g, bytes, r, sizeof(r) / sizeof(r[0]), extra, sizeof(extra) / sizeof(extra[0]), " ");
}

/* Characters NFKC changes, combining marks, unusual spaces, other scripts. */
static void gen_compat(gen_t *g, size_t bytes)
{
    static const range_t r[] = {{0x0300, 0x036f}, {0x00c0, 0x017f}, {0xfb00, 0xfb06},
                                {0x2070, 0x209c}, {0x2150, 0x2189}, {0x1d400, 0x1d7ff},
                                {0x2000, 0x200b}, {0x0391, 0x03c9}, {0x0410, 0x044f},
                                {0x0900, 0x097f}, {0x0e01, 0x0e5b}, {0x3300, 0x33ff},
                                {0x2460, 0x24ff}, {0x1100, 0x11ff}, {0xf900, 0xfaff}};
    static const char *const extra[] = {"e\u0301", "A\u030a", "\u00a0", "\u2028", "\xc2\x85",
                                        "\u180e", "\u3000", "\u2126", "\u212b", "\ufb01",
                                        "\u1e9b\u0323", "\ufeff", "\t\v\f\r\n"};
    gen_script(g, bytes, r, sizeof(r) / sizeof(r[0]), extra, sizeof(extra) / sizeof(extra[0]), " ");
}

/* Every code point utf8proc knows as assigned, in a few contexts. Unassigned ones are
 * left out: they get properties only in later Unicode versions, which node's ICU may
 * already have and Debian's utf8proc and PCRE2 not yet (docs/tokenizer.md). */
static void gen_all_code_points(gen_t *g)
{
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if ((cp >= 0xd800 && cp <= 0xdfff) || utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_CN)
            continue;
        puts_(g, "x");
        put_cp(g, cp);
        put_cp(g, cp);
        puts_(g, cp % 3 ? " " : "1");
        put_cp(g, cp);
        puts_(g, cp % 16 ? "" : "\n");
    }
}

static void gen_spaces(gen_t *g)
{
    for (int i = 0; i < 100000; i++)
        puts_(g, " ");
}

/* 1 MB with no whitespace: letters, digits, punctuation and CJK run together. */
static void gen_word_mixed(gen_t *g)
{
    static const char *const bits[] = {"abc", "XYZ", "0123", "__", "->", "\u4e2d\u6587", "é",
                                       "\U0001F600", "{}", "%%", "q", "Zz9"};
    while (g->n < 1000000)
        puts_(g, PICK(g, bits));
}

/* A single 32 KiB letter piece: the largest one-piece word node counts in about a
 * second (its merge is quadratic); sluice's 1 MB case is in test_tokenizer.c. */
static void gen_word_letters(gen_t *g)
{
    while (g->n < 32768) {
        char c = (char)('a' + rnd(g, 26));
        put(g, &c, 1);
    }
}

static void gen_invalid_utf8(gen_t *g)
{
    static const char *const bad[] = {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82",
                                      "\x80", "\xbf\xbf", "\xfe\xff", "\xe0\x80\x80",
                                      "\xf0\x80\x80\x80", "\xf5\x80", "\xc2", "\xef\xbb\xbf",
                                      "\xf0\x9f\x98", "\xe0\xa0"};
    while (g->n < 200000) {
        if (rnd(g, 2)) {
            puts_(g, PICK(g, bad));
        } else {
            char c = (char)rnd(g, 256);
            put(g, &c, 1);
        }
        if (rnd(g, 3) == 0)
            puts_(g, PICK(g, words));
        if (rnd(g, 4) == 0)
            puts_(g, " ");
    }
    puts_(g, "\xe2\x82"); /* cut off at the very end */
}

static void gen_nul(gen_t *g)
{
    while (g->n < 100000) {
        puts_(g, PICK(g, words));
        size_t k = rnd(g, 4);
        while (k--)
            put(g, "\0", 1);
        puts_(g, rnd(g, 2) ? " " : "");
    }
}

static void gen_specials(gen_t *g)
{
    static const char *const sp[] = {"<EOT>", "<META>", "<META_START>", "<META_END>", "<SOS>"};
    static const char *const near[] = {"<EOT", "EOT>", "<META_STAR", "< EOT>", "<eot>",
                                       "\uff1cEOT\uff1e", "<<EOT>>", "<META_END><SOS>"};
    for (size_t i = 0; i < 5; i++) {
        puts_(g, sp[i]);
        puts_(g, "\n");
    }
    while (g->n < 50000) {
        puts_(g, rnd(g, 2) ? PICK(g, sp) : PICK(g, near));
        puts_(g, rnd(g, 3) ? " " : rnd(g, 2) ? "   " : "");
        if (rnd(g, 3) == 0)
            puts_(g, PICK(g, words));
    }
}

typedef struct {
    const char *name;
    int is_text;
    size_t bytes; /* target size for text parts */
    void (*gen_sized)(gen_t *, size_t);
    void (*gen)(gen_t *);
} part_t;

static const part_t parts[] = {
    {"prose.txt", 1, 300000, gen_prose, NULL},
    {"source.c", 1, 200000, gen_c, NULL},
    {"source.py", 1, 150000, gen_python, NULL},
    {"data.json", 1, 150000, gen_json, NULL},
    {"cjk.txt", 1, 120000, gen_cjk, NULL},
    {"emoji.txt", 1, 80000, gen_emoji, NULL},
    {"rtl.txt", 1, 80000, gen_rtl, NULL},
    {"compat.txt", 1, 80000, gen_compat, NULL},
    {"all_code_points.txt", 0, 0, NULL, gen_all_code_points},
    {"spaces_100k.txt", 0, 0, NULL, gen_spaces},
    {"word_1mb_mixed.txt", 0, 0, NULL, gen_word_mixed},
    {"word_32k_letters.txt", 0, 0, NULL, gen_word_letters},
    {"invalid_utf8.bin", 0, 0, NULL, gen_invalid_utf8},
    {"nul_bytes.bin", 0, 0, NULL, gen_nul},
    {"special_tokens.txt", 0, 0, NULL, gen_specials},
};

size_t corpus_part_count(void)
{
    return sizeof(parts) / sizeof(parts[0]);
}

const char *corpus_part_name(size_t i)
{
    return i < corpus_part_count() ? parts[i].name : NULL;
}

int corpus_part_is_text(size_t i)
{
    return i < corpus_part_count() && parts[i].is_text;
}

char *corpus_part(size_t i, size_t *len)
{
    if (i >= corpus_part_count())
        return NULL;
    gen_t g = {NULL, 0, 0, 0, 0x9e3779b97f4a7c15ULL + i};
    if (parts[i].gen_sized)
        parts[i].gen_sized(&g, parts[i].bytes);
    else
        parts[i].gen(&g);
    if (g.oom) {
        free(g.p);
        return NULL;
    }
    put(&g, "", 0);
    *len = g.n;
    return g.p;
}
