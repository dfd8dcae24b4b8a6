/* The request parser of `foundry serve` (serve_request.h): jansson's
 * strict parse of the body, then each field by type and range. */
#include "serve_request.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fills err as a refusal and returns kind. */
static fdy_status refuse(fdy_serve_error *err, fdy_status kind,
                         const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fdy_status refuse(fdy_serve_error *err, fdy_status kind,
                         const char *param, const char *fmt, ...) {
  err->status = kind == FDY_ERR_NOT_FOUND       ? 404
                : kind == FDY_ERR_OUT_OF_MEMORY ? 500
                                                : 400;
  err->type =
      kind == FDY_ERR_OUT_OF_MEMORY ? "server_error" : "invalid_request_error";
  err->code = kind == FDY_ERR_NOT_FOUND ? "model_not_found" : NULL;
  snprintf(err->param, sizeof err->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return kind;
}

/* root[name] unless absent or null. */
static json_t *field(json_t *root, const char *name) {
  json_t *v = json_object_get(root, name);
  return json_is_null(v) ? NULL : v;
}

/* A malloc'd copy of the JSON string v (jansson's strings are valid UTF-8
 * without NUL, refused at parse time otherwise). */
static char *copy_string(json_t *v) {
  size_t n = json_string_length(v);
  char *s = malloc(n + 1);
  if (s) {
    memcpy(s, json_string_value(v), n + 1);
  }
  return s;
}

/* The fields OpenAI has that change the output and that Foundry does not
 * do: refused unless absent, null or their default. */
static bool is_default(const char *name, json_t *v) {
  if (strcmp(name, "n") == 0 || strcmp(name, "best_of") == 0) {
    return json_is_integer(v) && json_integer_value(v) == 1;
  }
  if (strcmp(name, "echo") == 0 || strcmp(name, "logprobs") == 0) {
    return json_is_false(v);
  }
  if (strcmp(name, "presence_penalty") == 0 ||
      strcmp(name, "frequency_penalty") == 0) {
    return json_is_number(v) && json_number_value(v) == 0.0;
  }
  if (strcmp(name, "logit_bias") == 0) {
    return json_is_object(v) && json_object_size(v) == 0;
  }
  if (strcmp(name, "tools") == 0 || strcmp(name, "functions") == 0) {
    return json_is_array(v) && json_array_size(v) == 0;
  }
  if (strcmp(name, "response_format") == 0) {
    json_t *type = json_object_get(v, "type");
    return json_is_string(type) && strcmp(json_string_value(type), "text") == 0;
  }
  return false; /* suffix, top_logprobs, tool_choice, function_call */
}

static fdy_status check_unsupported(json_t *root, fdy_serve_error *err) {
  static const char *const names[] = {"n",
                                      "best_of",
                                      "echo",
                                      "logprobs",
                                      "top_logprobs",
                                      "logit_bias",
                                      "suffix",
                                      "presence_penalty",
                                      "frequency_penalty",
                                      "tools",
                                      "tool_choice",
                                      "functions",
                                      "function_call",
                                      "response_format"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    json_t *v = field(root, names[i]);
    if (v && !is_default(names[i], v)) {
      return refuse(err, FDY_ERR_UNSUPPORTED, names[i],
                    "%s is not supported: leave it out", names[i]);
    }
  }
  return FDY_OK;
}

static fdy_status parse_sampling(json_t *root, fdy_serve_request *r,
                                 fdy_serve_error *err) {
  static const char *const floats[] = {"temperature", "top_p", "min_p"};
  float *targets[] = {&r->sampling.temperature, &r->sampling.top_p,
                      &r->sampling.min_p};
  for (int i = 0; i < 3; i++) {
    json_t *v = field(root, floats[i]);
    if (v) {
      if (!json_is_number(v)) {
        return refuse(err, FDY_ERR_INVALID_ARGUMENT, floats[i],
                      "%s must be a number", floats[i]);
      }
      *targets[i] = (float)json_number_value(v);
    }
  }
  json_t *v = field(root, "top_k");
  if (v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > UINT32_MAX) {
      return refuse(err, FDY_ERR_INVALID_ARGUMENT, "top_k",
                    "top_k must be an integer from 0 to %" PRIu32, UINT32_MAX);
    }
    r->sampling.top_k = (uint32_t)json_integer_value(v);
  }
  v = field(root, "seed");
  if (v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
      return refuse(err, FDY_ERR_INVALID_ARGUMENT, "seed",
                    "seed must be an integer from 0 to %" PRId64, INT64_MAX);
    }
    r->sampling.seed = (uint64_t)json_integer_value(v);
    r->seed_given = true;
  }
  return FDY_OK;
}

