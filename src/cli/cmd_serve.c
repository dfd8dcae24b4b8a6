/* `foundry serve`: an OpenAI-compatible HTTP server (libmicrohttpd, one
 * thread per connection) over one Llama session with many slots.
 *
 * One engine thread owns the session. HTTP threads parse a request, turn
 * its prompt into ids and put it in a bounded queue (429 with Retry-After
 * when full), then wait on the server's condition variable for its ids.
 * Each step of the engine carries a decode row for every running request
 * and fills the other rows with prompt chunks of new requests taken from
 * the queue into free slots (as fdy_llama_generate_batch's steps do), so
 * a new prompt stalls the running streams by at most one step. A request
 * ends at a stop id, at max_tokens, or when its streaming client goes
 * away; its slot is released for the next step. SIGINT or SIGTERM: new
 * requests get 503, the accepted ones finish, the process exits 0.
 * docs/serve.md describes the endpoints and limits. */
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "commands.h"
#include "foundry/chat.h"
#include "foundry/llama_session.h"
#include "foundry/tokenizer.h"
#include "prompt.h"

#define DEFAULT_SEQUENCES  16u
#define DEFAULT_QUEUE      64u
#define DEFAULT_PORT       8080u
#define DEFAULT_MAX_TOKENS 16u        /* /v1/completions, as OpenAI */
#define MAX_BODY_BYTES     (1u << 20) /* a larger body is a 413 */

typedef struct request request;
typedef struct server server;

/* One request; refs: the HTTP thread's and, once queued, the engine's
 * (both under server.lock). */
struct request {
  server *srv;
  int refs;
  uint64_t number;
  bool chat, stream;
  int32_t *prompt; /* [prompt_count] */
  uint32_t prompt_count;
  uint32_t max_tokens;
  fdy_sample_params sampling;
  int32_t stop[FDY_CHAT_MAX_STOP]; /* besides config.json's EOS ids */
  uint32_t stop_count;
  /* engine side, read by the HTTP thread under the lock */
  int32_t *ids; /* [max_tokens] generated */
  uint32_t count;
  uint32_t fed; /* prompt ids fed so far */
  bool done, cancelled, failed;
  const char *finish; /* "stop", "length" */
  char error[256];    /* when failed */
  request *next;      /* the queue */
  /* the streaming reader's state (HTTP thread only) */
  fdy_token_stream *decoder;
  uint32_t emitted;
  bool sent_role, sent_final, sent_done;
  char *pending;
  size_t pending_len, pending_sent;
  time_t created;
};

struct server {
  const char *model_id;
  const fdy_llama_config *config;
  fdy_llama_session *session;
  fdy_tokenizer *tok; /* may be NULL: token ids only */
  pthread_mutex_t tok_lock;
  fdy_sample_params default_sampling;
  uint32_t vocab, context, max_queue, slots;
  pthread_mutex_t lock;
  pthread_cond_t work;    /* the engine: a request queued or cancelled */
  pthread_cond_t changed; /* the HTTP threads: ids, ends, requests freed */
  request *head, *tail;   /* the queue */
  uint32_t queued;
  request **running; /* [slots] */
  uint32_t active;
  uint64_t live; /* requests not yet freed */
  uint64_t numbers;
  bool stopping;
  bool failed;
  char failure[512];
  fdy_llama_step_part *parts; /* [slots] */
  int32_t *next;              /* [slots] */
};

/* ---- requests ------------------------------------------------------------ */

/* Copies text into dst of size bytes, cut when longer. */
static void copy_text(char *dst, size_t size, const char *text) {
  size_t n = strlen(text);
  n = n < size - 1 ? n : size - 1;
  memcpy(dst, text, n);
  dst[n] = '\0';
}

static void request_unref(request *r) {
  server *srv = r->srv;
  if (--r->refs > 0) {
    return;
  }
  free(r->prompt);
  free(r->ids);
  free(r->pending);
  fdy_token_stream_destroy(r->decoder);
  free(r);
  srv->live--;
  pthread_cond_broadcast(&srv->changed);
}

static bool is_stop(const server *srv, const request *r, int32_t id) {
  for (uint32_t i = 0; i < srv->config->eos_count; i++) {
    if (srv->config->eos_ids[i] == id) {
      return true;
    }
  }
  for (uint32_t i = 0; i < r->stop_count; i++) {
    if (r->stop[i] == id) {
      return true;
    }
  }
  return false;
}

/* Under the lock: ends the request in slot (released) and drops the
 * engine's reference. */
static void finish_slot(server *srv, uint32_t slot) {
  request *r = srv->running[slot];
  fdy_error err;
  if (fdy_llama_session_slot_active(srv->session, slot)) {
    (void)fdy_llama_session_release(srv->session, slot, &err);
  }
  srv->running[slot] = NULL;
  srv->active--;
  r->done = true;
  request_unref(r);
}

/* Under the lock: id generated for the request in slot. */
static void take(server *srv, uint32_t slot, int32_t id) {
  request *r = srv->running[slot];
  r->ids[r->count++] = id;
  if (is_stop(srv, r, id)) {
    r->finish = "stop";
  } else if (r->count == r->max_tokens) {
    r->finish = "length";
  }
  if (r->finish) {
    finish_slot(srv, slot);
  }
}

/* Under the lock: fails every running and queued request (a backend
 * failure leaves the session failed). */
