/* overlay_plot.c - sluice overlay --out: 429s and turn starts per bin on one time axis (gnuplot). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "overlay.h"

static size_t bin_of(double t_s, double start_s, double bin_s, size_t n)
{
    size_t b = (size_t)floor((t_s - start_s) / bin_s);
    return b < n ? b : n - 1;
}

static void write_script(FILE *f, const char *png, const sl_overlay_series_t *errs,
                         const sl_overlay_series_t *turns, const sl_overlay_result_t *res,
                         double bin_s, size_t n, const double *c429, const double *cturn)
{
    fprintf(f, "$series << EOD\n");
    for (size_t b = 0; b < n; b++)
        fprintf(f, "%.3f %.0f %.0f\n", ((double)b + 0.5) * bin_s, c429[b], cturn[b]);
    fprintf(f, "EOD\n");
    fprintf(f,
            "set terminal pngcairo size 1200,420 font 'sans,9'\n"
            "set output '%s'\n"
            "set title '429s (%zu) over turn starts (%zu), per %.0f s' noenhanced\n"
            "set xlabel 'seconds after the first timestamp (%.3f)'\n"
            "set ylabel '429s per bin' tc rgb '#c0392b'\n"
            "set y2label 'turn starts per bin' tc rgb '#2471a3'\n"
            "set xrange [0:%.3f]\nset yrange [0:*]\nset y2range [0:*]\n"
            "set ytics nomirror\nset y2tics\nset grid xtics\n"
            "set style fill solid 0.8 noborder\nset boxwidth %.3f absolute\n"
            "set key top right\n"
            "plot $series using 1:2 axes x1y1 with boxes lc rgb '#c0392b' title '429s', \\\n"
            "     $series using 1:3 axes x1y2 with lines lw 1.5 lc rgb '#2471a3' title 'turn starts'\n",
            png, errs->n, turns->n, bin_s, res->start_s, (double)n * bin_s, bin_s);
}

int sl_overlay_plot(const char *path, const sl_overlay_series_t *errs,
                    const sl_overlay_series_t *turns, const sl_overlay_result_t *res,
                    double bin_s, char *err, size_t errlen)
{
    if (strchr(path, '\'') || strchr(path, '"') || strchr(path, '\n')) {
        snprintf(err, errlen, "--out: \"%s\": quotes are not allowed in the file name", path);
        return -1;
    }
    size_t n = (size_t)floor((res->end_s - res->start_s) / bin_s) + 1;
    double *c429 = calloc(n, sizeof *c429), *cturn = calloc(n, sizeof *cturn);
    char script[] = "/tmp/sluice-overlay-XXXXXX";
    int fd = -1, rc = -1;
    if (!c429 || !cturn) {
        snprintf(err, errlen, "--out: out of memory");
        goto done;
    }
    for (size_t i = 0; i < errs->n; i++) c429[bin_of(errs->p[i].t_s, res->start_s, bin_s, n)]++;
    for (size_t i = 0; i < turns->n; i++)
        cturn[bin_of(turns->p[i].t_s, res->start_s, bin_s, n)]++;
    fd = mkstemp(script);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        snprintf(err, errlen, "--out: cannot write a gnuplot script in /tmp: %s", strerror(errno));
        goto done;
    }
    write_script(f, path, errs, turns, res, bin_s, n, c429, cturn);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "--out: %s: write failed", script);
        goto done;
    }
    unlink(path); /* so that a PNG gnuplot could not write is not mistaken for a new one */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", script);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(err, errlen, "--out: cannot run gnuplot: %s", strerror(errno));
        goto done;
    }
    char line[512], first[512] = "";
    while (fgets(line, sizeof line, p))
        if (!first[0] && strspn(line, " \t\n") < strlen(line)) snprintf(first, sizeof first, "%s", line);
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        first[strcspn(first, "\n")] = '\0';
        snprintf(err, errlen, "--out: %s: gnuplot failed (Debian: gnuplot-nox)%s%s", path,
                 first[0] ? ": " : "", first);
        goto done;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || sb.st_size == 0) {
        first[strcspn(first, "\n")] = '\0';
        snprintf(err, errlen, "--out: %s: gnuplot wrote nothing%s%s", path, first[0] ? ": " : "",
                 first);
        goto done;
    }
    rc = 0;
done:
    if (fd >= 0) unlink(script);
    free(c429);
    free(cturn);
    return rc;
}