static fdy_status parse_stop(json_t *root, fdy_serve_request *r,
                             fdy_serve_error *err) {
  json_t *v = field(root, "stop");
  if (!v) {
    return FDY_OK;
  }
  size_t n = json_is_array(v) ? json_array_size(v) : 1;
  if (!json_is_string(v) && !json_is_array(v)) {
    return refuse(err, FDY_ERR_INVALID_ARGUMENT, "stop",
                  "stop must be a string or an array of strings");
  }
  if (n > FDY_SERVE_MAX_STOP) {
    return refuse(err, FDY_ERR_INVALID_ARGUMENT, "stop",
                  "stop holds %zu strings; at most %u are allowed", n,
                  FDY_SERVE_MAX_STOP);
  }
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
    if (!json_is_string(s) || json_string_length(s) == 0) {
      return refuse(err, FDY_ERR_INVALID_ARGUMENT, "stop",
                    "stop[%zu] must be a non-empty string", i);
    }
    if (!(r->stop[r->stop_count] = copy_string(s))) {
      return refuse(err, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
    }
    r->stop_count++;
  }
  return FDY_OK;
}

static fdy_status parse_max_tokens(json_t *root, fdy_serve_request *r,
                                   fdy_serve_error *err) {
  const char *name = "max_tokens";
  json_t *v = field(root, name);
  if (!v && r->chat) {
    name = "max_completion_tokens";
    v = field(root, name);
  }
  if (!v) {
    return FDY_OK;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 ||
      json_integer_value(v) > UINT32_MAX) {
    return refuse(err, FDY_ERR_INVALID_ARGUMENT, name,
                  "%s must be an integer from 1 to %" PRIu32, name, UINT32_MAX);
  }
  r->max_tokens = (uint32_t)json_integer_value(v);
  r->max_tokens_given = true;
  return FDY_OK;
}

