/* The request bodies of `foundry serve`'s POST endpoints
 * (/v1/completions, /v1/chat/completions), parsed and checked without a
 * model or a tokenizer: a pure function of the body's bytes and the
 * server's limits, so that it can be fuzzed alone (fuzz/fuzz_serve_request.c).
 * Every refusal is an OpenAI error (HTTP status, type, param, code and a
 * message) that the HTTP layer sends as it is. docs/serve.md lists the
 * fields. Thread-safe: no state besides its arguments. */
#ifndef FOUNDRY_CLI_SERVE_REQUEST_H
#define FOUNDRY_CLI_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "foundry/core.h"
#include "foundry/ops.h"

/* OpenAI's limit on stop strings per request. */
#define FDY_SERVE_MAX_STOP 4u
/* The default max_tokens of /v1/completions, as OpenAI's. */
#define FDY_SERVE_DEFAULT_MAX_TOKENS 16u

/* What the server allows; the parser reads it only. */
typedef struct fdy_serve_limits {
  const char *model_id;       /* a request naming another model is a 404 */
  uint32_t vocab;             /* prompt ids are 0 to vocab - 1 */
  fdy_sample_params sampling; /* the defaults of fields left out (seed
                                 unused: see seed_given) */
} fdy_serve_limits;

/* A refusal: what the HTTP layer answers. */
typedef struct fdy_serve_error {
  unsigned status;  /* 400, 404 (unknown model) */
  const char *type; /* "invalid_request_error" (static) */
  const char *code; /* NULL or "model_not_found" (static) */
  char param[64];   /* the field at fault, "" when none */
  char message[512];
} fdy_serve_error;

/* A parsed request. Exactly one prompt form is set: ids (/v1/completions
 * with an array), text (/v1/completions with a string), or the chat's
 * user text and optional system text. Strings are NUL-free UTF-8 (jansson
 * refuses invalid UTF-8 and \u0000) and malloc'd; fdy_serve_request_free
 * releases everything. */
typedef struct fdy_serve_request {
  bool chat;
  int32_t *ids; /* [id_count] prompt ids, or NULL */
  uint32_t id_count;
  char *text;   /* the prompt (completions) or the last user message
                   (chat) */
  char *system; /* chat: the system message, or NULL */
  /* chat: the earlier exchanges, user message then assistant answer
   * (history[2i], history[2i + 1]) for i below exchange_count */
  char **history;
  uint32_t exchange_count;
  bool max_tokens_given;
  uint32_t max_tokens;        /* 1 to UINT32_MAX when given */
  fdy_sample_params sampling; /* the limits' defaults with the fields given */
  bool seed_given;            /* else the caller picks a seed */
  bool stream;
  char *stop[FDY_SERVE_MAX_STOP]; /* non-empty stop strings */
  uint32_t stop_count;
} fdy_serve_request;

/* Parses body (len bytes, any content, not NUL-terminated) for the chat
 * endpoint (chat) or the completions one into *out (zeroed first).
 * Checks: a JSON object (FDY_ERR_PARSE, 400 with the line and column);
 * `model` a string naming limits->model_id (else 404, code
 * model_not_found) or absent; the prompt (`prompt`: a string or a
 * non-empty array of ids below limits->vocab) or `messages` (an optional
 * system or developer message first, then user and assistant messages in
 * turn, ending with a user message; contents strings);
 * `max_tokens` (chat: also `max_completion_tokens`) an integer >= 1;
 * `temperature`, `top_p`, `min_p` numbers, `top_k` and `seed` integers >=
 * 0 (values of sampling are checked by fdy_llama_sampling_check, not
 * here); `stream` a boolean; `stop` a non-empty string or an array of at
 * most FDY_SERVE_MAX_STOP of them. Fields OpenAI has that change the
 * output and Foundry does not do (n other than 1, best_of, echo,
 * logprobs, top_logprobs, logit_bias, suffix, penalties, tools,
 * functions, response_format other than text) are refused naming the
 * field when given a value other than their default; any other field is
 * ignored. A wrong type or value is FDY_ERR_INVALID_ARGUMENT (400, param
 * the field), an unknown model FDY_ERR_NOT_FOUND, an unsupported field
 * FDY_ERR_UNSUPPORTED, no memory FDY_ERR_OUT_OF_MEMORY (500). On failure
 * *out holds nothing to free. */
fdy_status fdy_serve_request_parse(const char *body, size_t len, bool chat,
                                   const fdy_serve_limits *limits,
                                   fdy_serve_request *out,
                                   fdy_serve_error *err);

/* Settles max_tokens once the prompt is prompt_count ids: when not given,
 * FDY_SERVE_DEFAULT_MAX_TOKENS (completions) or the rest of the context
 * (chat, at least 1). A prompt that does not fit with max_tokens (prompt +
 * max_tokens - 1 positions, the last id needing none, beyond context) is
 * FDY_ERR_CONTEXT (400, param max_tokens, or messages/prompt when the
 * prompt alone does not fit) naming both numbers and the context. */
fdy_status fdy_serve_request_fit(fdy_serve_request *r, uint32_t prompt_count,
                                 uint32_t context, fdy_serve_error *err);

/* Releases what r holds and zeroes it; NULL is a no-op. */
void fdy_serve_request_free(fdy_serve_request *r);

#endif