static void fail_all(server *srv, const char *message) {
  srv->failed = true;
  copy_text(srv->failure, sizeof srv->failure, message);
  for (uint32_t slot = 0; slot < srv->slots; slot++) {
    if (srv->running[slot]) {
      request *r = srv->running[slot];
      r->failed = true;
      copy_text(r->error, sizeof r->error, message);
      finish_slot(srv, slot);
    }
  }
  while (srv->head) {
    request *r = srv->head;
    srv->head = r->next;
    r->failed = true;
    r->done = true;
    copy_text(r->error, sizeof r->error, message);
    request_unref(r);
  }
  srv->tail = NULL;
  srv->queued = 0;
}

/* ---- the engine ---------------------------------------------------------- */

static void *engine_main(void *arg) {
  server *srv = arg;
  fdy_error err;
  pthread_mutex_lock(&srv->lock);
  for (;;) {
    while (srv->active == 0 && !srv->head && !srv->stopping) {
      pthread_cond_wait(&srv->work, &srv->lock);
    }
    if (srv->active == 0 && !srv->head) {
      break;
    }
    for (uint32_t slot = 0; slot < srv->slots; slot++) {
      request *r = srv->running[slot];
      if (r && r->cancelled) {
        r->finish = "cancelled";
        finish_slot(srv, slot);
      }
    }
    for (uint32_t slot = 0; slot < srv->slots && srv->head; slot++) {
      if (srv->running[slot]) {
        continue;
      }
      request *r = srv->head;
      srv->head = r->next;
      if (!srv->head) {
        srv->tail = NULL;
      }
      srv->queued--;
      if (r->cancelled) {
        r->done = true;
        request_unref(r);
        slot--; /* the slot is still free */
        continue;
      }
      if (fdy_llama_session_set_sampling(srv->session, slot, &r->sampling,
                                         &err) != FDY_OK) {
        r->failed = true;
        r->done = true;
        copy_text(r->error, sizeof r->error, err.message);
        request_unref(r);
        slot--;
        continue;
      }
      r->fed = 0;
      srv->running[slot] = r;
      srv->active++;
    }
    if (srv->active == 0) {
      pthread_cond_broadcast(&srv->changed);
      continue;
    }
    /* the step: decode rows, then prompt chunks in the rows left */
    uint32_t count = 0, decode_rows = 0;
    for (uint32_t slot = 0; slot < srv->slots; slot++) {
      request *r = srv->running[slot];
      if (r && r->fed == r->prompt_count) {
        srv->parts[count++] = (fdy_llama_step_part){
            .slot = slot, .ids = &r->ids[r->count - 1], .count = 1};
      }
    }
    decode_rows = count;
    uint32_t room = fdy_llama_session_step_rows(srv->session) - count;
    for (uint32_t slot = 0; room > 0 && slot < srv->slots; slot++) {
      request *r = srv->running[slot];
      if (r && r->fed < r->prompt_count) {
        uint32_t left = r->prompt_count - r->fed;
        uint32_t n = left < room ? left : room;
        srv->parts[count++] = (fdy_llama_step_part){
            .slot = slot, .ids = r->prompt + r->fed, .count = n};
        room -= n;
      }
    }
    pthread_mutex_unlock(&srv->lock);
    fdy_status st = fdy_llama_session_step(srv->session, srv->parts, count,
                                           srv->next, NULL, &err);
    pthread_mutex_lock(&srv->lock);
    if (st != FDY_OK) {
      char message[600];
      snprintf(message, sizeof message, "the engine failed: %.512s",
               err.message);
      fprintf(stderr, "foundry serve: error: %s\n", message);
      fail_all(srv, message);
      pthread_cond_broadcast(&srv->changed);
      break;
    }
    for (uint32_t i = 0; i < count; i++) {
      uint32_t slot = srv->parts[i].slot;
      request *r = srv->running[slot];
      if (i >= decode_rows) {
        r->fed += srv->parts[i].count;
        if (r->fed < r->prompt_count) {
          continue;
        }
      }
      take(srv, slot, srv->next[i]);
    }
    pthread_cond_broadcast(&srv->changed);
  }
  pthread_mutex_unlock(&srv->lock);
  return NULL;
}

/* ---- HTTP helpers -------------------------------------------------------- */

/* The body of one connection's request. */
typedef struct body {
  char *data;
  size_t len;
  bool too_large;
} body;

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status,
                                 char *text, const char *type,
                                 const char *retry_after) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      strlen(text), text, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (retry_after) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
  }
  enum MHD_Result ret = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* Sends root (stolen) as JSON. */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status,
                                 json_t *root) {
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (!text) {
    return MHD_NO;
  }
  return send_text(c, status, text, "application/json", NULL);
}

/* An OpenAI error object. */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status,
                                  const char *type, const char *param,
                                  const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status,
                                  const char *type, const char *param,
                                  const char *code, const char *fmt, ...) {
  char message[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  char *safe = fdy_utf8_sanitize(message);
  json_t *root = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message",
                           safe ? safe : "error", "type", type, "param",
                           param ? json_string(param) : json_null(), "code",
                           code ? json_string(code) : json_null());
  free(safe);
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (!text) {
    return MHD_NO;
  }
  return send_text(c, status, text, "application/json",
                   status == MHD_HTTP_TOO_MANY_REQUESTS ? "1" : NULL);
}

