/* sluice checkpoint save|verify: write an agent's plan state, or check it for changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_cli.h"

static void checkpoint_usage(FILE *out)
{
    fprintf(out, "usage: sluice checkpoint save FILE --goal TEXT [--step TEXT] [--file PATH]...\n"
                 "                              [--decision TEXT --reason TEXT]...\n"
                 "                              [--next-call JSON | --next-call-file PATH]\n"
                 "                              [--request-id ID]\n"
                 "       sluice checkpoint verify FILE [--json]\n\n"
                 "save writes the plan state atomically (temporary file, fsync, rename, fsync of\n"
                 "the directory): goal, step, each --file with its SHA-256, each --decision with\n"
                 "its one-line --reason, and the exact next call (JSON). Saving over an existing\n"
                 "checkpoint replaces it.\n"
                 "verify re-hashes the recorded files and prints those that changed or are\n"
                 "missing (one per line; with --json an object with goal, step, next_call and\n"
                 "the changed files).\n\n"
                 "exit codes: 0 ok (verify: nothing changed), 1 unreadable or invalid file or\n"
                 "            input, 2 usage error, 7 verify: some files changed or are missing\n");
}

static int save(int argc, char **argv)
{
    const char *cmd = "sluice checkpoint save";
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "%s: FILE is required\n", cmd);
        return SL_EXIT_USAGE;
    }
    const char *path = argv[1];
    sl_checkpoint_t *cp = sl_checkpoint_new(NULL);
    if (!cp) return SL_EXIT_FAILURE;
    int code = SL_EXIT_USAGE, have_goal = 0;
    const char *pending_decision = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = sl_cli_value(cmd, argc, argv, &i);
        if (!v) goto cleanup;
        int rc = 0;
        if (strcmp(a, "--goal") == 0) {
            rc = sl_checkpoint_set_goal(cp, v);
            have_goal = 1;
        } else if (strcmp(a, "--step") == 0) {
            rc = sl_checkpoint_set_step(cp, v);
        } else if (strcmp(a, "--file") == 0) {
            rc = sl_checkpoint_add_file(cp, v);
        } else if (strcmp(a, "--decision") == 0) {
            if (pending_decision) {
                fprintf(stderr, "%s: --decision \"%s\" has no --reason\n", cmd, pending_decision);
                goto cleanup;
            }
            pending_decision = v;
        } else if (strcmp(a, "--reason") == 0) {
            if (!pending_decision) {
                fprintf(stderr, "%s: --reason \"%s\" follows no --decision\n", cmd, v);
                goto cleanup;
            }
            rc = sl_checkpoint_add_decision(cp, pending_decision, v);
            pending_decision = NULL;
        } else if (strcmp(a, "--next-call") == 0) {
            rc = sl_checkpoint_set_next_call(cp, v);
        } else if (strcmp(a, "--next-call-file") == 0) {
            char *text, err[512];
            size_t len;
            if (sl_cli_read_input(v, &text, &len, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s: %s\n", cmd, err);
                code = SL_EXIT_FAILURE;
                goto cleanup;
            }
            rc = sl_checkpoint_set_next_call(cp, text);
            free(text);
        } else if (strcmp(a, "--request-id") == 0) {
            rc = sl_checkpoint_set_request_id(cp, v);
        } else {
            fprintf(stderr, "%s: unknown option \"%s\"\n", cmd, a);
            goto cleanup;
        }
        if (rc < 0) {
            fprintf(stderr, "%s: %s: %s\n", cmd, a, sl_checkpoint_errmsg(cp));
            code = SL_EXIT_FAILURE;
            goto cleanup;
        }
    }
    if (pending_decision || !have_goal) {
        fprintf(stderr, "%s: %s\n", cmd,
                pending_decision ? "the last --decision has no --reason" : "--goal is required");
        goto cleanup;
    }
    if (sl_checkpoint_save(cp, path) < 0) {
        fprintf(stderr, "%s: %s\n", cmd, sl_checkpoint_errmsg(cp));
        code = SL_EXIT_FAILURE;
        goto cleanup;
    }
    code = SL_EXIT_OK;
cleanup:
    sl_checkpoint_free(cp);
    return code;
}

static const char *state_name(sl_file_state_t s)
{
    return s == SL_FILE_CHANGED ? "changed" : s == SL_FILE_MISSING ? "missing" : "same";
}

static int verify(int argc, char **argv)
{
    const char *cmd = "sluice checkpoint verify", *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            fprintf(stderr, "%s: unexpected argument \"%s\"\n", cmd, argv[i]);
            return SL_EXIT_USAGE;
        }
    }
    if (!path) {
        fprintf(stderr, "%s: FILE is required\n", cmd);
        return SL_EXIT_USAGE;
    }
    sl_checkpoint_t *cp;
    size_t changed = 0;
    char err[600];
    if (sl_checkpoint_resume(path, &cp, &changed, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return SL_EXIT_FAILURE;
    }
    size_t n = sl_checkpoint_file_count(cp);
    if (json) {
        json_t *files = json_array(), *next = NULL;
        if (sl_checkpoint_next_call(cp))
            next = json_loads(sl_checkpoint_next_call(cp), JSON_DECODE_ANY, NULL);
        for (size_t i = 0; i < n; i++)
            if (sl_checkpoint_file_state(cp, i) != SL_FILE_SAME)
                json_array_append_new(
                    files, json_pack("{s:s, s:s}", "path", sl_checkpoint_file_path(cp, i), "state",
                                     state_name(sl_checkpoint_file_state(cp, i))));
        const char *goal = sl_checkpoint_goal(cp), *step = sl_checkpoint_step(cp);
        const char *rid = sl_checkpoint_request_id(cp);
        json_t *j = json_pack("{s:s?, s:s?, s:I, s:o, s:o?, s:s?, s:f}", "goal", goal, "step", step,
                              "files", (json_int_t)n, "changed", files, "next_call", next,
                              "request_id", rid, "saved_at", sl_checkpoint_saved_at(cp));
        sl_cli_print_json(j);
        json_decref(j);
    } else {
        for (size_t i = 0; i < n; i++)
            if (sl_checkpoint_file_state(cp, i) != SL_FILE_SAME)
                printf("%s\t%s\n", state_name(sl_checkpoint_file_state(cp, i)),
                       sl_checkpoint_file_path(cp, i));
    }
    sl_checkpoint_free(cp);
    return changed ? SL_EXIT_CHANGED : SL_EXIT_OK;
}

int sl_cli_checkpoint(int argc, char **argv)
{
    if (argc < 2) {
        checkpoint_usage(stderr);
        return SL_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        checkpoint_usage(stdout);
        return SL_EXIT_OK;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            checkpoint_usage(stdout);
            return SL_EXIT_OK;
        }
    }
    if (strcmp(argv[1], "save") == 0) return save(argc - 1, argv + 1);
    if (strcmp(argv[1], "verify") == 0) return verify(argc - 1, argv + 1);
    fprintf(stderr, "sluice checkpoint: unknown action \"%s\" (save or verify)\n", argv[1]);
    return SL_EXIT_USAGE;
}
