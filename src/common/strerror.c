/* strerror.c - the names of sluice's result codes (common.h); compiled into every library
 * that returns them, so each can be linked alone. */
#include "sluice/common.h"

const char *sl_strerror(int code)
{
    switch (code) {
    case SL_OK:
        return "ok";
    case SL_EINVAL:
        return "invalid_request";
    case SL_ENOTFOUND:
        return "not_found";
    case SL_EALREADY:
        return "already_settled";
    case SL_EEXPIRED:
        return "lease_expired";
    case SL_ECAPACITY:
        return "exceeds_capacity";
    case SL_ETIME:
        return "time_went_backwards";
    case SL_ENOMEM:
        return "out_of_memory";
    case SL_EEXIST:
        return "already_exists";
    case SL_EUNAVAILABLE:
        return "backend_unavailable";
    case SL_EFORBIDDEN:
        return "forbidden";
    case SL_EARG:
        return "invalid_argument";
    case SL_EUNREACHABLE:
        return "unreachable";
    case SL_EMAXWAIT:
        return "timed_out";
    case SL_EREJECTED:
        return "rejected";
    case SL_ECANCELED:
        return "canceled";
    case SL_EPROTO:
        return "protocol_error";
    case SL_EHTTP:
        return "unexpected_status";
    case SL_EAUTH:
        return "unauthorized";
    case SL_ETOOBIG:
        return "body_too_large";
    case SL_EIO:
        return "io_error";
    case SL_ECORRUPT:
        return "corrupt_file";
    default:
        return "unknown_error";
    }
}