#define BAD_REQUEST(c, param, ...)                                             \
  send_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", param, NULL,    \
             __VA_ARGS__)

/* ---- request parsing ----------------------------------------------------- */

/* Parses the sampling and length fields of root into r; on a bad field
 * fills param and message and returns false. */
static bool parse_common(server *srv, json_t *root, request *r,
                         const char **param, char *message, size_t size) {
  r->sampling = srv->default_sampling;
  r->sampling.seed = (uint64_t)time(NULL) * 1000003u + r->number;
  json_t *v;
  static const char *const floats[] = {"temperature", "top_p", "min_p"};
  float *targets[] = {&r->sampling.temperature, &r->sampling.top_p,
                      &r->sampling.min_p};
  for (int i = 0; i < 3; i++) {
    v = json_object_get(root, floats[i]);
    if (v && !json_is_null(v)) {
      if (!json_is_number(v)) {
        *param = floats[i];
        snprintf(message, size, "%s must be a number", floats[i]);
        return false;
      }
      *targets[i] = (float)json_number_value(v);
    }
  }
  v = json_object_get(root, "top_k");
  if (v && !json_is_null(v)) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > UINT32_MAX) {
      *param = "top_k";
      snprintf(message, size, "top_k must be an integer from 0 to %u",
               UINT32_MAX);
      return false;
    }
    r->sampling.top_k = (uint32_t)json_integer_value(v);
  }
  v = json_object_get(root, "seed");
  if (v && !json_is_null(v)) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
      *param = "seed";
      snprintf(message, size, "seed must be a non-negative integer");
      return false;
    }
    r->sampling.seed = (uint64_t)json_integer_value(v);
  }
  fdy_error err;
  if (fdy_llama_sampling_check(&r->sampling, &err) != FDY_OK) {
    snprintf(message, size, "%s", err.message);
    *param = strcmp(err.name, "temperature") == 0 ? "temperature"
             : strcmp(err.name, "top_p") == 0     ? "top_p"
             : strcmp(err.name, "min_p") == 0     ? "min_p"
                                                  : NULL;
    return false;
  }
  v = json_object_get(root, "stream");
  if (v && !json_is_null(v)) {
    if (!json_is_boolean(v)) {
      *param = "stream";
      snprintf(message, size, "stream must be a boolean");
      return false;
    }
    r->stream = json_is_true(v);
  }
  v = json_object_get(root, "n");
  if (v && !json_is_null(v) &&
      (!json_is_integer(v) || json_integer_value(v) != 1)) {
    *param = "n";
    snprintf(message, size, "only n = 1 is supported");
    return false;
  }
  v = json_object_get(root, "stop");
  if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0)) {
    *param = "stop";
    snprintf(message, size, "stop strings are not supported yet");
    return false;
  }
  /* max_tokens (max_completion_tokens for chat) */
  v = json_object_get(root, "max_tokens");
  if ((!v || json_is_null(v)) && r->chat) {
    v = json_object_get(root, "max_completion_tokens");
  }
  uint64_t room = (uint64_t)srv->context + 1 - r->prompt_count;
  if (r->prompt_count > srv->context) {
    room = 0;
  }
  if (v && !json_is_null(v)) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > UINT32_MAX) {
      *param = "max_tokens";
      snprintf(message, size, "max_tokens must be an integer from 1 to %u",
               UINT32_MAX);
      return false;
    }
    r->max_tokens = (uint32_t)json_integer_value(v);
  } else {
    r->max_tokens = r->chat ? (uint32_t)(room ? room : 1) : DEFAULT_MAX_TOKENS;
  }
  uint64_t needed = (uint64_t)r->prompt_count + r->max_tokens - 1;
  if (needed > srv->context) {
    *param = r->prompt_count > srv->context ? "messages" : "max_tokens";
    snprintf(message, size,
             "the prompt of %" PRIu32 " tokens plus max_tokens %" PRIu32
             " needs %" PRIu64 " positions; the context holds %" PRIu32,
             r->prompt_count, r->max_tokens, needed, srv->context);
    return false;
  }
  return true;
}

/* The prompt of /v1/completions: a string (with a tokenizer) or ids. */
static bool parse_prompt(server *srv, json_t *root, request *r,
                         const char **param, char *message, size_t size) {
  json_t *p = json_object_get(root, "prompt");
  *param = "prompt";
  if (json_is_string(p)) {
    if (!srv->tok) {
      snprintf(message, size,
               "the model has no tokenizer: give the prompt as token ids");
      return false;
    }
    fdy_error err;
    pthread_mutex_lock(&srv->tok_lock);
    fdy_status st = fdy_cli_prompt_ids(srv->tok, json_string_value(p), NULL,
                                       &r->prompt, &r->prompt_count, &err);
    if (st == FDY_OK) {
      r->stop_count = fdy_tokenizer_stop_ids(srv->tok, r->stop);
    }
    pthread_mutex_unlock(&srv->tok_lock);
    if (st != FDY_OK) {
      snprintf(message, size, "%s", err.message);
      return false;
    }
    return true;
  }
  if (!json_is_array(p) || json_array_size(p) == 0) {
    snprintf(message, size,
             p ? "prompt must be a string or a non-empty array of token ids"
               : "prompt is required");
    return false;
  }
  size_t n = json_array_size(p);
  r->prompt = malloc(n * sizeof *r->prompt);
  if (!r->prompt) {
    snprintf(message, size, "out of memory");
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *id = json_array_get(p, i);
    if (!json_is_integer(id) || json_integer_value(id) < 0 ||
        json_integer_value(id) >= srv->vocab) {
      snprintf(message, size,
               "prompt[%zu] must be a token id from 0 to %" PRIu32, i,
               srv->vocab - 1);
      return false;
    }
    r->prompt[i] = (int32_t)json_integer_value(id);
  }
  r->prompt_count = (uint32_t)n;
  return true;
}

