/* `foundry serve`: an OpenAI-compatible HTTP server (libmicrohttpd, one
 * thread per connection) over one Llama session with many slots.
 *
 * This file is the HTTP layer and the command: a connection's body is
 * parsed (serve_request.h), its prompt turned into ids, and the job
 * submitted to the engine (serve_engine.h), whose ids the connection then
 * sends as one JSON response or as server-sent events; with --draft-model
 * the engine speculates for a request running alone. SIGINT or SIGTERM:
 * new requests get 503, the accepted ones finish, the process exits 0.
 * docs/serve.md describes the endpoints and limits. */
#include <arpa/inet.h>
#include <errno.h>
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
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "cli_draft.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/chat.h"
#include "foundry/llama_session.h"
#include "foundry/tokenizer.h"
#include "prompt.h"
#include "serve_engine.h"
#include "serve_request.h"

#define DEFAULT_SEQUENCES 16u
#define DEFAULT_QUEUE     64u
#define DEFAULT_PORT      8080u
#define DEFAULT_GRACE     30u        /* seconds */
#define MAX_BODY_BYTES    (1u << 20) /* a larger body is a 413 */

/* What a connection sends of its job: the HTTP thread's alone. */
typedef struct reply {
  fdy_serve_job *job;
  uint32_t emitted; /* ids sent so far (streaming) */
  bool sent_role, sent_final, sent_done;
  char *pending; /* the event being sent */
  size_t pending_len, pending_sent;
} reply;

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

/* ---- prompts ------------------------------------------------------------ */

/* The ids of req's prompt into job (prompt, prompt_count, stop ids): its
 * ids as they are, a text through the tokenizer, or the chat's messages
 * through the chat template. On failure fills err (400). */
static fdy_status prompt_ids(fdy_server *srv, fdy_serve_request *req,
                             fdy_serve_job *job, fdy_serve_error *e) {
  *e = (fdy_serve_error){.status = 400, .type = "invalid_request_error"};
  snprintf(e->param, sizeof e->param, "%s", req->chat ? "messages" : "prompt");
  if (req->ids) {
    job->prompt = req->ids;
    job->prompt_count = req->id_count;
    req->ids = NULL;
    return FDY_OK;
  }
  if (!srv->tok) {
    snprintf(e->message, sizeof e->message, "%s",
             req->chat ? "the model has no tokenizer: no chat"
                       : "the model has no tokenizer: give the prompt as "
                         "token ids");
    return FDY_ERR_INVALID_ARGUMENT;
  }
  fdy_error err;
  fdy_status st;
  pthread_mutex_lock(&srv->tok_lock);
  if (req->chat) {
    fdy_chat *chat = NULL;
    fdy_tokens tokens = {0};
    fdy_chat_options options = {.system = req->system};
    st = fdy_chat_create(srv->session, srv->tok, &options, &chat, &err);
    for (uint32_t i = 0; st == FDY_OK && i < req->exchange_count; i++) {
      const char *user = req->history[2 * i], *answer = req->history[2 * i + 1];
      st = fdy_chat_add_exchange(chat, user, strlen(user), answer,
                                 strlen(answer), &err);
    }
    if (st == FDY_OK) {
      st = fdy_chat_prompt(chat, req->text, strlen(req->text), &tokens, &err);
    }
    if (st == FDY_OK && tokens.count > UINT32_MAX) {
      st = fdy_error_set(&err, FDY_ERR_OVERFLOW, "the prompt is too long");
    }
    if (st == FDY_OK) {
      job->stop_count = fdy_chat_stop_ids(chat, job->stop);
      job->prompt = tokens.ids;
      job->prompt_count = (uint32_t)tokens.count;
    } else {
      fdy_tokens_free(&tokens);
    }
    fdy_chat_destroy(chat);
  } else {
    st = fdy_cli_prompt_ids(srv->tok, req->text, NULL, &job->prompt,
                            &job->prompt_count, &err);
    if (st == FDY_OK) {
      job->stop_count = fdy_tokenizer_stop_ids(srv->tok, job->stop);
    }
  }
  pthread_mutex_unlock(&srv->tok_lock);
  if (st != FDY_OK) {
    snprintf(e->message, sizeof e->message, "%s", err.message);
  }
  return st;
}

/* ---- responses ----------------------------------------------------------- */

/* The released text of the job's ids[from..to) (malloc'd, sanitized to
 * valid UTF-8 for JSON), or NULL when out of memory. */
static char *text_of(fdy_server *srv, const fdy_serve_job *job, uint32_t from,
                     uint32_t to) {
  pthread_mutex_lock(&srv->lock);
  size_t start = from ? job->text_at[from - 1] : 0;
  size_t end = to ? job->text_at[to - 1] : 0;
  char *raw = malloc(end - start + 1);
  if (raw) {
    memcpy(raw, job->text.buf ? job->text.buf + start : "", end - start);
    raw[end - start] = '\0';
  }
  pthread_mutex_unlock(&srv->lock);
  char *safe = raw ? fdy_utf8_sanitize(raw) : NULL;
  free(raw);
  return safe;
}

