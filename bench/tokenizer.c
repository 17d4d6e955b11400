/* Tokenizer benchmark: throughput of sluice and of @anthropic-ai/tokenizer (node) on the
 * generated text corpus in the same run, and the time to count an ~80,000-token prompt.
 * Prints measured figures only. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"
#include "sluice/tokenizer.h"

#define ITERATIONS 5

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Best of ITERATIONS counts of text, with a fresh tokenizer's first (cold-cache) run
 * reported separately. */
static void time_count(sl_tokenizer_t *tok, const char *text, size_t len, int64_t *tokens,
                       double *best_ms)
{
    *best_ms = 1e18;
    for (int i = 0; i < ITERATIONS; i++) {
        double t0 = now_ms();
        if (sl_tokenizer_count(tok, text, len, tokens) != 0) {
            fprintf(stderr, "bench_tokenizer: count failed\n");
            exit(1);
        }
        double ms = now_ms() - t0;
        if (ms < *best_ms)
            *best_ms = ms;
    }
}

int main(void)
{
    char err[512];
    sl_tokenizer_t *tok;
    if (sl_tokenizer_load(NULL, &tok, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench_tokenizer: %s\n", err);
        return 1;
    }
    /* The corpus: every natural-text part, concatenated. */
    size_t len = 0;
    char *corpus = NULL;
    for (size_t i = 0; i < corpus_part_count(); i++) {
        if (!corpus_part_is_text(i))
            continue;
        size_t n;
        char *part = corpus_part(i, &n);
        char *grown = part ? realloc(corpus, len + n + 1) : NULL;
        if (!grown)
            return 1;
        corpus = grown;
        memcpy(corpus + len, part, n);
        len += n;
        free(part);
    }
    char path[] = "/tmp/sluice-bench-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, corpus, len) != (ssize_t)len)
        return 1;
    close(fd);

    int64_t tokens;
    double ms;
    time_count(tok, corpus, len, &tokens, &ms);
    double mb = len / 1e6;
    printf("corpus: %zu bytes, %" PRId64 " tokens (prose, C, Python, JSON, CJK, emoji, RTL, "
           "compatibility characters)\n", len, tokens);
    printf("sluice:  %8.2f ms  %7.2f MB/s  %10.0f tokens/s  (best of %d)\n", ms, mb / (ms / 1e3),
           tokens / (ms / 1e3), ITERATIONS);

    /* A prose prompt of about 80,000 tokens, counted by a freshly loaded tokenizer. */
    size_t plen;
    char *prose = corpus_part(0, &plen);
    int64_t ptokens = 0;
    size_t cut = plen;
    if (prose && sl_tokenizer_count(tok, prose, plen, &ptokens) == 0 && ptokens > 80000)
        cut = (size_t)((double)plen * 80000 / (double)ptokens);
    sl_tokenizer_t *fresh;
    if (prose && sl_tokenizer_load(NULL, &fresh, err, sizeof(err)) == 0) {
        double t0 = now_ms();
        sl_tokenizer_count(fresh, prose, cut, &ptokens);
        double cold = now_ms() - t0;
        double warm;
        time_count(fresh, prose, cut, &ptokens, &warm);
        printf("prompt:  %" PRId64 " tokens (%zu bytes of prose): %.2f ms first count, %.2f ms "
               "best of %d\n", ptokens, cut, cold, warm, ITERATIONS);
        sl_tokenizer_free(fresh);
    }
    free(prose);

    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "cd '%s' && node bench.js '%s' %d 2>&1", SL_NODE_DIR, path, 3);
    FILE *p = access(SL_NODE_DIR "/../node_modules/@anthropic-ai/tokenizer", F_OK) == 0 ? popen(cmd, "r") : NULL;
    char line[1024] = "";
    if (p && fgets(line, sizeof(line), p)) {
        double count_ms = 0, encode_ms = 0;
        int64_t ntokens = 0;
        const char *c = strstr(line, "\"count_ms\":"), *e = strstr(line, "\"encode_ms\":"),
                   *t = strstr(line, "\"tokens\":");
        if (c && e && t) {
            count_ms = atof(c + 11);
            encode_ms = atof(e + 12);
            ntokens = atoll(t + 9);
            printf("npm countTokens(): %8.2f ms  %7.2f MB/s  %10.0f tokens/s  (%" PRId64
                   " tokens; builds its tokenizer per call)\n",
                   count_ms, mb / (count_ms / 1e3), ntokens / (count_ms / 1e3), ntokens);
            printf("npm encode():      %8.2f ms  %7.2f MB/s  %10.0f tokens/s  (tokenizer built "
                   "beforehand)\n", encode_ms, mb / (encode_ms / 1e3), ntokens / (encode_ms / 1e3));
            printf("ratio sluice/npm: %.1fx vs countTokens(), %.1fx vs encode()\n", count_ms / ms,
                   encode_ms / ms);
        } else {
            printf("npm: unexpected output: %s", line);
        }
    } else {
        printf("npm: not measured (node or tests/node_modules missing)\n");
    }
    if (p)
        pclose(p);
    unlink(path);
    free(corpus);
    sl_tokenizer_free(tok);
    return 0;
}