/* The messages of /v1/chat/completions: an optional system message, then
 * one user message, through the chat template. */
static bool parse_messages(server *srv, json_t *root, request *r,
                           const char **param, char *message, size_t size) {
  *param = "messages";
  if (!srv->tok) {
    snprintf(message, size, "the model has no tokenizer: no chat");
    return false;
  }
  json_t *m = json_object_get(root, "messages");
  if (!json_is_array(m) || json_array_size(m) == 0) {
    snprintf(message, size, "messages must be a non-empty array");
    return false;
  }
  const char *system = NULL, *user = NULL;
  size_t user_len = 0;
  for (size_t i = 0; i < json_array_size(m); i++) {
    json_t *msg = json_array_get(m, i);
    json_t *role = json_object_get(msg, "role");
    json_t *content = json_object_get(msg, "content");
    if (!json_is_string(role) || !json_is_string(content)) {
      snprintf(message, size,
               "messages[%zu] must have a string role and string content", i);
      return false;
    }
    const char *name = json_string_value(role);
    if (i == 0 && strcmp(name, "system") == 0 && json_array_size(m) > 1) {
      system = json_string_value(content);
    } else if (i == json_array_size(m) - 1 && strcmp(name, "user") == 0) {
      user = json_string_value(content);
      user_len = json_string_length(content);
    } else {
      snprintf(message, size,
               "messages[%zu]: only a system message followed by one user "
               "message is supported",
               i);
      return false;
    }
  }
  if (!user) {
    snprintf(message, size, "the last message must be the user's");
    return false;
  }
  if (system && strlen(system) != json_string_length(json_object_get(
                                      json_array_get(m, 0), "content"))) {
    snprintf(message, size, "the system message holds a NUL character");
    return false;
  }
  fdy_error err;
  fdy_chat *chat = NULL;
  fdy_tokens tokens = {0};
  fdy_chat_options options = {.system = system};
  pthread_mutex_lock(&srv->tok_lock);
  fdy_status st =
      fdy_chat_create(srv->session, srv->tok, &options, &chat, &err);
  if (st == FDY_OK) {
    st = fdy_chat_prompt(chat, user, user_len, &tokens, &err);
  }
  if (st == FDY_OK) {
    r->stop_count = fdy_chat_stop_ids(chat, r->stop);
  }
  pthread_mutex_unlock(&srv->tok_lock);
  fdy_chat_destroy(chat);
  if (st == FDY_OK && (tokens.count == 0 || tokens.count > srv->context)) {
    snprintf(message, size,
             "the prompt of %zu tokens does not fit the context of %" PRIu32,
             tokens.count, srv->context);
    st = FDY_ERR_CONTEXT;
  } else if (st != FDY_OK) {
    snprintf(message, size, "%s", err.message);
  }
  if (st != FDY_OK) {
    fdy_tokens_free(&tokens);
    return false;
  }
  r->prompt = tokens.ids;
  r->prompt_count = (uint32_t)tokens.count;
  return true;
}

/* ---- responses ----------------------------------------------------------- */

/* Appends the text of ids[from..to) (special ids left out) to *text. */
static void append_text(server *srv, request *r, uint32_t from, uint32_t to,
                        bool done, char **text, size_t *len) {
  for (uint32_t i = from; i <= to; i++) {
    const char *bytes = NULL;
    size_t n = 0;
    fdy_error err;
    if (i < to) {
      if (fdy_tokenizer_is_special(srv->tok, r->ids[i]) ||
          fdy_token_stream_push(r->decoder, r->ids[i], &bytes, &n, &err) !=
              FDY_OK) {
        continue;
      }
    } else if (done) {
      fdy_token_stream_finish(r->decoder, &bytes, &n);
    }
    if (n) {
      char *grown = realloc(*text, *len + n + 1);
      if (!grown) {
        return;
      }
      memcpy(grown + *len, bytes, n);
      *len += n;
      grown[*len] = '\0';
      *text = grown;
    }
  }
}

static json_t *usage(const request *r) {
  return json_pack("{s:I, s:I, s:I}", "prompt_tokens",
                   (json_int_t)r->prompt_count, "completion_tokens",
                   (json_int_t)r->count, "total_tokens",
                   (json_int_t)(r->prompt_count + r->count));
}

static json_t *ids_array(const int32_t *ids, uint32_t from, uint32_t to) {
  json_t *a = json_array();
  for (uint32_t i = from; a && i < to; i++) {
    json_array_append_new(a, json_integer(ids[i]));
  }
  return a;
}