/* The prompt of /v1/completions: a string or ids. */
static fdy_status parse_prompt(json_t *root, const fdy_serve_limits *limits,
                               fdy_serve_request *r, fdy_serve_error *err) {
  json_t *p = json_object_get(root, "prompt");
  if (json_is_string(p)) {
    r->text = copy_string(p);
    return r->text ? FDY_OK
                   : refuse(err, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
  }
  if (!json_is_array(p) || json_array_size(p) == 0) {
    return refuse(
        err, FDY_ERR_INVALID_ARGUMENT, "prompt", "%s",
        p ? "prompt must be a string or a non-empty array of token ids"
          : "prompt is required");
  }
  size_t n = json_array_size(p);
  if (n > UINT32_MAX) {
    return refuse(err, FDY_ERR_INVALID_ARGUMENT, "prompt",
                  "prompt holds more than %" PRIu32 " ids", UINT32_MAX);
  }
  for (size_t i = 0; i < n; i++) {
    json_t *id = json_array_get(p, i);
    if (!json_is_integer(id) || json_integer_value(id) < 0 ||
        json_integer_value(id) >= limits->vocab) {
      return refuse(err, FDY_ERR_INVALID_ARGUMENT, "prompt",
                    "prompt[%zu] must be a token id from 0 to %" PRIu32, i,
                    limits->vocab - 1);
    }
  }
  if (!(r->ids = malloc(n * sizeof *r->ids))) {
    return refuse(err, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    r->ids[i] = (int32_t)json_integer_value(json_array_get(p, i));
  }
  r->id_count = (uint32_t)n;
  return FDY_OK;
}

/* The messages of /v1/chat/completions: an optional system (or developer)
 * message, then user and assistant messages in turn, the last a user
 * message. */
static fdy_status parse_messages(json_t *root, fdy_serve_request *r,
                                 fdy_serve_error *err) {
  json_t *m = json_object_get(root, "messages");
  if (!json_is_array(m) || json_array_size(m) == 0) {
    return refuse(err, FDY_ERR_INVALID_ARGUMENT, "messages",
                  "messages must be a non-empty array");
  }
  size_t n = json_array_size(m);
  json_t *first = json_object_get(json_array_get(m, 0), "role");
  size_t start = n > 1 && json_is_string(first) &&
                         (strcmp(json_string_value(first), "system") == 0 ||
                          strcmp(json_string_value(first), "developer") == 0)
                     ? 1
                     : 0;
  if ((n - start) % 2 == 0) {
    return refuse(err, FDY_ERR_INVALID_ARGUMENT, "messages",
                  "messages must end with a user message, after user and "
                  "assistant messages in turn");
  }
  r->exchange_count = (uint32_t)((n - start) / 2);
  if (r->exchange_count > 0 &&
      !(r->history =
            calloc(2 * (size_t)r->exchange_count, sizeof *r->history))) {
    return refuse(err, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    json_t *msg = json_array_get(m, i);
    json_t *role = json_object_get(msg, "role");
    json_t *content = json_object_get(msg, "content");
    if (!json_is_string(role) || !json_is_string(content)) {
      return refuse(err, FDY_ERR_INVALID_ARGUMENT, "messages",
                    "messages[%zu] must have a string role and string "
                    "content",
                    i);
    }
    const char *name = json_string_value(role);
    const char *want = i < start              ? NULL
                       : (i - start) % 2 == 0 ? "user"
                                              : "assistant";
    char **target = i < start    ? &r->system
                    : i == n - 1 ? &r->text
                                 : &r->history[i - start];
    if (want && strcmp(name, want) != 0) {
      return refuse(err, FDY_ERR_INVALID_ARGUMENT, "messages",
                    "messages[%zu] has the role '%s' where '%s' goes: an "
                    "optional system message, then user and assistant "
                    "messages in turn, the last from the user",
                    i, name, want);
    }
    if (!(*target = copy_string(content))) {
      return refuse(err, FDY_ERR_OUT_OF_MEMORY, NULL, "out of memory");
    }
  }
  return FDY_OK;
}

static fdy_status parse_root(json_t *root, bool chat,
                             const fdy_serve_limits *limits,
                             fdy_serve_request *r, fdy_serve_error *err) {
  json_t *model = field(root, "model");
  if (model && !json_is_string(model)) {
    return refuse(err, FDY_ERR_INVALID_ARGUMENT, "model",
                  "model must be a string");
  }
  if (model && strcmp(json_string_value(model), limits->model_id) != 0) {
    return refuse(err, FDY_ERR_NOT_FOUND, "model",
                  "the model '%.200s' does not exist; this server serves "
                  "'%.200s'",
                  json_string_value(model), limits->model_id);
  }
  fdy_status st = check_unsupported(root, err);
  if (st == FDY_OK) {
    st = chat ? parse_messages(root, r, err)
              : parse_prompt(root, limits, r, err);
  }
  if (st == FDY_OK) {
    st = parse_max_tokens(root, r, err);
  }
  if (st == FDY_OK) {
    st = parse_sampling(root, r, err);
  }
  json_t *stream = field(root, "stream");
  if (st == FDY_OK && stream) {
    if (!json_is_boolean(stream)) {
      return refuse(err, FDY_ERR_INVALID_ARGUMENT, "stream",
                    "stream must be a boolean");
    }
    r->stream = json_is_true(stream);
  }
  if (st == FDY_OK) {
    st = parse_stop(root, r, err);
  }
  return st;
}

fdy_status fdy_serve_request_parse(const char *body, size_t len, bool chat,
                                   const fdy_serve_limits *limits,
                                   fdy_serve_request *out,
                                   fdy_serve_error *err) {
  *out = (fdy_serve_request){.chat = chat, .sampling = limits->sampling};
  json_error_t jerr;
  json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, &jerr);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    return refuse(err, FDY_ERR_PARSE, NULL,
                  "the body is not a JSON object (line %d, column %d: %s)",
                  jerr.line, jerr.column, root ? "not an object" : jerr.text);
  }
  fdy_status st = parse_root(root, chat, limits, out, err);
  json_decref(root);
  if (st != FDY_OK) {
    fdy_serve_request_free(out);
  }
  return st;
}

fdy_status fdy_serve_request_fit(fdy_serve_request *r, uint32_t prompt_count,
                                 uint32_t context, fdy_serve_error *err) {
  const char *prompt = r->chat ? "messages" : "prompt";
  if (prompt_count == 0 || prompt_count > context) {
    return refuse(err, FDY_ERR_CONTEXT, prompt,
                  "the prompt of %" PRIu32
                  " tokens does not fit the context of %" PRIu32,
                  prompt_count, context);
  }
  if (!r->max_tokens_given) {
    r->max_tokens =
        r->chat ? context + 1 - prompt_count : FDY_SERVE_DEFAULT_MAX_TOKENS;
  }
  uint64_t needed = (uint64_t)prompt_count + r->max_tokens - 1;
  if (needed > context) {
    return refuse(err, FDY_ERR_CONTEXT, "max_tokens",
                  "the prompt of %" PRIu32 " tokens plus max_tokens %" PRIu32
                  " needs %" PRIu64 " positions; the context holds %" PRIu32,
                  prompt_count, r->max_tokens, needed, context);
  }
  return FDY_OK;
}

void fdy_serve_request_free(fdy_serve_request *r) {
  if (!r) {
    return;
  }
  free(r->ids);
  free(r->text);
  free(r->system);
  for (uint32_t i = 0; r->history && i < 2 * r->exchange_count; i++) {
    free(r->history[i]);
  }
  free(r->history);
  for (uint32_t i = 0; i < r->stop_count; i++) {
    free(r->stop[i]);
  }
  *r = (fdy_serve_request){0};
}
