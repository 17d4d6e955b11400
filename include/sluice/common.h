/* common.h - the vocabulary every sluice library shares: one set of result codes, and the
 * one default that sluiced, the client library and the simulator must agree on.
 *
 * Every function of libsluice (engine.h), libsluice-client (client.h) and the tokenizer
 * (tokenizer.h) that can fail returns 0 (SL_OK) or one of these negative codes; the
 * headers can be included together. The first group is what the engine decides, and
 * each is also the type of sluiced's HTTP error (sl_strerror(SL_ENOTFOUND) is
 * "not_found"), so the client library maps sluiced's answers back onto the same codes.
 * The second group only the client library and the tokenizer return.
 */
#ifndef SLUICE_COMMON_H
#define SLUICE_COMMON_H

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes. 0 is success; errors are negative. */
enum {
    SL_OK = 0,
    /* The engine's, and sluiced's error types. */
    SL_EINVAL = -1,       /* a field is missing, negative, too large, NaN, or unknown
                             (sluiced: 400 invalid_request) */
    SL_ENOTFOUND = -2,    /* unknown pool, lease or ticket (404) */
    SL_EALREADY = -3,     /* the lease or ticket was settled or cancelled before (409) */
    SL_EEXPIRED = -4,     /* the lease was reaped: no refund (410) */
    SL_ECAPACITY = -5,    /* the need can never fit the pool (413 exceeds_capacity) */
    SL_ETIME = -6,        /* `now_s` is earlier than a time the engine already saw */
    SL_ENOMEM = -7,       /* allocation failed; nothing changed */
    SL_EEXIST = -8,       /* the id is already in use */
    SL_EUNAVAILABLE = -9, /* a networked backend cannot decide now (fail: closed; 503) */
    SL_EFORBIDDEN = -10,  /* the caller may not have what it asked: a role its token does not
                             allow, a lease or ticket of an agent it may not act as (403) */
    /* The client library's and the tokenizer's. */
    SL_EARG = -20,         /* an argument is NULL, negative, too long or malformed: refused
                              before anything was sent or changed */
    SL_EUNREACHABLE = -21, /* sluiced cannot be reached and the client is fail_closed */
    SL_EMAXWAIT = -22,     /* max_wait_s ran out before a grant (a queued ticket is given up) */
    SL_EREJECTED = -23,    /* rejected, and retry_at lies beyond max_wait_s */
    SL_ECANCELED = -24,    /* the wait callback asked to stop waiting */
    SL_EPROTO = -25,       /* sluiced answered something that is not the API's JSON */
    SL_EHTTP = -26,        /* sluiced answered an HTTP status the API does not name */
    SL_EAUTH = -27,        /* 401 unauthorized or 403 forbidden */
    SL_ETOOBIG = -28,      /* 413 body_too_large */
    SL_EIO = -29,          /* a file could not be read, written, synced or renamed */
    SL_ECORRUPT = -30,     /* a file (checkpoint, vocabulary) is not in its format */
};

/* The `max_wait` (seconds) a client that saves a checkpoint before waiting asks by default:
 * sluiced holds its request queued for an ETA up to this instead of rejecting it past the
 * pool's max_queue_wait_s (60 s), so capacity is not left idle while agents sleep until a
 * retry_at. 540 s, like the proxy's max_hold_s: under the 10-minute timeouts of the
 * provider SDKs. Also sluiced's default ceiling on `max_wait` (its `max_hold_s`). */
#define SL_CHECKPOINTED_MAX_WAIT_S 540.0

/* The short name of a result code: the API's error type for the first group
 * ("invalid_request", "not_found", ...), a snake_case name for the others, "ok" for 0
 * and "unknown_error" for anything else; never NULL. Pure. */
const char *sl_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_COMMON_H */