/* One choice: the message (chat) or text, ids[from..to), finish. */
static json_t *choice(server *srv, request *r, uint32_t from, uint32_t to,
                      bool delta, bool final) {
  /* final: the request is done and to is its last id */
  char *text = NULL;
  size_t len = 0;
  if (srv->tok) {
    append_text(srv, r, from, to, final, &text, &len);
  }
  char *safe = fdy_utf8_sanitize(text ? text : "");
  free(text);
  json_t *c = json_pack("{s:i}", "index", 0);
  json_t *content = json_string(safe ? safe : "");
  free(safe);
  if (r->chat) {
    json_t *m = json_object();
    if (!delta || !r->sent_role) {
      json_object_set_new(m, "role", json_string("assistant"));
      r->sent_role = true;
    }
    if (!delta || to > from || json_string_length(content) > 0) {
      json_object_set(m, "content", content);
    }
    json_object_set_new(c, delta ? "delta" : "message", m);
  } else {
    json_object_set(c, "text", content);
    json_object_set_new(c, "logprobs", json_null());
  }
  json_decref(content);
  json_object_set_new(c, "token_ids", ids_array(r->ids, from, to));
  json_object_set_new(c, "finish_reason",
                      final && r->finish ? json_string(r->finish)
                                         : json_null());
  return c;
}

static json_t *envelope(server *srv, request *r, json_t *choice_obj,
                        bool chunk) {
  char id[48];
  snprintf(id, sizeof id, "%s-%" PRIu64, r->chat ? "chatcmpl" : "cmpl",
           r->number);
  const char *object =
      r->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
              : "text_completion";
  return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object", object,
                   "created", (json_int_t)r->created, "model", srv->model_id,
                   "choices", choice_obj);
}

/* The SSE reader of a streaming response: blocks until ids or the end. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  request *r = cls;
  server *srv = r->srv;
  while (r->pending_sent == r->pending_len) {
    free(r->pending);
    r->pending = NULL;
    r->pending_len = r->pending_sent = 0;
    if (r->sent_done) {
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_lock(&srv->lock);
    while (!r->done && r->count == r->emitted) {
      pthread_cond_wait(&srv->changed, &srv->lock);
    }
    /* one id per event */
    uint32_t count = r->count;
    uint32_t to = count > r->emitted ? r->emitted + 1 : count;
    bool done = r->done, failed = r->failed;
    pthread_mutex_unlock(&srv->lock);
    json_t *event = NULL;
    if (failed) {
      event = json_pack("{s:{s:s, s:s}}", "error", "message", r->error, "type",
                        "server_error");
    } else if (to > r->emitted || (done && !r->sent_final)) {
      bool final = done && to == count;
      event =
          envelope(srv, r, choice(srv, r, r->emitted, to, true, final), true);
      if (event && final) {
        json_object_set_new(event, "usage", usage(r));
      }
      r->emitted = to;
      r->sent_final = final;
    }
    char *text = event ? json_dumps(event, JSON_COMPACT) : NULL;
    json_decref(event);
    size_t n = text ? strlen(text) : 0;
    bool last = done && (failed || r->sent_final);
    r->pending = malloc(n + 32);
    if (!r->pending) {
      free(text);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    r->pending_len = 0;
    if (text) {
      r->pending_len = (size_t)sprintf(r->pending, "data: %s\n\n", text);
    }
    free(text);
    if (last) {
      r->pending_len +=
          (size_t)sprintf(r->pending + r->pending_len, "data: [DONE]\n\n");
      r->sent_done = true;
    }
  }
  size_t n = r->pending_len - r->pending_sent;
  n = n < max ? n : max;
  memcpy(buf, r->pending + r->pending_sent, n);
  r->pending_sent += n;
  return (ssize_t)n;
}

/* The stream's end (finished or the client gone): cancels the request
 * when it still runs and drops the HTTP thread's reference. */
static void stream_free(void *cls) {
  request *r = cls;
  server *srv = r->srv;
  pthread_mutex_lock(&srv->lock);
  if (!r->done) {
    r->cancelled = true;
    pthread_cond_signal(&srv->work);
  }
  request_unref(r);
  pthread_mutex_unlock(&srv->lock);
}

