# embed.cmake - turns the dashboard's files into one C table (cmake -DDIR=... -DFILES=a,b
# -DOUT=... -P embed.cmake), the pattern of src/backend/redis/embed.cmake: each file as a
# byte array, its content type from its extension and an ETag from its SHA-256, so the
# page is served from the binary and nothing is read from disk or the network at run time.
set(types_html "text/html; charset=utf-8")
set(types_js "text/javascript; charset=utf-8")
set(types_css "text/css; charset=utf-8")
set(types_svg "image/svg+xml")
string(REPLACE "," ";" FILES "${FILES}")
set(arrays "")
set(rows "")
set(i 0)
foreach(f ${FILES})
  get_filename_component(ext ${f} LAST_EXT)
  string(SUBSTRING "${ext}" 1 -1 ext)
  if(NOT DEFINED types_${ext})
    message(FATAL_ERROR "embed.cmake: ${f}: no content type for '.${ext}'")
  endif()
  file(READ ${DIR}/${f} hex HEX)
  file(SHA256 ${DIR}/${f} sha)
  string(SUBSTRING "${sha}" 0 20 etag)
  string(LENGTH "${hex}" hexlen)
  math(EXPR len "${hexlen} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "static const unsigned char asset_${i}[] = {${bytes} 0x00};\n")
  string(APPEND rows "    {\"${f}\", \"${types_${ext}}\", asset_${i}, ${len}, \"\\\"${etag}\\\"\"},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE ${OUT}.tmp "/* Generated from src/server/dashboard/ by embed.cmake: the dashboard's files. */\n"
  "#include \"dashboard.h\"\n\n${arrays}\n"
  "const sl_dashboard_asset_t sl__dashboard_assets[] = {\n${rows}};\n"
  "const size_t sl__dashboard_n_assets = ${i};\n")
file(RENAME ${OUT}.tmp ${OUT})
