/* batch.h - the state the emulator's batch APIs, files, embeddings and moderations share.
 *
 * Files (OpenAI) and batches (both providers) are kept in memory, bounded
 * (EMU_MAX_FILES, EMU_MAX_BATCHES, each file at most --max-body-bytes). */
#ifndef SL_EMU_BATCH_H
#define SL_EMU_BATCH_H

#include "emu.h"

#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define EMU_MAX_FILES   1000
#define EMU_MAX_BATCHES 1000

/* What batches were billed, per provider: their tokens are billed at the batch price
 * (half the standard price, both providers). */
typedef struct sl_emu_batch_bill {
    uint64_t batches;  /* created */
    uint64_t requests; /* processed (succeeded + errored) */
    uint64_t succeeded;
    uint64_t errored;
    uint64_t canceled;
    int64_t input_tokens;
    int64_t output_tokens;
} sl_emu_batch_bill_t;

typedef struct sl_emu_file {
    char id[48];
    char *filename;
    char *purpose;
    char *data;
    size_t len;
    int64_t created_unix;
} sl_emu_file_t;

typedef struct sl_emu_batch {
    char id[64];
    sl_emu_api_t api;
    json_t *obj;      /* the batch object as answered (kept current) */
    json_t *requests; /* Anthropic: the create's `requests`; OpenAI: the input file's lines */
    char *results;    /* Anthropic: the results JSONL once ended (malloc'ed) */
    size_t results_len;
    double due_s; /* processed at this time (provider clock) */
    bool canceling;
    bool ended;
} sl_emu_batch_t;

typedef struct sl_emu_batches {
    sl_emu_file_t *files[EMU_MAX_FILES];
    size_t n_files;
    sl_emu_batch_t *batches[EMU_MAX_BATCHES];
    size_t n_batches;
    double rpm_tokens; /* Anthropic batch endpoints: the bucket (of --batch-rpm) */
    double rpm_at_s;
    sl_emu_batch_bill_t anthropic, openai;
    sl_emu_batch_bill_t embeddings; /* requests and input tokens of /v1/embeddings */
    uint64_t moderations;
    uint64_t batch_429; /* batch endpoint calls refused (rate or queue) */
} sl_emu_batches_t;

/* The emulator's batch state, created on first use (NULL when out of memory). */
sl_emu_batches_t *sl__emu_batches(sl_emu_t *emu);

/* files.c: OpenAI's Files API. */
void sl__openai_files(sl_emu_t *emu, struct evhttp_request *req, const char *rest);
/* The file `id`, or NULL. */
sl_emu_file_t *sl__emu_file(sl_emu_t *emu, const char *id);
/* Stores a new file (takes `data`, malloc'ed); NULL when the store is full or out of memory. */
sl_emu_file_t *sl__emu_file_add(sl_emu_t *emu, const char *filename, const char *purpose,
                                char *data, size_t len);
/* The JSON object of a file. */
json_t *sl__emu_file_json(const sl_emu_file_t *f);

/* Frees every file (shutdown). */
void sl__emu_files_free(sl_emu_batches_t *b);

/* Sends raw bytes with a content type. */
void sl__emu_send_bytes(struct evhttp_request *req, const char *content_type, const char *data,
                        size_t len);

#endif