static json_t *usage(const fdy_serve_job *job) {
  return json_pack("{s:I, s:I, s:I}", "prompt_tokens",
                   (json_int_t)job->prompt_count, "completion_tokens",
                   (json_int_t)job->count, "total_tokens",
                   (json_int_t)(job->prompt_count + job->count));
}

/* One choice: the message (chat) or text of ids[from..to), and the finish
 * reason when final (the job is done and to is its last id). */
static json_t *choice(fdy_server *srv, reply *rp, uint32_t from, uint32_t to,
                      bool delta, bool final) {
  fdy_serve_job *job = rp->job;
  char *safe = text_of(srv, job, from, to);
  json_t *c = json_pack("{s:i}", "index", 0);
  json_t *content = json_string(safe ? safe : "");
  free(safe);
  if (job->chat) {
    json_t *m = json_object();
    if (!delta || !rp->sent_role) {
      json_object_set_new(m, "role", json_string("assistant"));
      rp->sent_role = true;
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
  json_object_set_new(c, "token_ids",
                      fdy_cli_json_ids(job->ids + from, to - from));
  json_object_set_new(c, "finish_reason",
                      final && job->finish ? json_string(job->finish)
                                           : json_null());
  return c;
}

static json_t *envelope(fdy_server *srv, const fdy_serve_job *job,
                        json_t *choice_obj, bool chunk) {
  char id[48];
  snprintf(id, sizeof id, "%s-%" PRIu64, job->chat ? "chatcmpl" : "cmpl",
           job->number);
  const char *object =
      job->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                : "text_completion";
  return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object", object,
                   "created", (json_int_t)job->created, "model", srv->model_id,
                   "choices", choice_obj);
}

/* Ends the connection's hold on its job and frees the reply. */
static void reply_free(reply *rp) {
  fdy_server *srv = rp->job->srv;
  pthread_mutex_lock(&srv->lock);
  fdy_serve_cancel(rp->job);
  fdy_serve_job_unref(rp->job);
  pthread_mutex_unlock(&srv->lock);
  free(rp->pending);
  free(rp);
}

/* The SSE reader of a streaming response: blocks until ids or the end. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  reply *rp = cls;
  fdy_serve_job *job = rp->job;
  fdy_server *srv = job->srv;
  while (rp->pending_sent == rp->pending_len) {
    free(rp->pending);
    rp->pending = NULL;
    rp->pending_len = rp->pending_sent = 0;
    if (rp->sent_done) {
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_lock(&srv->lock);
    while (!job->done && job->count == rp->emitted) {
      pthread_cond_wait(&srv->changed, &srv->lock);
    }
    /* one id per event */
    uint32_t count = job->count;
    uint32_t to = count > rp->emitted ? rp->emitted + 1 : count;
    bool done = job->done, failed = job->failed;
    pthread_mutex_unlock(&srv->lock);
    json_t *event = NULL;
    if (failed) {
      event = json_pack("{s:{s:s, s:s}}", "error", "message", job->error,
                        "type", "server_error");
    } else if (to > rp->emitted || (done && !rp->sent_final)) {
      bool final = done && to == count;
      event = envelope(srv, job, choice(srv, rp, rp->emitted, to, true, final),
                       true);
      if (event && final) {
        json_object_set_new(event, "usage", usage(job));
      }
      rp->emitted = to;
      rp->sent_final = final;
    }
    char *text = event ? json_dumps(event, JSON_COMPACT) : NULL;
    json_decref(event);
    size_t n = text ? strlen(text) : 0;
    bool last = done && (failed || rp->sent_final);
    rp->pending = malloc(n + 32);
    if (!rp->pending) {
      free(text);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    rp->pending_len = 0;
    if (text) {
      rp->pending_len = (size_t)sprintf(rp->pending, "data: %s\n\n", text);
    }
    free(text);
    if (last) {
      rp->pending_len +=
          (size_t)sprintf(rp->pending + rp->pending_len, "data: [DONE]\n\n");
      rp->sent_done = true;
    }
  }
  size_t n = rp->pending_len - rp->pending_sent;
  n = n < max ? n : max;
  memcpy(buf, rp->pending + rp->pending_sent, n);
  rp->pending_sent += n;
  return (ssize_t)n;
}

/* The stream's end (finished or the client gone): cancels the job when it
 * still runs. */
static void stream_free(void *cls) {
  reply_free(cls);
}

/* Sends a refusal of the parser or of the checks after it. */
static enum MHD_Result send_refusal(fdy_server *srv, struct MHD_Connection *c,
                                    const fdy_serve_error *e) {
  fdy_serve_count(srv, e->status >= 500 ? FDY_SERVE_OUTCOME_FAILED
                                        : FDY_SERVE_OUTCOME_INVALID);
  return send_error(c, e->status, e->type, e->param[0] ? e->param : NULL,
                    e->code, "%s", e->message);
}

