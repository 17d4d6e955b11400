/* scenario.h - what the two conformance runners share: the backend-neutral answer, scenario lines, arguments, expected values.
 *
 * runner.c (engine and Redis, tests/conformance/NAME.scn) and limits_runner.c (action limits,
 * tests/conformance/limits/NAME.scn) read the same line format, `T OP args... -> field=value...`
 * (docs/redis.md and docs/limits.md, "Conformance scenarios"); each adds its own directives,
 * operations and error names.
 */
#ifndef SL_CONFORMANCE_SCENARIO_H
#define SL_CONFORMANCE_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define SCN_MAX_FIELDS 64
#define SCN_MAX_TOKENS 64

/* One answer, backend-neutral: a result code and named fields. */
typedef struct field {
    char name[72];
    bool is_num;
    double num;
    char str[96];
} field_t;

typedef struct result {
    int rc;
    int n;
    field_t f[SCN_MAX_FIELDS];
} result_t;

/* One operation line: T seconds after the runner's epoch, the operation and its
 * arguments, then the expectations after "->" (pointers into the split line). */
typedef struct op {
    int line;
    double t_s;
    char *tok[SCN_MAX_TOKENS]; /* op name, then arguments */
    int ntok;
    char *expect[SCN_MAX_TOKENS];
    int nexpect;
} op_t;

/* Adds a field to `r` (ignored once SCN_MAX_FIELDS are there); `v` NULL is "". */
void put_num(result_t *r, const char *name, double v);
void put_str(result_t *r, const char *name, const char *v);
/* The field called `name`, or NULL. */
const field_t *get_field(const result_t *r, const char *name);

/* Splits `s` in place on blanks into at most `max` tokens (a token may be quoted with
 * double quotes); returns their count. */
int scn_split(char *s, char **out, int max);
/* Fills `op` from a split line (tok[0] is the time); -1 when it names no operation. */
int scn_op_parse(op_t *op, char **tok, int n, int lineno);

/* The value of argument `name=value`, or NULL. */
const char *arg(const op_t *op, const char *name);
double arg_num(const op_t *op, const char *name, double dflt);

/* Prints " name=value" for every field. */
void scn_print_fields(FILE *out, const result_t *r);
/* True when field `f` holds `want`. Strings compare exactly; a number written with
 * decimals matches within half its last decimal (+1e-9), one without within
 * `tol_integral`, both widened by `rel_tol` times |want|. Otherwise `why` says what
 * differs. */
bool scn_value_matches(const field_t *f, const char *name, const char *want, double tol_integral,
                       double rel_tol, char *why, size_t n);

/* True when `a` (the C side's) and `b` (Redis's) hold the same result code and the same
 * fields, numbers equal within a relative 1e-9; otherwise `why` names the first
 * difference. */
bool results_equal(const result_t *a, const result_t *b, char *why, size_t n);

#endif