/* POST /v1/completions and /v1/chat/completions. */
static enum MHD_Result handle_generation(server *srv, struct MHD_Connection *c,
                                         const body *b, bool chat) {
  json_error_t jerr;
  json_t *root = json_loadb(b->data ? b->data : "", b->len, 0, &jerr);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    return BAD_REQUEST(
        c, NULL, "the body is not a JSON object (line %d, column %d: %s)",
        jerr.line, jerr.column, root ? "not an object" : jerr.text);
  }
  json_t *model = json_object_get(root, "model");
  if (model && !json_is_null(model) && !json_is_string(model)) {
    json_decref(root);
    return BAD_REQUEST(c, "model", "model must be a string");
  }
  if (json_is_string(model) &&
      strcmp(json_string_value(model), srv->model_id) != 0) {
    char *name = fdy_utf8_sanitize(json_string_value(model));
    enum MHD_Result ret =
        send_error(c, MHD_HTTP_NOT_FOUND, "invalid_request_error", "model",
                   "model_not_found",
                   "the model '%s' does not exist; this server serves '%s'",
                   name ? name : "", srv->model_id);
    free(name);
    json_decref(root);
    return ret;
  }
  request *r = calloc(1, sizeof *r);
  if (!r) {
    json_decref(root);
    return MHD_NO;
  }
  r->srv = srv;
  r->refs = 1;
  r->chat = chat;
  r->created = time(NULL);
  pthread_mutex_lock(&srv->lock);
  r->number = ++srv->numbers;
  srv->live++;
  pthread_mutex_unlock(&srv->lock);
  const char *param = NULL;
  char message[512];
  bool ok = chat ? parse_messages(srv, root, r, &param, message, sizeof message)
                 : parse_prompt(srv, root, r, &param, message, sizeof message);
  ok = ok && parse_common(srv, root, r, &param, message, sizeof message);
  json_decref(root);
  fdy_error err;
  if (ok && !(r->ids = malloc(sizeof *r->ids * r->max_tokens))) {
    ok = false;
    snprintf(message, sizeof message, "out of memory for max_tokens");
  }
  if (ok && srv->tok &&
      fdy_token_stream_create(srv->tok, &r->decoder, &err) != FDY_OK) {
    ok = false;
    copy_text(message, sizeof message, err.message);
  }
  if (!ok) {
    pthread_mutex_lock(&srv->lock);
    request_unref(r);
    pthread_mutex_unlock(&srv->lock);
    return BAD_REQUEST(c, param, "%s", message);
  }
  /* the queue */
  pthread_mutex_lock(&srv->lock);
  unsigned refused = 0;
  if (srv->stopping || srv->failed) {
    refused = MHD_HTTP_SERVICE_UNAVAILABLE;
  } else if (srv->queued >= srv->max_queue + (srv->slots - srv->active)) {
    /* beyond the free slots, max_queue requests may wait */
    refused = MHD_HTTP_TOO_MANY_REQUESTS;
  } else {
    r->refs++;
    if (srv->tail) {
      srv->tail->next = r;
    } else {
      srv->head = r;
    }
    srv->tail = r;
    srv->queued++;
    pthread_cond_signal(&srv->work);
  }
  if (refused) {
    request_unref(r);
    pthread_mutex_unlock(&srv->lock);
    if (refused == MHD_HTTP_TOO_MANY_REQUESTS) {
      return send_error(c, refused, "rate_limit_error", NULL, "queue_full",
                        "%" PRIu32 " requests are waiting already; try again",
                        srv->max_queue);
    }
    return send_error(c, refused, "server_error", NULL, "unavailable", "%s",
                      srv->failed ? srv->failure : "the server is stopping");
  }
  if (r->stream) {
    pthread_mutex_unlock(&srv->lock);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 4096, stream_read, r, stream_free);
    if (!resp) {
      stream_free(r);
      return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
  }
  while (!r->done) {
    pthread_cond_wait(&srv->changed, &srv->lock);
  }
  pthread_mutex_unlock(&srv->lock);
  enum MHD_Result ret;
  if (r->failed) {
    ret = send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL,
                     NULL, "%s", r->error);
  } else {
    json_t *resp =
        envelope(srv, r, choice(srv, r, 0, r->count, false, true), false);
    if (resp) {
      json_object_set_new(resp, "usage", usage(r));
    }
    ret = send_json(c, MHD_HTTP_OK, resp);
  }
  pthread_mutex_lock(&srv->lock);
  request_unref(r);
  pthread_mutex_unlock(&srv->lock);
  return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls) {
  (void)version;
  server *srv = cls;
  body *b = *con_cls;
  if (!b) {
    b = calloc(1, sizeof *b);
    *con_cls = b;
    return b ? MHD_YES : MHD_NO;
  }
  if (*upload_data_size > 0) {
    if (!b->too_large && b->len + *upload_data_size <= MAX_BODY_BYTES) {
      char *grown = realloc(b->data, b->len + *upload_data_size + 1);
      if (!grown) {
        return MHD_NO;
      }
      memcpy(grown + b->len, upload_data, *upload_data_size);
      b->data = grown;
      b->len += *upload_data_size;
    } else {
      b->too_large = true;
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
  if (get && strcmp(url, "/health") == 0) {
    pthread_mutex_lock(&srv->lock);
    bool failed = srv->failed;
    json_t *root = failed ? json_pack("{s:s, s:s}", "status", "error", "error",
                                      srv->failure)
                          : json_pack("{s:s, s:I, s:I}", "status", "ok",
                                      "running", (json_int_t)srv->active,
                                      "queued", (json_int_t)srv->queued);
    pthread_mutex_unlock(&srv->lock);
    return send_json(c, failed ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
                     root);
  }
  if (get && strcmp(url, "/v1/models") == 0) {
    return send_json(c, MHD_HTTP_OK,
                     json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object",
                               "list", "data", "id", srv->model_id, "object",
                               "model", "created", (json_int_t)0, "owned_by",
                               "foundry"));
  }
  bool completions = strcmp(url, "/v1/completions") == 0;
  bool chat = strcmp(url, "/v1/chat/completions") == 0;
  if (completions || chat) {
    if (!post) {
      return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error",
                        NULL, NULL, "%s takes POST, not %s", url, method);
    }
    if (b->too_large) {
      return send_error(c, 413 /* content too large */, "invalid_request_error",
                        NULL, "request_too_large",
                        "the request body is larger than the limit of %u "
                        "bytes",
                        MAX_BODY_BYTES);
    }
    return handle_generation(srv, c, b, chat);
  }
  return send_error(c, MHD_HTTP_NOT_FOUND, "invalid_request_error", NULL, NULL,
                    "no endpoint %s %s", method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  body *b = *con_cls;
  if (b) {
    free(b->data);
    free(b);
    *con_cls = NULL;
  }
}

/* ---- the command --------------------------------------------------------- */

void fdy_cmd_serve_help(FILE *out) {
  fprintf(out,
          "usage: foundry serve --model DIR [options]\n"
          "\n"
          "Serves the model over HTTP with the OpenAI API (docs/serve.md):\n"
          "GET /health, GET /v1/models, POST /v1/completions and POST\n"
          "/v1/chat/completions (\"stream\": true for server-sent events).\n"
          "Requests run together by continuous batching; SIGINT or SIGTERM\n"
          "finishes the accepted requests and exits 0.\n"
          "\n"
          "options:\n"
          "  --host ADDR      IPv4 address to bind (default 127.0.0.1)\n"
          "  --port P         TCP port, 0 for any free one (default %u); the\n"
          "                   address is printed on stderr once listening\n"
          "  --model-id NAME  the model's id (default: DIR's base name)\n"
          "  --max-sequences N  requests generated at once, 1 to %u\n"
          "                   (default %u), each with a KV cache of the\n"
          "                   context\n"
          "  --max-queue Q    requests that may wait beyond the running\n"
          "                   ones (default %u); more get 429\n"
          "  --tokenizer FILE a tokenizer.json or tiktoken file instead of\n"
          "                   the model directory's (without one, only\n"
          "                   token-id prompts are served)\n"
          "  --backend NAME   cpu (the default) or cuda\n"
          "  --threads T      cpu backend threads (default: online CPUs)\n"
          "  --context C      KV cache positions per sequence (default: the\n"
          "                   model's max_position_embeddings, at most 4096)\n"
          "  --kv-dtype D     KV cache dtype: f32 (default) or f16\n",
          DEFAULT_PORT, FDY_LLAMA_MAX_SEQUENCES, DEFAULT_SEQUENCES,
          DEFAULT_QUEUE);
  fdy_cli_session_flags_help(out);
}

/* The base name of dir without trailing slashes (malloc'd). */
static char *base_name(const char *dir) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') {
    len--;
  }
  size_t start = len;
  while (start > 0 && dir[start - 1] != '/') {
    start--;
  }
  char *name = malloc(len - start + 1);
  if (name) {
    memcpy(name, dir + start, len - start);
    name[len - start] = '\0';
  }
  return name;
}