/* Whether the client of c closed its connection (or it broke): a peek at
 * its socket that does not block. */
static bool client_gone(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!info) {
    return false;
  }
  char byte;
  ssize_t n = recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 ||
         (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* The job of a parsed request: prompt ids, sampling checked, max_tokens
 * fitted to the context. NULL with e filled on a refusal. */
static fdy_serve_job *make_job(fdy_server *srv, fdy_serve_request *req,
                               fdy_serve_error *e) {
  fdy_serve_job *job = fdy_serve_job_create(srv);
  if (!job) {
    *e = (fdy_serve_error){.status = 500, .type = "server_error"};
    snprintf(e->message, sizeof e->message, "out of memory");
    return NULL;
  }
  job->chat = req->chat;
  job->stream = req->stream;
  job->sampling = req->sampling;
  if (!req->seed_given) {
    job->sampling.seed = (uint64_t)time(NULL) * 1000003u + job->number;
  }
  fdy_error err;
  fdy_status st = prompt_ids(srv, req, job, e);
  if (st == FDY_OK && req->stop_count > 0 && !srv->tok) {
    *e = (fdy_serve_error){
        .status = 400, .type = "invalid_request_error", .param = "stop"};
    snprintf(e->message, sizeof e->message,
             "the model has no tokenizer: no stop strings");
    st = FDY_ERR_INVALID_ARGUMENT;
  }
  if (st == FDY_OK &&
      (st = fdy_llama_sampling_check(&job->sampling, &err)) != FDY_OK) {
    *e = (fdy_serve_error){.status = 400, .type = "invalid_request_error"};
    snprintf(e->param, sizeof e->param, "%.63s", err.name);
    snprintf(e->message, sizeof e->message, "%s", err.message);
  }
  if (st == FDY_OK) {
    st = fdy_serve_request_fit(req, job->prompt_count, srv->context, e);
  }
  if (st == FDY_OK) {
    job->max_tokens = req->max_tokens;
    memcpy(job->stop_text, req->stop, sizeof req->stop);
    job->stop_text_count = req->stop_count;
    req->stop_count = 0;
    if ((st = fdy_serve_job_alloc(job, &err)) != FDY_OK) {
      *e = (fdy_serve_error){.status = 500, .type = "server_error"};
      snprintf(e->message, sizeof e->message, "%s", err.message);
    }
  }
  if (st != FDY_OK) {
    pthread_mutex_lock(&srv->lock);
    fdy_serve_job_unref(job);
    pthread_mutex_unlock(&srv->lock);
    return NULL;
  }
  return job;
}

/* Submits job, whose reference moves to the reply *out. A refusal (429
 * when the queue is full, 503 when the server stops or failed) is sent,
 * *out NULL; so is a failed allocation (MHD_NO). */
static enum MHD_Result submit(fdy_server *srv, struct MHD_Connection *c,
                              fdy_serve_job *job, reply **out) {
  *out = NULL;
  reply *rp = calloc(1, sizeof *rp);
  if (!rp) {
    pthread_mutex_lock(&srv->lock);
    fdy_serve_job_unref(job);
    pthread_mutex_unlock(&srv->lock);
    return MHD_NO;
  }
  rp->job = job;
  unsigned refused = fdy_serve_submit(srv, job);
  if (!refused) {
    *out = rp;
    return MHD_YES;
  }
  reply_free(rp);
  if (refused == MHD_HTTP_TOO_MANY_REQUESTS) {
    return send_error(c, refused, "rate_limit_error", NULL, "queue_full",
                      "%" PRIu32 " requests are waiting already; try again",
                      srv->max_queue);
  }
  pthread_mutex_lock(&srv->lock);
  char failure[sizeof srv->failure];
  snprintf(failure, sizeof failure, "%s",
           srv->failed ? srv->failure : "the server is stopping");
  pthread_mutex_unlock(&srv->lock);
  return send_error(c, refused, "server_error", NULL, "unavailable", "%s",
                    failure);
}

/* Answers with server-sent events as the ids come (stream_read); the
 * response owns rp from here. */
static enum MHD_Result send_stream(struct MHD_Connection *c, reply *rp) {
  struct MHD_Response *resp = MHD_create_response_from_callback(
      MHD_SIZE_UNKNOWN, 4096, stream_read, rp, stream_free);
  if (!resp) {
    reply_free(rp);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* Waits for the end of job, watching the client: true when it went first
 * (the caller's reply_free then cancels the job). */
static bool wait_for_end(fdy_server *srv, struct MHD_Connection *c,
                         const fdy_serve_job *job) {
  bool gone = false;
  pthread_mutex_lock(&srv->lock);
  while (!job->done && !gone) {
    fdy_serve_wait(srv, 100);
    if (!job->done) {
      pthread_mutex_unlock(&srv->lock);
      gone = client_gone(c);
      pthread_mutex_lock(&srv->lock);
    }
  }
  pthread_mutex_unlock(&srv->lock);
  return gone;
}

/* Answers with one JSON response at the job's end: the completion, or its
 * error (cancelled by the server's stop: 503; the backend failed: 500).
 * Frees rp. */
static enum MHD_Result send_completion(fdy_server *srv,
                                       struct MHD_Connection *c, reply *rp) {
  fdy_serve_job *job = rp->job;
  if (wait_for_end(srv, c, job)) {
    reply_free(rp);
    return MHD_NO;
  }
  enum MHD_Result ret;
  if (job->failed) {
    ret = send_error(c,
                     job->cancelled ? MHD_HTTP_SERVICE_UNAVAILABLE
                                    : MHD_HTTP_INTERNAL_SERVER_ERROR,
                     "server_error", NULL, NULL, "%s", job->error);
  } else {
    json_t *resp =
        envelope(srv, job, choice(srv, rp, 0, job->count, false, true), false);
    if (resp) {
      json_object_set_new(resp, "usage", usage(job));
    }
    ret = send_json(c, MHD_HTTP_OK, resp);
  }
  reply_free(rp);
  return ret;
}

/* A generation of a checked POST: the body parsed into a job, submitted,
 * and answered as a stream or at its end. */
static enum MHD_Result handle_generation(fdy_server *srv,
                                         struct MHD_Connection *c,
                                         const body *b, bool chat) {
  fdy_serve_limits limits = {.model_id = srv->model_id,
                             .vocab = srv->vocab,
                             .sampling = srv->default_sampling};
  fdy_serve_request req;
  fdy_serve_error e;
  if (fdy_serve_request_parse(b->data, b->len, chat, &limits, &req, &e) !=
      FDY_OK) {
    return send_refusal(srv, c, &e);
  }
  fdy_serve_job *job = make_job(srv, &req, &e);
  fdy_serve_request_free(&req);
  if (!job) {
    return send_refusal(srv, c, &e);
  }
  reply *rp;
  enum MHD_Result ret = submit(srv, c, job, &rp);
  if (!rp) {
    return ret;
  }
  return job->stream ? send_stream(c, rp) : send_completion(srv, c, rp);
}

/* Whether the request may pass: no --api-key, or its Authorization header
 * is "Bearer KEY" (compared in time independent of where they differ). */
static bool authorized(const fdy_server *srv, struct MHD_Connection *c) {
  if (!srv->api_key) {
    return true;
  }
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                              MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
    return false;
  }
  h += 7;
  size_t n = strlen(h), k = strlen(srv->api_key);
  unsigned diff = n != k;
  for (size_t i = 0; i < k; i++) {
    diff |= (unsigned char)srv->api_key[i] ^ (unsigned char)(i < n ? h[i] : 0);
  }
  return diff == 0;
}

/* Adds a piece of the upload to b; past MAX_BODY_BYTES, b is only marked
 * too large. */
static enum MHD_Result receive(body *b, const char *data, size_t *size) {
  if (!b->too_large && b->len + *size <= MAX_BODY_BYTES) {
    char *grown = realloc(b->data, b->len + *size + 1);
    if (!grown) {
      return MHD_NO;
    }
    memcpy(grown + b->len, data, *size);
    b->data = grown;
    b->len += *size;
  } else {
    b->too_large = true;
  }
  *size = 0;
  return MHD_YES;
}

/* GET /health: ok with the running and queued requests, or 503 with the
 * engine's failure. */
static enum MHD_Result send_health(fdy_server *srv, struct MHD_Connection *c) {
  pthread_mutex_lock(&srv->lock);
  bool failed = srv->failed;
  json_t *root =
      failed ? json_pack("{s:s, s:s}", "status", "error", "error", srv->failure)
             : json_pack("{s:s, s:I, s:I}", "status", "ok", "running",
                         (json_int_t)srv->active, "queued",
                         (json_int_t)srv->queued);
  pthread_mutex_unlock(&srv->lock);
  return send_json(c, failed ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
                   root);
}

/* GET /metrics in Prometheus text. */
static enum MHD_Result send_metrics(fdy_server *srv, struct MHD_Connection *c) {
  char *text = fdy_serve_metrics_now(srv);
  return text ? send_text(c, MHD_HTTP_OK, text,
                          "text/plain; version=0.0.4; charset=utf-8", NULL)
              : MHD_NO;
}

/* GET /v1/models: the one model. */
static enum MHD_Result send_models(fdy_server *srv, struct MHD_Connection *c) {
  return send_json(c, MHD_HTTP_OK,
                   json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object",
                             "list", "data", "id", srv->model_id, "object",
                             "model", "created", (json_int_t)0, "owned_by",
                             "foundry"));
}

/* /v1/completions and /v1/chat/completions: a method other than POST
 * (405), a body over the limit (413) or not JSON (415) refused, then the
 * generation. */
static enum MHD_Result handle_completions(fdy_server *srv,
                                          struct MHD_Connection *c,
                                          const char *url, const char *method,
                                          const body *b, bool chat) {
  bool post = strcmp(method, "POST") == 0;
  const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
  bool json = !type || (strncasecmp(type, "application/json", 16) == 0 &&
                        strchr("; \t", type[16]));
  if (!post || b->too_large || !json) {
    fdy_serve_count(srv, FDY_SERVE_OUTCOME_INVALID);
  }
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
  if (!json) {
    char *safe = fdy_utf8_sanitize(type);
    enum MHD_Result ret = send_error(
        c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "invalid_request_error", NULL, NULL,
        "the body must be JSON (Content-Type: application/json), not "
        "'%.200s'",
        safe ? safe : "");
    free(safe);
    return ret;
  }
  return handle_generation(srv, c, b, chat);
}

/* A connection's request: its body gathered, the API key checked (but for
 * /health), then routed by method and URL (404 for none). */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls) {
  (void)version;
  fdy_server *srv = cls;
  body *b = *con_cls;
  if (!b) {
    b = calloc(1, sizeof *b);
    if (!b) {
      return MHD_NO;
    }
    *con_cls = b;
    pthread_mutex_lock(&srv->lock);
    srv->requests++;
    pthread_mutex_unlock(&srv->lock);
    return MHD_YES;
  }
  if (*upload_data_size > 0) {
    return receive(b, upload_data, upload_data_size);
  }
  bool get = strcmp(method, "GET") == 0;
  bool open = strcmp(url, "/health") == 0;
  if (!open && !authorized(srv, c)) {
    fdy_serve_count(srv, FDY_SERVE_OUTCOME_INVALID);
    return send_error(c, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", NULL,
                      "invalid_api_key",
                      "a missing or wrong API key: send the header "
                      "'Authorization: Bearer KEY' with the key of --api-key");
  }
  if (get && strcmp(url, "/health") == 0) {
    return send_health(srv, c);
  }
  if (get && strcmp(url, "/metrics") == 0) {
    return send_metrics(srv, c);
  }
  if (get && strcmp(url, "/v1/models") == 0) {
    return send_models(srv, c);
  }
  bool completions = strcmp(url, "/v1/completions") == 0;
  bool chat = strcmp(url, "/v1/chat/completions") == 0;
  if (completions || chat) {
    return handle_completions(srv, c, url, method, b, chat);
  }
  fdy_serve_count(srv, FDY_SERVE_OUTCOME_INVALID);
  return send_error(c, MHD_HTTP_NOT_FOUND, "invalid_request_error", NULL, NULL,
                    "no endpoint %s %s", method, url);
}

/* A request's end (its answer sent, or the connection closed): frees its
 * body and counts it off srv->requests. */
static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)c;
  (void)toe;
  fdy_server *srv = cls;
  body *b = *con_cls;
  if (b) {
    free(b->data);
    free(b);
    *con_cls = NULL;
    pthread_mutex_lock(&srv->lock);
    srv->requests--;
    pthread_cond_broadcast(&srv->changed);
    pthread_mutex_unlock(&srv->lock);
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
          "finishes the accepted requests (within --grace) and exits 0.\n"
          "\n"
          "options:\n"
          "  --host ADDR      IPv4 or IPv6 address to bind (default\n"
          "                   127.0.0.1; ::1 for IPv6 loopback)\n"
          "  --port P         TCP port, 0 for any free one (default %u); the\n"
          "                   address is printed on stderr once listening\n"
          "  --model-id NAME  the model's id (default: DIR's base name)\n"
          "  --max-sequences N  requests generated at once, 1 to %u\n"
          "                   (default %u), each with a KV cache of the\n"
          "                   context\n"
          "  --max-queue Q    requests that may wait beyond the running\n"
          "                   ones (default %u); more get 429\n"
          "  --grace S        on SIGINT or SIGTERM, seconds the accepted\n"
          "                   requests may run on before they are cancelled\n"
          "                   (503), 0 to 86400 (default %u)\n"
          "  --api-key KEY    requests other than GET /health must carry\n"
          "                   'Authorization: Bearer KEY' (else 401);\n"
          "                   default: $FOUNDRY_API_KEY when set\n"
          "  --tokenizer FILE a tokenizer.json or tiktoken file instead of\n"
          "                   the model directory's (without one, only\n"
          "                   token-id prompts are served)\n"
          "  --backend NAME   cpu (the default) or cuda\n"
          "  --threads T      cpu backend threads (default: online CPUs)\n"
          "  --context C      KV cache positions per sequence (default: the\n"
          "                   model's max_position_embeddings, at most 4096)\n"
          "  --kv-dtype D     KV cache dtype: f32 (default) or f16\n",
          DEFAULT_PORT, FDY_LLAMA_MAX_SEQUENCES, DEFAULT_SEQUENCES,
          DEFAULT_QUEUE, DEFAULT_GRACE);
  fdy_cli_session_flags_help(out);
  fprintf(out,
          "  --draft-model DIR  speculative decoding while one request runs\n"
          "                   alone: DIR, a small checkpoint of the same\n"
          "                   vocabulary, resident on the same backend,\n"
          "                   proposes ids that the model checks in one pass\n"
          "                   (greedy, the model's own ids; sampled, the\n"
          "                   rejection rule keeps its distribution); while\n"
          "                   several run, the batch decodes as without it.\n"
          "                   /metrics counts the proposed and accepted ids\n");
  fdy_cli_draft_tokens_help(out);
}

