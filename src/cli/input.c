/* The subcommands' input helpers: reading a whole file or standard input (for [FILE|-]),
 * and the table of options whose value is plain text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int sl_cli_read_input(const char *path, char **data, size_t *len, char *err, size_t err_size)
{
    int from_stdin = !path || strcmp(path, "-") == 0;
    const char *name = from_stdin ? "<stdin>" : path;
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    *data = NULL;
    *len = 0;
    if (!f) {
        snprintf(err, err_size, "%s: %s", name, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    int rc = 0;
    for (;;) {
        if (!buf) {
            snprintf(err, err_size, "%s: out of memory", name);
            rc = -1;
            break;
        }
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f)) {
            snprintf(err, err_size, "%s: %s", name, strerror(errno));
            rc = -1;
            break;
        }
        if (feof(f))
            break;
        if (cap - n - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    if (!from_stdin)
        fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

bool sl_cli_text_option(const sl_cli_text_option_t *options, size_t n, int argc, char **argv,
                        int *i)
{
    if (*i + 1 >= argc) return false;
    for (size_t k = 0; k < n; k++) {
        if (strcmp(argv[*i], options[k].flag) == 0) {
            *options[k].value = argv[++*i];
            return true;
        }
    }
    return false;
}
