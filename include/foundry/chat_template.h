/* Jinja chat templates: a checkpoint's own chat_template (tokenizer_config.json
 * or chat_template.jinja) parsed once and rendered for a conversation, as
 * Hugging Face transformers' apply_chat_template renders it (jinja2 with
 * trim_blocks and lstrip_blocks, its tojson, raise_exception and
 * strftime_now). docs/chat-templates.md lists the subset of Jinja that is
 * interpreted; a template using anything else is refused when parsed,
 * naming the construct.
 *
 * Thread-safety: a parsed template is immutable; any number of threads may
 * render it at once. */
#ifndef FOUNDRY_CHAT_TEMPLATE_H
#define FOUNDRY_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_jinja fdy_jinja;

/* Parses len bytes of template source (any bytes; newlines are normalised
 * and one trailing newline dropped, as jinja2 does). Errors:
 * FDY_ERR_PARSE for malformed source (an unclosed block, tag, comment or
 * string, a bad expression, an end tag without its block; err->line and
 * err->column give the place, 1-based), FDY_ERR_UNSUPPORTED for Jinja
 * outside the subset (err->name names the construct: "macro", "filter
 * indent", "test divisibleby", "method title", "function range", ...;
 * line and column set), FDY_ERR_OVERFLOW for source over 16 MiB or nested
 * deeper than 256, FDY_ERR_OUT_OF_MEMORY. *out is NULL on failure; the
 * caller owns it otherwise. */
fdy_status fdy_jinja_parse(const char *source, size_t len, fdy_jinja **out,
                           fdy_error *err);
/* Frees a template; NULL is a no-op. */
void fdy_jinja_destroy(fdy_jinja *t);

/* One message of a conversation: role and content are any bytes (content
 * has content_len of them; role is NUL-terminated). */
typedef struct fdy_jinja_message {
  const char *role;
  const char *content;
  size_t content_len;
} fdy_jinja_message;

/* What a template sees: `messages` (a list of {role, content}),
 * `add_generation_prompt`, `bos_token` and `eos_token` (undefined when
 * NULL), `tools` and `documents` (none), and the members of variables, a
 * JSON object text or NULL (e.g. {"enable_thinking": false,
 * "date_string": "26 Jul 2024"}), which may replace any of them. */
typedef struct fdy_jinja_input {
  const fdy_jinja_message *messages;
  size_t message_count;
  bool add_generation_prompt;
  const char *bos_token, *eos_token;
  const char *variables; /* JSON object text, or NULL */
} fdy_jinja_input;

/* A rendered text. from_template[i] is 1 when byte i comes from the
 * template's own text or from bos_token/eos_token (where special-token
 * spellings are tokens), 0 when it comes from a message or a variable
 * (plain text, whatever it spells). */
typedef struct fdy_jinja_output {
  char *text; /* len bytes and a NUL */
  size_t len;
  uint8_t *from_template; /* len flags */
} fdy_jinja_output;

/* Renders t for in into *out (zeroed first; free it with
 * fdy_jinja_output_free). Errors: FDY_ERR_INVALID_ARGUMENT when the
 * template refuses the input: raise_exception (err->name
 * "raise_exception", the message quotes the template's), a type error
 * (adding a string to a number, an attribute of an undefined value, ...;
 * err->name the operation), FDY_ERR_PARSE for a variables text that is not
 * a JSON object (line and column set), FDY_ERR_BUDGET when rendering needs
 * more than 256 MiB of values or output, FDY_ERR_OVERFLOW for integer
 * arithmetic outside 64 bits, FDY_ERR_OUT_OF_MEMORY; err->line gives the
 * template line of a render error. *out is empty on failure. */
fdy_status fdy_jinja_render(const fdy_jinja *t, const fdy_jinja_input *in,
                            fdy_jinja_output *out, fdy_error *err);
/* Frees what a render returned and zeroes it; safe on a zeroed output. */
void fdy_jinja_output_free(fdy_jinja_output *out);

#ifdef __cplusplus
}
#endif
#endif
