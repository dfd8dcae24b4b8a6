/* The text of a generated answer in `foundry serve`, released as it
 * becomes final: bytes of each token go in (as the tokenizer spells them,
 * so a token may end inside a UTF-8 character), and what may be sent comes
 * out. Released text never ends inside a character that the next bytes may
 * still complete, nor holds the start of a stop string that the next bytes
 * may still complete; a stop string, which may span tokens, ends the text
 * where it starts and is never released. Single-threaded: the caller
 * serialises the calls on one text. */
#ifndef FOUNDRY_CLI_SERVE_TEXT_H
#define FOUNDRY_CLI_SERVE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "foundry/core.h"

typedef struct fdy_serve_text {
  char *buf;         /* [len] the text so far, NUL after it (malloc'd) */
  size_t len, cap;   /* bytes held in buf, and its size */
  size_t released;   /* buf[0..released) is final */
  char *const *stop; /* [stop_count] non-empty stop strings (borrowed) */
  uint32_t stop_count;
  bool stopped; /* a stop string ended the text (len = released = where it
                   started) */
} fdy_serve_text;

/* Starts an empty text with stop_count stop strings (borrowed: they must
 * outlive the text; NULL when stop_count is 0). */
void fdy_serve_text_init(fdy_serve_text *t, char *const *stop,
                         uint32_t stop_count);

/* Appends n bytes (any bytes) and releases what is final. After a stop
 * string ended the text, further bytes are ignored. FDY_ERR_OUT_OF_MEMORY
 * or FDY_ERR_OVERFLOW leave the text as it was. */
fdy_status fdy_serve_text_push(fdy_serve_text *t, const char *bytes, size_t n,
                               fdy_error *err);

/* The answer ended without a stop string: releases everything held (an
 * incomplete character as its raw bytes, the start of a stop string). */
void fdy_serve_text_finish(fdy_serve_text *t);

/* Frees the buffer; the text may be initialised again. */
void fdy_serve_text_destroy(fdy_serve_text *t);

#endif
