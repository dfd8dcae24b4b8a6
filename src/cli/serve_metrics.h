/* The metrics of `foundry serve` (GET /metrics) and their Prometheus text
 * exposition format (version 0.0.4): requests by outcome, prompt and
 * generated tokens, queue depth, running sequences, a histogram of the
 * sequences in each step, a histogram of the time to first token, the
 * decode rate and the speculative rounds' proposed and accepted ids. The server
 * updates them under its lock; rendering reads a copy. */
#ifndef FOUNDRY_CLI_SERVE_METRICS_H
#define FOUNDRY_CLI_SERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* How a request ended. */
typedef enum fdy_serve_outcome {
  FDY_SERVE_OUTCOME_STOP,        /* a stop id or stop string */
  FDY_SERVE_OUTCOME_LENGTH,      /* max_tokens */
  FDY_SERVE_OUTCOME_CANCELLED,   /* its client went away, or the stop's
                                    grace period ran out */
  FDY_SERVE_OUTCOME_FAILED,      /* the backend failed (500) */
  FDY_SERVE_OUTCOME_INVALID,     /* refused: 400, 401, 404, 405, 413, 415 */
  FDY_SERVE_OUTCOME_QUEUE_FULL,  /* 429 */
  FDY_SERVE_OUTCOME_UNAVAILABLE, /* 503: stopping or failed */
  FDY_SERVE_OUTCOMES
} fdy_serve_outcome;

#define FDY_SERVE_BATCH_BUCKETS 9 /* upper bounds 1, 2, 4 ... 256 */
#define FDY_SERVE_TTFT_BUCKETS  12
#define FDY_SERVE_RATE_STEPS    32 /* steps the decode rate is taken over */

typedef struct fdy_serve_metrics {
  uint64_t requests[FDY_SERVE_OUTCOMES];
  uint64_t prompt_tokens;    /* of the requests admitted into a slot */
  uint64_t generated_tokens; /* ids generated */
  uint32_t queued, running;  /* now (gauges) */
  /* sequences per step: counts per bucket (not cumulative) and beyond */
  uint64_t batch[FDY_SERVE_BATCH_BUCKETS + 1];
  uint64_t batch_sum, steps;
  /* seconds from a request's arrival to its first id */
  uint64_t ttft[FDY_SERVE_TTFT_BUCKETS + 1];
  double ttft_sum;
  uint64_t ttft_count;
  /* decode rows and nanoseconds of the last FDY_SERVE_RATE_STEPS steps
   * that decoded (a ring) */
  uint32_t rate_rows[FDY_SERVE_RATE_STEPS];
  int64_t rate_ns[FDY_SERVE_RATE_STEPS];
  uint32_t rate_next;
  /* speculative decoding (--draft-model): rounds (a pass of the model
   * each), ids the draft proposed and, of them, ids accepted */
  uint64_t draft_rounds, draft_proposed, draft_accepted;
} fdy_serve_metrics;

/* Counts a step of `sequences` slots, `decode_rows` of them decoding, that
 * took ns nanoseconds. */
void fdy_serve_metrics_step(fdy_serve_metrics *m, uint32_t sequences,
                            uint32_t decode_rows, int64_t ns);

/* Counts a first id seconds after its request arrived. */
void fdy_serve_metrics_ttft(fdy_serve_metrics *m, double seconds);

/* The metrics as Prometheus text (malloc'd, NUL-terminated), or NULL when
 * out of memory. */
char *fdy_serve_metrics_text(const fdy_serve_metrics *m);

#endif
