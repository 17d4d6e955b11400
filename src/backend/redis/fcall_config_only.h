/* fcall_config_only.h - for a reading of fcall.def that wants its configuration lines only: the other four X-macros expand to nothing. */
#define SL_FCALL_ARG(n)
#define SL_FCALL_ARG_SERIES(n)
#define SL_FCALL_REPLY(n)
#define SL_FCALL_REPLY_SERIES(n)
