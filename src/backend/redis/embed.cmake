# embed.cmake - turns a Lua library into a C array (cmake -DIN=... -DOUT=... [-DVAR=name] -P embed.cmake).
if(NOT VAR)
  set(VAR sl__redis_lua_source)
endif()
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT}.tmp "/* Generated from ${IN} by embed.cmake: the Functions library source. */\n"
  "extern const char ${VAR}[];\n"
  "const char ${VAR}[] = {${bytes} 0x00};\n")
file(RENAME ${OUT}.tmp ${OUT})
