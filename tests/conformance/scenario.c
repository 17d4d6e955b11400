/* scenario.c - the conformance runners' shared parts: the answer record, line splitting, arguments, expected values. */
#include "scenario.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void put_num(result_t *r, const char *name, double v)
{
    if (r->n == SCN_MAX_FIELDS) return;
    field_t *f = &r->f[r->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->is_num = true;
    f->num = v;
}

void put_str(result_t *r, const char *name, const char *v)
{
    if (r->n == SCN_MAX_FIELDS) return;
    field_t *f = &r->f[r->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->is_num = false;
    snprintf(f->str, sizeof f->str, "%s", v ? v : "");
}

const field_t *get_field(const result_t *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->f[i].name, name) == 0) return &r->f[i];
    return NULL;
}

int scn_split(char *s, char **out, int max)
{
    int n = 0;
    while (*s && n < max) {
        while (isspace((unsigned char)*s)) s++;
        if (!*s) break;
        if (*s == '"') {
            out[n++] = ++s;
            while (*s && *s != '"') s++;
        } else {
            out[n++] = s;
            while (*s && !isspace((unsigned char)*s)) s++;
        }
        if (*s) *s++ = '\0';
    }
    return n;
}

int scn_op_parse(op_t *op, char **tok, int n, int lineno)
{
    op->line = lineno;
    op->t_s = strtod(tok[0], NULL);
    bool after = false;
    for (int i = 1; i < n; i++) {
        if (strcmp(tok[i], "->") == 0)
            after = true;
        else if (after && op->nexpect < SCN_MAX_TOKENS)
            op->expect[op->nexpect++] = tok[i];
        else if (!after && op->ntok < SCN_MAX_TOKENS)
            op->tok[op->ntok++] = tok[i];
    }
    return op->ntok == 0 ? -1 : 0;
}

const char *arg(const op_t *op, const char *name)
{
    size_t n = strlen(name);
    for (int i = 1; i < op->ntok; i++)
        if (strncmp(op->tok[i], name, n) == 0 && op->tok[i][n] == '=') return op->tok[i] + n + 1;
    return NULL;
}

double arg_num(const op_t *op, const char *name, double dflt)
{
    const char *v = arg(op, name);
    return v ? strtod(v, NULL) : dflt;
}

void scn_print_fields(FILE *out, const result_t *r)
{
    for (int i = 0; i < r->n; i++) {
        if (r->f[i].is_num) fprintf(out, " %s=%.9g", r->f[i].name, r->f[i].num);
        else fprintf(out, " %s=%s", r->f[i].name, r->f[i].str);
    }
}

bool scn_value_matches(const field_t *f, const char *name, const char *want, double tol_integral,
                       double rel_tol, char *why, size_t n)
{
    if (f->is_num) {
        double w = strtod(want, NULL), tol = tol_integral;
        const char *dot = strchr(want, '.'); /* expectations are written with a few decimals */
        if (dot) tol = 0.5 * pow(10, -(double)strspn(dot + 1, "0123456789")) + 1e-9;
        if (fabs(f->num - w) <= tol + rel_tol * fabs(w)) return true;
        snprintf(why, n, "%s: want %s, got %.9g", name, want, f->num);
        return false;
    }
    if (strcmp(f->str, want) == 0) return true;
    snprintf(why, n, "%s: want %s, got %s", name, want, f->str);
    return false;
}

static bool num_close(double a, double b, double rel)
{
    if (a == b) return true;
    if (isnan(a) || isnan(b)) return false;
    return fabs(a - b) <= rel * fmax(1.0, fmax(fabs(a), fabs(b)));
}

/* Every field of `a` is in `b` with the same value. */
static bool fields_in(const result_t *a, const result_t *b, const char *b_name, char *why,
                      size_t n)
{
    for (int i = 0; i < a->n; i++) {
        const field_t *fb = get_field(b, a->f[i].name);
        if (!fb) {
            snprintf(why, n, "%s missing on %s", a->f[i].name, b_name);
            return false;
        }
        if (a->f[i].is_num ? !num_close(a->f[i].num, fb->num, 1e-9)
                           : strcmp(a->f[i].str, fb->str) != 0) {
            snprintf(why, n, "%s differs", a->f[i].name);
            return false;
        }
    }
    return true;
}

bool results_equal(const result_t *a, const result_t *b, char *why, size_t n)
{
    if (a->rc != b->rc) {
        snprintf(why, n, "rc %d vs %d", a->rc, b->rc);
        return false;
    }
    return fields_in(a, b, "redis", why, n) && fields_in(b, a, "the library", why, n);
}