/* The rows of the model's steps with a draft: the session's default (one
 * for one sequence, else the sequences and a prefill chunk), and at least
 * the max_k + 1 rows that verify max_k drafted ids. */
static uint32_t verify_rows(const fdy_llama_session_options *o,
                            const fdy_llama_config *config, uint32_t max_k) {
  uint32_t context = o->context;
  if (context == 0) {
    context = config->max_position_embeddings < FDY_LLAMA_DEFAULT_CONTEXT
                  ? config->max_position_embeddings
                  : FDY_LLAMA_DEFAULT_CONTEXT;
  }
  uint32_t prefill = o->prefill_rows ? o->prefill_rows
                     : context < FDY_LLAMA_DEFAULT_PREFILL_ROWS
                         ? context
                         : FDY_LLAMA_DEFAULT_PREFILL_ROWS;
  uint32_t rows = o->max_sequences == 1 ? 1 : o->max_sequences + prefill;
  return rows > max_k + 1 ? rows : max_k + 1;
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

/* The address --host names: IPv4 or IPv6 (a sockaddr for
 * MHD_OPTION_SOCK_ADDR), and the host as a URL writes it (IPv6 in
 * brackets). */
struct bind_address {
  struct sockaddr_storage address;
  bool ipv6;
  char url_host[INET6_ADDRSTRLEN + 2];
};

/* Fills *b from host and port; false when host is neither address. */
static bool bind_address_of(const char *host, uint16_t port,
                            struct bind_address *b) {
  memset(b, 0, sizeof *b);
  struct sockaddr_in *v4 = (struct sockaddr_in *)&b->address;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&b->address;
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    snprintf(b->url_host, sizeof b->url_host, "%s", host);
    return true;
  }
  memset(b, 0, sizeof *b);
  if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    b->ipv6 = true;
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    snprintf(b->url_host, sizeof b->url_host, "[%s]", text);
    return true;
  }
  return false;
}

