/* The engine of `foundry serve`: the server's shared state, its jobs (one
 * per accepted request) and the engine thread that owns the session.
 *
 * HTTP threads submit jobs to a bounded queue (fdy_serve_submit), then
 * wait on srv->changed for their ids. Each step of the engine carries a
 * decode row for every running job and fills the other rows with prompt
 * chunks of new jobs taken from the queue into free slots (as
 * fdy_llama_generate_batch's steps do), so a new prompt stalls the running
 * ones by at most one step. The engine also turns the ids into text
 * (serve_text.h). A job ends at a stop id, a stop string, max_tokens, or
 * when cancelled (its client went away); its slot is released for the next
 * step. With a draft (--draft-model), while exactly one job runs and its
 * prompt is in, the engine speculates for it instead: the draft's session
 * (one slot, resident) catches up on the job's prompt and ids, then each
 * round (fdy_llama_speculator_round) gives its accepted ids and the
 * model's id after them from one pass of the model, the ids the job takes
 * are kept and both sessions go back to them. A second job returns the
 * engine to steps of the batch; the draft keeps what it holds of the
 * first job and catches up when that job runs alone again.
 * A backend failure fails every job and leaves the server failed.
 * Everything in a server and its jobs is read and written under srv->lock
 * unless its comment says otherwise. */
#ifndef FOUNDRY_CLI_SERVE_ENGINE_H
#define FOUNDRY_CLI_SERVE_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "foundry/chat.h"
#include "foundry/llama_session.h"
#include "foundry/speculative.h"
#include "foundry/tokenizer.h"
#include "serve_metrics.h"
#include "serve_request.h"
#include "serve_text.h"

typedef struct fdy_serve_job fdy_serve_job;
typedef struct fdy_server fdy_server;

/* One accepted request. refs: the HTTP thread's and, once queued, the
 * engine's; the last fdy_serve_job_unref frees it. */
struct fdy_serve_job {
  fdy_server *srv;
  int refs;
  uint64_t number; /* the server's count of jobs, from 1 */
  bool chat, stream;
  int32_t *prompt; /* [prompt_count] (owned) */
  uint32_t prompt_count;
  uint32_t max_tokens;
  fdy_sample_params sampling;
  int32_t stop[FDY_CHAT_MAX_STOP]; /* besides config.json's EOS ids */
  uint32_t stop_count;
  char *stop_text[FDY_SERVE_MAX_STOP]; /* stop strings (owned) */
  uint32_t stop_text_count;
  time_t created;
  int64_t arrived_ns; /* fdy_now_ns when created */
  /* written by the engine */
  int32_t *ids; /* [max_tokens] generated; ids below count never change,
                   so the HTTP thread may read them without the lock */
  uint32_t count;
  uint32_t fed;              /* prompt ids fed so far */
  uint32_t draft_k;          /* ids to draft in its next round (adaptive K);
                                0 before its first */
  fdy_token_stream *decoder; /* the ids to text as the tokenizer's decoder
                                makes it (NULL without a tokenizer) */
  fdy_serve_text text;       /* the answer's text (special ids left out); may be
                                reallocated: read it under the lock */
  size_t *text_at;           /* [max_tokens] text.released after each id */
  bool done, cancelled, failed;
  bool aborted;       /* cancelled by the server's stop (fdy_serve_stop): failed
                         with error when dropped */
  const char *finish; /* "stop", "length", "cancelled" (static) */
  char error[256];    /* when failed */
  fdy_serve_job *next; /* the queue */
};

