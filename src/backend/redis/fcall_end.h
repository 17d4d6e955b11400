/* fcall_end.h - ends one reading of fcall.def: undefines its six X-macros, so the next reading defines its own. */
#undef SL_FCALL_ARG
#undef SL_FCALL_ARG_SERIES
#undef SL_FCALL_REPLY
#undef SL_FCALL_REPLY_SERIES
#undef SL_FCALL_CONFIG
#undef SL_FCALL_CONFIG_LATER