/* The command's options, as parsed. */
typedef struct serve_args {
  const char *model_dir;
  const char *host;     /* --host, an IPv4 or IPv6 address */
  const char *model_id; /* NULL: DIR's base name */
  const char *api_key;  /* --api-key, else $FOUNDRY_API_KEY; NULL: none */
  uint64_t port, sequences, queue, grace;
  struct bind_address bind; /* of host and port */
  fdy_cli_session_flags session;
  fdy_cli_draft_flags draft;
  fdy_cli_text_flags text; /* --tokenizer alone */
} serve_args;

static const fdy_cli_flag flags[] = {
    {FDY_CLI_TEXT("model", serve_args, model_dir)},
    {FDY_CLI_TEXT("host", serve_args, host)},
    {FDY_CLI_U64("port", serve_args, port, 0, 65535)},
    {FDY_CLI_TEXT("model-id", serve_args, model_id)},
    {FDY_CLI_U64("max-sequences", serve_args, sequences, 1,
                 FDY_LLAMA_MAX_SEQUENCES)},
    {FDY_CLI_U64("max-queue", serve_args, queue, 0, 1u << 20)},
    {FDY_CLI_TEXT("tokenizer", serve_args, text.tokenizer)},
    {FDY_CLI_TEXT("api-key", serve_args, api_key)},
    {FDY_CLI_U64("grace", serve_args, grace, 0, 86400)},
    {FDY_CLI_SESSION_ROWS(serve_args, session)},
    {FDY_CLI_ENGINE_ROWS(serve_args, session)},
    {FDY_CLI_DRAFT_ROWS(serve_args, draft)},
    {FDY_CLI_END},
};