struct fdy_server {
  /* set before the engine starts, then read-only */
  const char *model_id;
  const char *api_key; /* the key of --api-key, or NULL */
  const fdy_llama_config *config;
  fdy_llama_session *session; /* the engine thread's */
  fdy_tokenizer *tok;         /* may be NULL: token ids only */
  pthread_mutex_t tok_lock;   /* encoding (the HTTP threads) */
  fdy_sample_params default_sampling;
  uint32_t vocab, context, max_queue, slots;
  /* speculative decoding for a job running alone: NULL without a draft.
   * The target session then returns logits (not ids_only), its steps hold
   * at least spec's most K + 1 rows, and the draft's session (one slot, of
   * the same vocabulary, not ids_only) is the engine thread's */
  fdy_llama_session *draft;
  fdy_llama_speculator *speculator; /* of session and draft */
  fdy_llama_speculative_options spec;
  /* under lock */
  pthread_mutex_t lock;
  pthread_cond_t work;        /* the engine: a job queued or cancelled */
  pthread_cond_t changed;     /* HTTP threads: ids, ends, jobs freed */
  fdy_serve_job *head, *tail; /* the queue */
  uint32_t queued;
  fdy_serve_job **running; /* [slots] */
  uint32_t active;
  uint64_t live;     /* jobs not yet freed */
  uint64_t requests; /* HTTP requests begun, their answers not yet sent */
  uint64_t numbers;
  bool stopping;
  bool failed;
  char failure[512];
  fdy_serve_metrics metrics;
  /* the engine thread's */
  fdy_llama_step_part *parts; /* [slots] */
  int32_t *next;              /* [slots] */
  uint64_t draft_job;         /* the number of the job whose prompt and ids the
                                 draft's slot holds the first of; 0: none */
};

/* The job's ids and text, sized for job->max_tokens; FDY_ERR_OUT_OF_MEMORY
 * on failure. */
fdy_status fdy_serve_job_alloc(fdy_serve_job *job, fdy_error *err);

/* Allocates the server's arrays and synchronisation for srv->slots slots
 * (the fields before `lock` set by the caller). FDY_ERR_OUT_OF_MEMORY or
 * FDY_ERR_BACKEND (a pthread call) on failure, with nothing left to free. */
fdy_status fdy_server_init(fdy_server *srv, fdy_error *err);
/* Frees what fdy_server_init made; the engine must have stopped. */
void fdy_server_release(fdy_server *srv);

/* The engine thread's function (arg: the server). Runs until srv->stopping
 * is set and no job is left, or a step fails. */
void *fdy_serve_engine_main(void *arg);

/* A new job of srv (refs 1, counted live), or NULL when out of memory.
 * Takes the lock. */
fdy_serve_job *fdy_serve_job_create(fdy_server *srv);
/* Under the lock: drops one reference; the last frees the job. */
void fdy_serve_job_unref(fdy_serve_job *job);

/* Queues job for the engine (the queue takes a reference). Returns 0, or
 * the HTTP status of a refusal: 503 when the server stops or failed, 429
 * when max_queue jobs wait beyond the free slots. Takes the lock. */
unsigned fdy_serve_submit(fdy_server *srv, fdy_serve_job *job);

/* Counts a request that ended with outcome outside the engine (a refusal
 * of the HTTP layer). Takes the lock. */
void fdy_serve_count(fdy_server *srv, fdy_serve_outcome outcome);

/* The metrics as Prometheus text (malloc'd), or NULL when out of memory.
 * Takes the lock. */
char *fdy_serve_metrics_now(fdy_server *srv);

/* Under the lock: waits for srv->changed at most ms milliseconds. */
void fdy_serve_wait(fdy_server *srv, int64_t ms);

/* Stops the server (new jobs get 503) and lets the accepted jobs finish for
 * at most grace_seconds; then fails the running and queued ones left
 * (failed and cancelled, their error saying so), which the engine drops at
 * its next step. Returns how many were cancelled. Takes the lock; the
 * caller then joins the engine thread. */
uint32_t fdy_serve_stop(fdy_server *srv, uint32_t grace_seconds);

/* Under the lock: asks the engine to drop job at its next step (its client
 * went away); nothing when it is done already. */
void fdy_serve_cancel(fdy_serve_job *job);

#endif
