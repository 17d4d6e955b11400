# fcall_lua.cmake - writes sluice.lua with the names of fcall.def as its prelude and its sections appended (cmake -DDEF=fcall.def -DLUA=sluice.lua "-DEXTRA=a.lua;b.lua" -DOUT=library.lua -P fcall_lua.cmake).
# The library's first line (#!lua name=...) stays first; the table FCALL follows it:
#   FCALL.arg / FCALL.reply: the names (as keys), FCALL.arg_series / FCALL.reply_series:
#   the prefixes of numbered names, FCALL.config: the configure fields every caller sends,
#   in record order, FCALL.config_later: {name, default} of those appended later.
file(STRINGS ${DEF} lines REGEX "^SL_FCALL_[A-Z_]+\\(")
set(arg "")
set(arg_series "")
set(reply "")
set(reply_series "")
set(config "")
set(config_later "")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^SL_FCALL_([A-Z_]+)\\(([^)]*)\\)")
    continue()
  endif()
  set(kind ${CMAKE_MATCH_1})
  string(REPLACE " " "" fields "${CMAKE_MATCH_2}")
  string(REPLACE "," ";" fields "${fields}")
  list(GET fields 0 name)
  if(kind STREQUAL "ARG")
    string(APPEND arg "${name} = true, ")
  elseif(kind STREQUAL "ARG_SERIES")
    string(APPEND arg_series "'${name}', ")
  elseif(kind STREQUAL "REPLY")
    string(APPEND reply "${name} = true, ")
  elseif(kind STREQUAL "REPLY_SERIES")
    string(APPEND reply_series "'${name}', ")
  elseif(kind STREQUAL "CONFIG")
    string(APPEND config "'${name}', ")
    string(APPEND arg "${name} = true, ")
    string(APPEND reply "cfg_${name} = true, ")
  elseif(kind STREQUAL "CONFIG_LATER")
    list(GET fields 2 dflt)
    string(APPEND config_later "{'${name}', ${dflt}}, ")
    string(APPEND arg "${name} = true, ")
    string(APPEND reply "cfg_${name} = true, ")
  else()
    message(FATAL_ERROR "${DEF}: unknown line ${line}")
  endif()
endforeach()
file(READ ${LUA} source)
string(FIND "${source}" "\n" eol)
string(SUBSTRING "${source}" 0 ${eol} first)
math(EXPR rest_at "${eol} + 1")
string(SUBSTRING "${source}" ${rest_at} -1 rest)
# EXTRA: sections of the library in files of their own, appended each inside a function
# (so they add no local to sluice.lua's chunk, which is near Lua's limit of 200).
set(extra "")
foreach(section IN LISTS EXTRA)
  file(READ ${section} text)
  string(APPEND extra "\n;(function()\n${text}\nend)()\n")
endforeach()
file(WRITE ${OUT}.tmp "${first}\n"
  "-- Generated from src/backend/redis/fcall.def by fcall_lua.cmake: every name the C backend\n"
  "-- and this library exchange, checked at every call (see args_table and reply_fields).\n"
  "local FCALL = {arg = {${arg}},\n"
  "  arg_series = {${arg_series}},\n"
  "  reply = {${reply}},\n"
  "  reply_series = {${reply_series}},\n"
  "  config = {${config}},\n"
  "  config_later = {${config_later}}}\n"
  "${rest}${extra}")
file(RENAME ${OUT}.tmp ${OUT})
