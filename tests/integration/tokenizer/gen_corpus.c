/* Writes every corpus part into DIR, one file per part, for the exactness test. */
#include <stdio.h>
#include <stdlib.h>

#include "corpus.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_corpus DIR\n");
        return 2;
    }
    for (size_t i = 0; i < corpus_part_count(); i++) {
        size_t len;
        char *data = corpus_part(i, &len);
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], corpus_part_name(i));
        FILE *f = data ? fopen(path, "wb") : NULL;
        if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "gen_corpus: %s: cannot write\n", path);
            return 1;
        }
        free(data);
    }
    return 0;
}
