# Writes the text file IN as a C source OUT defining
#   const char NAME[];  const unsigned long NAME_len;
# one string literal per line of IN (the file must hold no '"', '\' or
# '?'; tiktoken ranks are base64, spaces and digits). Run with
# cmake -DIN=... -DOUT=... -DNAME=... -P embed_text.cmake.
file(READ "${IN}" text)
string(LENGTH "${text}" len)
if(text MATCHES "[\"\\\\?]")
  message(FATAL_ERROR "${IN}: holds a quote, backslash or '?'")
endif()
string(REPLACE "\n" "\\n\"\n\"" text "${text}")
file(WRITE "${OUT}.tmp"
  "/* Generated from ${IN} by cmake/embed_text.cmake: do not edit. */\n"
  "extern const char ${NAME}[];\n"
  "extern const unsigned long ${NAME}_len;\n"
  "const char ${NAME}[] =\n\"${text}\";\n"
  "const unsigned long ${NAME}_len = ${len}ul;\n")
file(RENAME "${OUT}.tmp" "${OUT}")