/* The flags into *a, and the checks between them: FDY_EXIT_OK or the
 * usage error printed. */
static int parse(int argc, char **argv, serve_args *a) {
  *a = (serve_args){.host = "127.0.0.1",
                    .port = DEFAULT_PORT,
                    .sequences = DEFAULT_SEQUENCES,
                    .queue = DEFAULT_QUEUE,
                    .grace = DEFAULT_GRACE,
                    .session = FDY_CLI_SESSION_FLAGS_DEFAULT,
                    .text = {.template_kind = FDY_CHAT_TEMPLATE_AUTO}};
  int code = fdy_cli_parse_flags("serve", argc, argv, flags, a, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (!a->model_dir) {
    return fdy_cli_usage("serve", "--model is required");
  }
  code = fdy_cli_draft_check("serve", &a->draft);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (!a->api_key) {
    /* the key kept out of the process list */
    const char *env = getenv("FOUNDRY_API_KEY");
    a->api_key = env && env[0] ? env : NULL;
  }
  if (!bind_address_of(a->host, (uint16_t)a->port, &a->bind)) {
    return fdy_cli_usage(
        "serve", "--host must be an IPv4 or IPv6 address, got '%s'", a->host);
  }
  return FDY_EXIT_OK;
}

/* The server and what it holds beyond it. */
typedef struct serve_run {
  fdy_server srv;
  fdy_llama_model *model, *draft_model;
  fdy_backend *backend;
  char *default_id; /* DIR's base name */
  struct MHD_Daemon *daemon;
  pthread_t engine;
  bool engine_started;
  sigset_t stop_signals; /* SIGINT and SIGTERM, blocked in every thread */
} serve_run;

/* Stops the daemon and the engine (when they run), then frees it all. */
static void serve_run_close(serve_run *r) {
  if (r->daemon) {
    MHD_stop_daemon(r->daemon);
  }
  if (r->engine_started) {
    pthread_mutex_lock(&r->srv.lock);
    r->srv.stopping = true;
    pthread_cond_signal(&r->srv.work);
    pthread_mutex_unlock(&r->srv.lock);
    pthread_join(r->engine, NULL);
  }
  fdy_server_release(&r->srv);
  free(r->default_id);
  fdy_tokenizer_destroy(r->srv.tok);
  fdy_llama_speculator_destroy(r->srv.speculator);
  fdy_llama_session_destroy(r->srv.draft);
  fdy_llama_session_destroy(r->srv.session);
  fdy_backend_destroy(r->backend);
  fdy_llama_close(r->draft_model);
  fdy_llama_close(r->model);
}

/* The model (and the draft), the backend, the session of --max-sequences
 * slots, the draft's session and the speculator. */
static fdy_status open_sessions(const serve_args *a, serve_run *r,
                                fdy_error *err) {
  fdy_server *srv = &r->srv;
  fdy_status st = fdy_cli_check_manifest(&a->session, a->model_dir, NULL, err);
  if (st == FDY_OK) {
    st = fdy_llama_open(a->model_dir, &r->model, err);
  }
  if (st == FDY_OK) {
    srv->config = fdy_llama_model_config(r->model);
  }
  if (st == FDY_OK && a->draft.dir) {
    /* another vocabulary is refused here, before any session */
    st = fdy_cli_open_draft(a->draft.dir, r->model, &r->draft_model, err);
  }
  if (st == FDY_OK) {
    st =
        fdy_cli_backend_create(a->session.backend, (uint32_t)a->session.threads,
                               a->session.serial_launch, &r->backend, err);
  }
  if (st == FDY_OK) {
    fdy_llama_session_options o =
        fdy_cli_session_options(&a->session, r->backend);
    /* the rejection rule of sampled requests reads the logits */
    o.ids_only = !r->draft_model;
    o.max_sequences = (uint32_t)a->sequences;
    fdy_cli_cap_prefill_rows(&o, srv->config);
    if (r->draft_model) {
      o.step_rows = verify_rows(&o, srv->config, srv->spec.max_draft_tokens);
    }
    st = fdy_llama_session_create(r->model, &o, &srv->session, err);
    if (st != FDY_OK) {
      fdy_cli_explain_budget(&a->session, err);
    }
  }
  if (st == FDY_OK && r->draft_model) {
    st = fdy_cli_draft_session(&a->session, r->draft_model, r->backend,
                               fdy_llama_session_context(srv->session), true,
                               &srv->draft, err);
  }
  if (st == FDY_OK && srv->draft) {
    st = fdy_llama_speculator_create(srv->session, srv->draft,
                                     srv->spec.max_draft_tokens, true,
                                     &srv->speculator, err);
  }
  return st;
}

/* The server of the flags, ready to start: the sessions, the tokenizer
 * (without --tokenizer, a model with none serves token-id prompts), the
 * default sampling (generation_config.json, else OpenAI's) and the id. */
static fdy_status open_server(const serve_args *a, serve_run *r,
                              fdy_error *err) {
  fdy_server *srv = &r->srv;
  *srv = (fdy_server){.max_queue = (uint32_t)a->queue,
                      .slots = (uint32_t)a->sequences,
                      .api_key = a->api_key,
                      .spec = fdy_cli_draft_speculative(&a->draft)};
  fdy_status st = open_sessions(a, r, err);
  if (st == FDY_OK) {
    st =
        fdy_cli_open_tokenizer(a->model_dir, a->text.tokenizer, &srv->tok, err);
    if (st != FDY_OK && !a->text.tokenizer) {
      fprintf(stderr,
              "foundry serve: no tokenizer (%s): only token-id prompts are "
              "served\n",
              err->message);
      srv->tok = NULL;
      st = FDY_OK;
    }
  }
  bool found = false;
  if (st == FDY_OK) {
    st = fdy_cli_generation_config(a->model_dir, &srv->default_sampling, &found,
                                   err);
  }
  if (st != FDY_OK) {
    return st;
  }
  if (!found) {
    /* as OpenAI: temperature 1 when the request says nothing */
    srv->default_sampling = (fdy_sample_params){
        .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  }
  srv->vocab = srv->config->vocab_size;
  srv->context = fdy_llama_session_context(srv->session);
  r->default_id = base_name(a->model_dir);
  srv->model_id = a->model_id ? a->model_id : r->default_id;
  if (!r->default_id) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  return fdy_server_init(srv, err);
}

/* Starts the engine thread and the HTTP daemon (SIGINT and SIGTERM
 * blocked first, for the wait alone) and says where it listens:
 * FDY_EXIT_OK, else the error printed and FDY_EXIT_FAILURE. */
static int start(const serve_args *a, serve_run *r) {
  sigemptyset(&r->stop_signals);
  sigaddset(&r->stop_signals, SIGINT);
  sigaddset(&r->stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &r->stop_signals, NULL);
  signal(SIGPIPE, SIG_IGN);
  fdy_server *srv = &r->srv;
  if (pthread_create(&r->engine, NULL, fdy_serve_engine_main, srv) != 0) {
    fprintf(stderr, "foundry: error: cannot start the engine thread\n");
    return FDY_EXIT_FAILURE;
  }
  r->engine_started = true;
  r->daemon = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
          MHD_USE_ERROR_LOG | (a->bind.ipv6 ? MHD_USE_IPv6 : 0),
      (uint16_t)a->port, NULL, NULL, handle, srv, MHD_OPTION_SOCK_ADDR,
      (const struct sockaddr *)&a->bind.address, MHD_OPTION_NOTIFY_COMPLETED,
      completed, srv, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
      MHD_OPTION_END);
  if (!r->daemon) {
    fprintf(stderr, "foundry: error: cannot listen on %s:%" PRIu64 "\n",
            a->bind.url_host, a->port);
    return FDY_EXIT_FAILURE;
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(r->daemon, MHD_DAEMON_INFO_BIND_PORT);
  char drafting[96] = "";
  if (srv->draft) {
    snprintf(drafting, sizeof drafting,
             ", a draft (context %" PRIu32 ") proposing K %" PRIu32 "%s",
             fdy_llama_session_context(srv->draft), srv->spec.draft_tokens,
             srv->spec.fixed ? " fixed" : " adaptive");
  }
  fprintf(stderr,
          "foundry serve: model '%s' (context %" PRIu32 ", %" PRIu32
          " sequences%s) listening on http://%s:%u\n",
          srv->model_id, srv->context, srv->slots, drafting, a->bind.url_host,
          info ? (unsigned)info->port : (unsigned)a->port);
  fflush(stderr);
  return FDY_EXIT_OK;
}

/* Waits for SIGINT or SIGTERM, then stops: the accepted requests finish
 * within the grace period (the rest cancelled), the engine ends, and the
 * HTTP threads get at most 10 s to send the answers they hold (a request
 * counts until MHD reports its answer sent: stopping the daemon earlier
 * would drop a queued 503 unsent). FDY_EXIT_OK, or
 * FDY_EXIT_FAILURE when the engine failed. */
static int serve_until_stopped(const serve_args *a, serve_run *r) {
  fdy_server *srv = &r->srv;
  int sig = 0;
  sigwait(&r->stop_signals, &sig);
  fprintf(stderr, "foundry serve: %s: finishing the accepted requests\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  uint32_t cancelled = fdy_serve_stop(srv, (uint32_t)a->grace);
  if (cancelled > 0) {
    fprintf(stderr,
            "foundry serve: %" PRIu32 " requests still running after the "
            "grace period of %" PRIu64 " s: cancelled\n",
            cancelled, a->grace);
  }
  pthread_join(r->engine, NULL);
  r->engine_started = false;
  pthread_mutex_lock(&srv->lock);
  int64_t until = fdy_now_ns() + 10000000000;
  while ((srv->live > 0 || srv->requests > 0) && fdy_now_ns() < until) {
    fdy_serve_wait(srv, 100);
  }
  pthread_mutex_unlock(&srv->lock);
  int code = srv->failed ? FDY_EXIT_FAILURE : FDY_EXIT_OK;
  fprintf(stderr, "foundry serve: stopped\n");
  return code;
}

int fdy_cmd_serve(int argc, char **argv) {
  serve_args a;
  int code = parse(argc, argv, &a);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  serve_run r = {0};
  fdy_error err;
  if (open_server(&a, &r, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
  } else {
    code = start(&a, &r);
    if (code == FDY_EXIT_OK) {
      code = serve_until_stopped(&a, &r);
    }
  }
  serve_run_close(&r);
  return code;
}
