/* Where the tokenizer vocabulary is looked for when no path is given: the environment,
 * the source tree (programs run from the build tree) or the installed prefix. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/tokenizer.h"

/* Set by src/tokenizer/CMakeLists.txt; the fallbacks keep a hand-made build working. */
#ifndef SL_BUILD_DIR
#define SL_BUILD_DIR ""
#endif
#ifndef SL_SOURCE_VOCAB_PATH
#define SL_SOURCE_VOCAB_PATH "data/claude.json"
#endif
#ifndef SL_BIN_TO_DATA_DIR
#define SL_BIN_TO_DATA_DIR "../share"
#endif
#ifndef SL_INSTALLED_VOCAB_PATH
#define SL_INSTALLED_VOCAB_PATH "/usr/local/share/sluice/claude.json"
#endif

#define VOCAB_UNDER_DATA "/sluice/claude.json"

/* The running program's directory (without the trailing '/') in `dir`; -1 when unknown. */
static int program_dir(char *dir, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1) return -1;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) return -1;
    *slash = '\0';
    return 0;
}

/* True when `path` is `dir` or below it. */
static int is_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return n > 0 && strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

const char *sl_tokenizer_default_path(void)
{
    static char installed[PATH_MAX + sizeof(SL_BIN_TO_DATA_DIR) + sizeof(VOCAB_UNDER_DATA)];
    const char *env = getenv("SLUICE_VOCAB");
    if (env && *env) return env;
    char dir[PATH_MAX];
    if (program_dir(dir, sizeof(dir)) < 0) return SL_INSTALLED_VOCAB_PATH;
    if (is_under(dir, SL_BUILD_DIR)) return SL_SOURCE_VOCAB_PATH;
    /* "/usr/bin" and "../share" make "/usr/share": the path a message names reads plainly. */
    const char *rel = SL_BIN_TO_DATA_DIR;
    char *slash;
    while (strncmp(rel, "../", 3) == 0 && (slash = strrchr(dir, '/')) != NULL && slash > dir) {
        *slash = '\0';
        rel += 3;
    }
    if (!strcmp(rel, "..") && (slash = strrchr(dir, '/')) != NULL && slash > dir) {
        *slash = '\0';
        rel = "";
    }
    snprintf(installed, sizeof(installed), "%s%s%s%s", dir, *rel ? "/" : "", rel,
             VOCAB_UNDER_DATA);
    return installed;
}
