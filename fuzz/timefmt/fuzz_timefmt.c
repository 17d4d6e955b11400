/* fuzz_timefmt.c - libFuzzer target for sl_parse_rfc3339 and sl_parse_duration. */

/* Both parsers get a NUL-terminated copy of the input, as header values reach
 * them. Beyond memory errors the target checks each parser's contract: an error
 * leaves the output alone, and a success is finite and inside the documented
 * range (years 0000-9999 give at most ±2.6e11 s; durations 0 to ten years). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL (-12345.5)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL) return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    double unix_s = SENTINEL;
    if (sl_parse_rfc3339(s, &unix_s) == SL_OK) {
        if (!isfinite(unix_s) || unix_s < -62167219200.0 - 86400 || unix_s > 253402300800.0 + 86400)
            abort();
    } else if (unix_s != SENTINEL) {
        abort();
    }

    double seconds = SENTINEL;
    if (sl_parse_duration(s, &seconds) == SL_OK) {
        if (!isfinite(seconds) || seconds < 0 || seconds > 315576000.0) abort();
    } else if (seconds != SENTINEL) {
        abort();
    }

    free(s);
    return 0;
}
