/* fuzz_resync.c - libFuzzer target for the engine's resync from provider rate-limit headers.
 *
 * The input is header lines "name: value\n" as a provider might send them. They go to
 * sl_engine_resync() on a pool holding a lease and a queued ticket; beyond memory errors
 * the target checks that a refused resync changes nothing, that headers never raise a
 * level, and that every invariant of sl_engine_check() still holds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEADERS 16
#define T0 1796000000.0

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *names[MAX_HEADERS], *values[MAX_HEADERS];
    size_t n = 0;
    for (char *line = text, *next; line && n < MAX_HEADERS; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        char *value = colon + 1;
        while (*value == ' ') value++;
        names[n] = line;
        values[n] = value;
        n++;
    }

    sl_engine_t *e = sl_engine_new(NULL);
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 100000;
    cfg.output_tpm = 20000;
    cfg.rpm = 100;
    cfg.tokens_tpm = 150000;
    if (!e || sl_engine_configure_pool(e, "default", &cfg, T0) != SL_OK) abort();
    sl_request_t r = {.agent = "a", .input_tokens = 80000, .output_tokens = 1000};
    sl_decision_t d;
    if (sl_engine_request(e, &r, T0, &d) != SL_OK || d.status != SL_GRANTED) abort();
    r.agent = "b";
    r.input_tokens = 30000;
    if (sl_engine_request(e, &r, T0, &d) != SL_OK) abort();

    sl_pool_info_t before, after;
    sl_engine_pool_info(e, "default", &before);
    int changed = 0;
    int rc = sl_engine_resync(e, "default", names, values, n, T0, &changed);
    sl_engine_pool_info(e, "default", &after);
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (rc != SL_OK && after.level[b] != before.level[b]) abort();
        /* A level may only rise when a limit was adopted (new capacity). */
        if (after.limit[b] == before.limit[b] && after.level[b] > before.level[b] + 1e-6) abort();
    }
    if (sl_engine_check(e) != SL_OK) abort();
    sl_engine_free(e);
    free(text);
    return 0;
}
