/* The metrics of `foundry serve` in Prometheus text (serve_metrics.h). */
#include "serve_metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_bounds[FDY_SERVE_TTFT_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

static const char *const outcome_names[FDY_SERVE_OUTCOMES] = {
    "stop",    "length",     "cancelled",  "failed",
    "invalid", "queue_full", "unavailable"};

void fdy_serve_metrics_step(fdy_serve_metrics *m, uint32_t sequences,
                            uint32_t decode_rows, int64_t ns) {
  uint32_t b = 0;
  while (b < FDY_SERVE_BATCH_BUCKETS && sequences > (1u << b)) {
    b++;
  }
  m->batch[b]++;
  m->batch_sum += sequences;
  m->steps++;
  if (decode_rows > 0) {
    m->rate_rows[m->rate_next] = decode_rows;
    m->rate_ns[m->rate_next] = ns;
    m->rate_next = (m->rate_next + 1) % FDY_SERVE_RATE_STEPS;
  }
}

void fdy_serve_metrics_ttft(fdy_serve_metrics *m, double seconds) {
  uint32_t b = 0;
  while (b < FDY_SERVE_TTFT_BUCKETS && seconds > ttft_bounds[b]) {
    b++;
  }
  m->ttft[b]++;
  m->ttft_sum += seconds;
  m->ttft_count++;
}

/* A growing text. */
typedef struct text {
  char *buf;
  size_t len, cap;
  bool failed;
} text;

static void add(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
  for (;;) {
    if (t->failed) {
      return;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf ? t->buf + t->len : NULL,
                      t->buf ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if (t->buf && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
    char *grown = realloc(t->buf, cap);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->buf = grown;
    t->cap = cap;
  }
}

/* The requests by outcome, the token counters and the queue's gauges. */
static void add_requests(text *t, const fdy_serve_metrics *m) {
  add(t, "# HELP foundry_requests_total Requests by how they ended.\n"
         "# TYPE foundry_requests_total counter\n");
  for (int i = 0; i < FDY_SERVE_OUTCOMES; i++) {
    add(t, "foundry_requests_total{outcome=\"%s\"} %" PRIu64 "\n",
        outcome_names[i], m->requests[i]);
  }
  add(t,
      "# HELP foundry_prompt_tokens_total Prompt tokens of the requests "
      "admitted.\n"
      "# TYPE foundry_prompt_tokens_total counter\n"
      "foundry_prompt_tokens_total %" PRIu64 "\n"
      "# HELP foundry_generated_tokens_total Tokens generated.\n"
      "# TYPE foundry_generated_tokens_total counter\n"
      "foundry_generated_tokens_total %" PRIu64 "\n"
      "# HELP foundry_queue_depth Requests waiting for a slot.\n"
      "# TYPE foundry_queue_depth gauge\n"
      "foundry_queue_depth %" PRIu32 "\n"
      "# HELP foundry_running_sequences Requests in a slot.\n"
      "# TYPE foundry_running_sequences gauge\n"
      "foundry_running_sequences %" PRIu32 "\n",
      m->prompt_tokens, m->generated_tokens, m->queued, m->running);
}

/* The histogram of the sequences in each engine step. */
static void add_batch_sizes(text *t, const fdy_serve_metrics *m) {
  add(t, "# HELP foundry_step_batch_size Sequences in each engine step.\n"
         "# TYPE foundry_step_batch_size histogram\n");
  uint64_t cumulative = 0;
  for (int b = 0; b < FDY_SERVE_BATCH_BUCKETS; b++) {
    cumulative += m->batch[b];
    add(t, "foundry_step_batch_size_bucket{le=\"%u\"} %" PRIu64 "\n", 1u << b,
        cumulative);
  }
  add(t,
      "foundry_step_batch_size_bucket{le=\"+Inf\"} %" PRIu64 "\n"
      "foundry_step_batch_size_sum %" PRIu64 "\n"
      "foundry_step_batch_size_count %" PRIu64 "\n",
      m->steps, m->batch_sum, m->steps);
}

/* The histogram of the seconds to the first token. */
static void add_ttft(text *t, const fdy_serve_metrics *m) {
  add(t, "# HELP foundry_time_to_first_token_seconds Seconds from a request's "
         "arrival to its first token.\n"
         "# TYPE foundry_time_to_first_token_seconds histogram\n");
  uint64_t cumulative = 0;
  for (int b = 0; b < FDY_SERVE_TTFT_BUCKETS; b++) {
    cumulative += m->ttft[b];
    add(t,
        "foundry_time_to_first_token_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
        ttft_bounds[b], cumulative);
  }
  add(t,
      "foundry_time_to_first_token_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n"
      "foundry_time_to_first_token_seconds_sum %.6f\n"
      "foundry_time_to_first_token_seconds_count %" PRIu64 "\n",
      m->ttft_count, m->ttft_sum, m->ttft_count);
}

/* The decode rate over the last steps that decoded. */
static void add_decode_rate(text *t, const fdy_serve_metrics *m) {
  uint64_t rows = 0;
  int64_t ns = 0;
  for (int i = 0; i < FDY_SERVE_RATE_STEPS; i++) {
    rows += m->rate_rows[i];
    ns += m->rate_ns[i];
  }
  add(t,
      "# HELP foundry_decode_tokens_per_second Decode tokens per second of "
      "the last %d steps that decoded.\n"
      "# TYPE foundry_decode_tokens_per_second gauge\n"
      "foundry_decode_tokens_per_second %.3f\n",
      FDY_SERVE_RATE_STEPS, ns > 0 ? (double)rows * 1e9 / (double)ns : 0.0);
}

/* The counters of speculation (--draft-model). */
static void add_draft(text *t, const fdy_serve_metrics *m) {
  add(t,
      "# HELP foundry_draft_rounds_total Speculative rounds for a request "
      "running alone (--draft-model), one pass of the model each.\n"
      "# TYPE foundry_draft_rounds_total counter\n"
      "foundry_draft_rounds_total %" PRIu64 "\n"
      "# HELP foundry_draft_proposed_tokens_total Tokens the draft "
      "proposed.\n"
      "# TYPE foundry_draft_proposed_tokens_total counter\n"
      "foundry_draft_proposed_tokens_total %" PRIu64 "\n"
      "# HELP foundry_draft_accepted_tokens_total Proposed tokens the model "
      "accepted.\n"
      "# TYPE foundry_draft_accepted_tokens_total counter\n"
      "foundry_draft_accepted_tokens_total %" PRIu64 "\n",
      m->draft_rounds, m->draft_proposed, m->draft_accepted);
}

char *fdy_serve_metrics_text(const fdy_serve_metrics *m) {
  text t = {0};
  add_requests(&t, m);
  add_batch_sizes(&t, m);
  add_ttft(&t, m);
  add_decode_rate(&t, m);
  add_draft(&t, m);
  if (t.failed) {
    free(t.buf);
    return NULL;
  }
  return t.buf;
}