int fdy_cmd_serve(int argc, char **argv) {
  enum {
    OPT_MODEL = 256,
    OPT_HOST,
    OPT_PORT,
    OPT_MODEL_ID,
    OPT_SEQUENCES,
    OPT_QUEUE,
    OPT_TOKENIZER
  };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      {"host", required_argument, NULL, OPT_HOST},
      {"port", required_argument, NULL, OPT_PORT},
      {"model-id", required_argument, NULL, OPT_MODEL_ID},
      {"max-sequences", required_argument, NULL, OPT_SEQUENCES},
      {"max-queue", required_argument, NULL, OPT_QUEUE},
      {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
      FDY_CLI_SESSION_OPTIONS,
      FDY_CLI_ENGINE_OPTIONS,
      {NULL, 0, NULL, 0},
  };
  const char *model_dir = NULL, *host = "127.0.0.1", *model_id = NULL;
  const char *tokenizer_path = NULL;
  uint64_t port = DEFAULT_PORT, sequences = DEFAULT_SEQUENCES;
  uint64_t queue = DEFAULT_QUEUE;
  fdy_cli_session_flags flags = FDY_CLI_SESSION_FLAGS_DEFAULT;
  fdy_error err;
  int code = fdy_cli_check_arguments("serve", argc, argv);
  if (code == FDY_EXIT_OK) {
    code = fdy_cli_check_repeats("serve", argc, argv, options);
  }
  if (code != FDY_EXIT_OK) {
    return code;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
    fdy_status status = FDY_OK;
    switch (opt) {
    case OPT_MODEL:
      model_dir = optarg;
      break;
    case OPT_HOST:
      host = optarg;
      break;
    case OPT_PORT:
      status = fdy_cli_parse_uint("--port", optarg, 0, 65535, &port, &err);
      break;
    case OPT_MODEL_ID:
      model_id = optarg;
      break;
    case OPT_SEQUENCES:
      status = fdy_cli_parse_uint("--max-sequences", optarg, 1,
                                  FDY_LLAMA_MAX_SEQUENCES, &sequences, &err);
      break;
    case OPT_QUEUE:
      status =
          fdy_cli_parse_uint("--max-queue", optarg, 0, 1u << 20, &queue, &err);
      break;
    case OPT_TOKENIZER:
      tokenizer_path = optarg;
      break;
    case ':':
      return fdy_cli_usage("serve", "%s needs a value", argv[optind - 1]);
    default: {
      bool handled = false;
      status = fdy_cli_session_flag(opt, optarg, &flags, &handled, &err);
      if (!handled) {
        return fdy_cli_usage("serve", "unknown option '%s'", argv[optind - 1]);
      }
      break;
    }
    }
    if (status != FDY_OK) {
      return fdy_cli_usage("serve", "%s", err.message);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("serve", "unexpected argument '%s'", argv[optind]);
  }
  if (!model_dir) {
    return fdy_cli_usage("serve", "--model is required");
  }
  struct sockaddr_in addr = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
    return fdy_cli_usage("serve", "--host must be an IPv4 address, got '%s'",
                         host);
  }

  server srv = {.max_queue = (uint32_t)queue, .slots = (uint32_t)sequences};
  fdy_llama_model *model = NULL;
  fdy_backend *backend = NULL;
  char *default_id = NULL;
  struct MHD_Daemon *daemon = NULL;
  bool engine_started = false, locks = false;
  pthread_t engine;
  code = FDY_EXIT_FAILURE;
  fdy_status st = fdy_cli_check_manifest(&flags, model_dir, NULL, &err);
  if (st == FDY_OK) {
    st = fdy_llama_open(model_dir, &model, &err);
  }
  if (st == FDY_OK) {
    srv.config = fdy_llama_model_config(model);
    st = fdy_cli_backend_create(flags.backend, (uint32_t)flags.threads,
                                flags.serial_launch, &backend, &err);
  }
  if (st == FDY_OK) {
    fdy_llama_session_options o = fdy_cli_session_options(&flags, backend);
    o.ids_only = true;
    o.max_sequences = (uint32_t)sequences;
    fdy_cli_cap_prefill_rows(&o, srv.config);
    st = fdy_llama_session_create(model, &o, &srv.session, &err);
    if (st != FDY_OK) {
      fdy_cli_explain_budget(&flags, &err);
    }
  }
  if (st == FDY_OK) {
    st = fdy_cli_open_tokenizer(model_dir, tokenizer_path, &srv.tok, &err);
    if (st != FDY_OK && !tokenizer_path) {
      fprintf(stderr,
              "foundry serve: no tokenizer (%s): only token-id prompts are "
              "served\n",
              err.message);
      srv.tok = NULL;
      st = FDY_OK;
    }
  }
  bool found = false;
  if (st == FDY_OK) {
    st = fdy_cli_generation_config(model_dir, &srv.default_sampling, &found,
                                   &err);
  }
  if (st != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (!found) {
    /* as OpenAI: temperature 1 when the request says nothing */
    srv.default_sampling = (fdy_sample_params){
        .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  }
  srv.vocab = srv.config->vocab_size;
  srv.context = fdy_llama_session_context(srv.session);
  default_id = base_name(model_dir);
  srv.model_id = model_id ? model_id : default_id;
  srv.running = calloc(srv.slots, sizeof *srv.running);
  srv.parts = calloc(srv.slots, sizeof *srv.parts);
  srv.next = calloc(srv.slots, sizeof *srv.next);
  if (!default_id || !srv.running || !srv.parts || !srv.next) {
    fprintf(stderr, "foundry: error: out of memory\n");
    goto cleanup;
  }
  pthread_mutex_init(&srv.lock, NULL);
  pthread_mutex_init(&srv.tok_lock, NULL);
  pthread_cond_init(&srv.work, NULL);
  pthread_cond_init(&srv.changed, NULL);
  locks = true;

  /* SIGINT and SIGTERM go to sigwait below, in no other thread */
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
  signal(SIGPIPE, SIG_IGN);

  if (pthread_create(&engine, NULL, engine_main, &srv) != 0) {
    fprintf(stderr, "foundry: error: cannot start the engine thread\n");
    goto cleanup;
  }
  engine_started = true;
  daemon = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
          MHD_USE_ERROR_LOG,
      (uint16_t)port, NULL, NULL, handle, &srv, MHD_OPTION_SOCK_ADDR,
      (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
  if (!daemon) {
    fprintf(stderr, "foundry: error: cannot listen on %s:%" PRIu64 "\n", host,
            port);
    goto cleanup;
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
  fprintf(stderr,
          "foundry serve: model '%s' (context %" PRIu32 ", %" PRIu32
          " sequences) listening on http://%s:%u\n",
          srv.model_id, srv.context, srv.slots, host,
          info ? (unsigned)info->port : (unsigned)port);
  fflush(stderr);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  fprintf(stderr, "foundry serve: %s: finishing the accepted requests\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  pthread_mutex_lock(&srv.lock);
  srv.stopping = true;
  pthread_cond_signal(&srv.work);
  pthread_mutex_unlock(&srv.lock);
  pthread_join(engine, NULL);
  engine_started = false;
  /* let the HTTP threads send what they hold */
  pthread_mutex_lock(&srv.lock);
  while (srv.live > 0) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    if (pthread_cond_timedwait(&srv.changed, &srv.lock, &deadline) != 0) {
      break;
    }
  }
  pthread_mutex_unlock(&srv.lock);
  code = srv.failed ? FDY_EXIT_FAILURE : FDY_EXIT_OK;
  fprintf(stderr, "foundry serve: stopped\n");

cleanup:
  if (daemon) {
    MHD_stop_daemon(daemon);
  }
  if (engine_started) {
    pthread_mutex_lock(&srv.lock);
    srv.stopping = true;
    pthread_cond_signal(&srv.work);
    pthread_mutex_unlock(&srv.lock);
    pthread_join(engine, NULL);
  }
  if (locks) {
    pthread_mutex_destroy(&srv.lock);
    pthread_mutex_destroy(&srv.tok_lock);
    pthread_cond_destroy(&srv.work);
    pthread_cond_destroy(&srv.changed);
  }
  free(srv.running);
  free(srv.parts);
  free(srv.next);
  free(default_id);
  fdy_tokenizer_destroy(srv.tok);
  fdy_llama_session_destroy(srv.session);
  fdy_backend_destroy(backend);
  fdy_llama_close(model);
  return code;
}
