/* sluice estimate: the input, cached and output tokens of an API request body. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sluice/tokenizer.h"
#include "tokenize_input.h"

static void estimate_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice estimate [--api anthropic|openai|responses] [FILE|-]\n\n"
            "Reads a request body (JSON) from FILE (default: standard input) and prints\n"
            "  {\"input_tokens\":N,\"cached_tokens\":N,\"output_tokens\":N}\n"
            "input_tokens: prompt tokens after the last cache_control breakpoint;\n"
            "cached_tokens: prompt tokens up to and including it (Anthropic only);\n"
            "output_tokens: max_tokens (OpenAI: max_completion_tokens or max_tokens;\n"
            "responses: max_output_tokens).\n"
            "Without --api the body's shape decides (see docs/tokenizer.md).\n\n"
            "exit codes: 0 ok, 1 invalid or unreadable body, 2 usage error,\n"
            "            3 vocabulary missing or invalid\n");
}

/* Prints the estimate of the request body, read as API *(sl_api_t *)ud. */
static int print_estimate(sl_tokenizer_t *tok, const char *body, size_t len, void *ud, char *err,
                          size_t err_size)
{
    sl_estimate_t est;
    if (sl_estimate_request(tok, *(sl_api_t *)ud, body, len, &est, err, err_size) != 0) return -1;
    printf("{\"input_tokens\":%" PRId64 ",\"cached_tokens\":%" PRId64 ",\"output_tokens\":%" PRId64
           "}\n",
           est.input_tokens, est.cached_tokens, est.output_tokens);
    return 0;
}

int sl_cli_estimate(int argc, char **argv)
{
    const char *path = NULL;
    sl_api_t api = SL_API_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            estimate_usage(stdout);
            return SL_EXIT_OK;
        }
        if (strcmp(a, "--api") == 0) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (strcmp(v, "anthropic") == 0) {
                api = SL_API_ANTHROPIC;
            } else if (strcmp(v, "openai") == 0) {
                api = SL_API_OPENAI;
            } else if (strcmp(v, "responses") == 0) {
                api = SL_API_OPENAI_RESPONSES;
            } else {
                fprintf(stderr, "sluice estimate: --api: unknown API \"%s\"\n", v);
                return SL_EXIT_USAGE;
            }
            continue;
        }
        if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "sluice estimate: unknown option \"%s\"\n", a);
            estimate_usage(stderr);
            return SL_EXIT_USAGE;
        }
        if (path) {
            fprintf(stderr, "sluice estimate: more than one FILE (\"%s\")\n", a);
            return SL_EXIT_USAGE;
        }
        path = a;
    }
    return sl_cli_tokenize_input("sluice estimate", path, print_estimate, &api);
}
