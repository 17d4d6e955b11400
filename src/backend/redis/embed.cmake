# embed.cmake - turns sluice.lua into a C array (cmake -DIN=... -DOUT=... -P embed.cmake).
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT}.tmp "/* Generated from sluice.lua by embed.cmake: the Functions library source. */\n"
  "extern const char sl__redis_lua_source[];\n"
  "const char sl__redis_lua_source[] = {${bytes} 0x00};\n")
file(RENAME ${OUT}.tmp ${OUT})
