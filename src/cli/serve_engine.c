/* The engine of `foundry serve` (serve_engine.h): jobs, the bounded queue
 * and the engine thread's steps over one session, or speculative rounds
 * for a job running alone. */
#include "serve_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies text into dst of size bytes, cut when longer. */
static void copy_text(char *dst, size_t size, const char *text) {
  size_t n = strlen(text);
  n = n < size - 1 ? n : size - 1;
  memcpy(dst, text, n);
  dst[n] = '\0';
}

fdy_status fdy_server_init(fdy_server *srv, fdy_error *err) {
  srv->running = calloc(srv->slots, sizeof *srv->running);
  srv->parts = calloc(srv->slots, sizeof *srv->parts);
  srv->next = calloc(srv->slots, sizeof *srv->next);
  if (!srv->running || !srv->parts || !srv->next) {
    fdy_server_release(srv);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory for %u slots", srv->slots);
  }
  pthread_mutex_init(&srv->lock, NULL);
  pthread_mutex_init(&srv->tok_lock, NULL);
  pthread_cond_init(&srv->work, NULL);
  pthread_cond_init(&srv->changed, NULL);
  return FDY_OK;
}

void fdy_server_release(fdy_server *srv) {
  if (srv->running && srv->parts && srv->next) {
    pthread_mutex_destroy(&srv->lock);
    pthread_mutex_destroy(&srv->tok_lock);
    pthread_cond_destroy(&srv->work);
    pthread_cond_destroy(&srv->changed);
  }
  free(srv->running);
  free(srv->parts);
  free(srv->next);
  srv->running = NULL;
  srv->parts = NULL;
  srv->next = NULL;
}

fdy_serve_job *fdy_serve_job_create(fdy_server *srv) {
  fdy_serve_job *job = calloc(1, sizeof *job);
  if (!job) {
    return NULL;
  }
  job->srv = srv;
  job->refs = 1;
  job->created = time(NULL);
  job->arrived_ns = fdy_now_ns();
  pthread_mutex_lock(&srv->lock);
  job->number = ++srv->numbers;
  srv->live++;
  pthread_mutex_unlock(&srv->lock);
  return job;
}

void fdy_serve_job_unref(fdy_serve_job *job) {
  fdy_server *srv = job->srv;
  if (--job->refs > 0) {
    return;
  }
  free(job->prompt);
  free(job->ids);
  free(job->text_at);
  fdy_serve_text_destroy(&job->text);
  fdy_token_stream_destroy(job->decoder);
  for (uint32_t i = 0; i < job->stop_text_count; i++) {
    free(job->stop_text[i]);
  }
  free(job);
  srv->live--;
  pthread_cond_broadcast(&srv->changed);
}

fdy_status fdy_serve_job_alloc(fdy_serve_job *job, fdy_error *err) {
  job->ids = malloc(sizeof *job->ids * job->max_tokens);
  job->text_at = malloc(sizeof *job->text_at * job->max_tokens);
  if (!job->ids || !job->text_at) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory for max_tokens %u", job->max_tokens);
  }
  fdy_serve_text_init(&job->text, job->stop_text, job->stop_text_count);
  return job->srv->tok
             ? fdy_token_stream_create(job->srv->tok, &job->decoder, err)
             : FDY_OK;
}

unsigned fdy_serve_submit(fdy_server *srv, fdy_serve_job *job) {
  unsigned refused = 0;
  pthread_mutex_lock(&srv->lock);
  if (srv->stopping || srv->failed) {
    refused = 503;
  } else if (srv->queued >= srv->max_queue + (srv->slots - srv->active)) {
    /* beyond the free slots, max_queue jobs may wait */
    refused = 429;
  } else {
    job->refs++;
    if (srv->tail) {
      srv->tail->next = job;
    } else {
      srv->head = job;
    }
    srv->tail = job;
    srv->queued++;
    pthread_cond_signal(&srv->work);
  }
  if (refused) {
    srv->metrics.requests[refused == 429 ? FDY_SERVE_OUTCOME_QUEUE_FULL
                                         : FDY_SERVE_OUTCOME_UNAVAILABLE]++;
  }
  pthread_mutex_unlock(&srv->lock);
  return refused;
}

void fdy_serve_count(fdy_server *srv, fdy_serve_outcome outcome) {
  pthread_mutex_lock(&srv->lock);
  srv->metrics.requests[outcome]++;
  pthread_mutex_unlock(&srv->lock);
}

char *fdy_serve_metrics_now(fdy_server *srv) {
  pthread_mutex_lock(&srv->lock);
  fdy_serve_metrics m = srv->metrics;
  m.queued = srv->queued;
  m.running = srv->active;
  pthread_mutex_unlock(&srv->lock);
  return fdy_serve_metrics_text(&m);
}

void fdy_serve_wait(fdy_server *srv, int64_t ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  int64_t ns = deadline.tv_nsec + ms % 1000 * 1000000;
  deadline.tv_sec += ms / 1000 + ns / 1000000000;
  deadline.tv_nsec = ns % 1000000000;
  pthread_cond_timedwait(&srv->changed, &srv->lock, &deadline);
}

/* Under the lock: cancels job for the server's stop; unless it ends by
 * itself first, the engine fails it with this error when it drops it. */
static void abort_job(fdy_serve_job *job, uint32_t grace_seconds) {
  job->aborted = true;
  job->cancelled = true;
  snprintf(job->error, sizeof job->error,
           "the server stopped before the request finished (a grace period "
           "of %u s)",
           grace_seconds);
}

uint32_t fdy_serve_stop(fdy_server *srv, uint32_t grace_seconds) {
  int64_t deadline = fdy_now_ns() + (int64_t)grace_seconds * 1000000000;
  uint32_t cancelled = 0;
  pthread_mutex_lock(&srv->lock);
  srv->stopping = true;
  pthread_cond_signal(&srv->work);
  while ((srv->active > 0 || srv->head) && fdy_now_ns() < deadline) {
    fdy_serve_wait(srv, 100);
  }
  for (uint32_t slot = 0; slot < srv->slots; slot++) {
    if (srv->running[slot] && !srv->running[slot]->cancelled) {
      abort_job(srv->running[slot], grace_seconds);
      cancelled++;
    }
  }
  for (fdy_serve_job *job = srv->head; job; job = job->next) {
    if (!job->cancelled) {
      abort_job(job, grace_seconds);
      cancelled++;
    }
  }
  pthread_cond_signal(&srv->work);
  pthread_mutex_unlock(&srv->lock);
  return cancelled;
}

/* Under the lock: counts how job ended. */
static void count_end(fdy_server *srv, const fdy_serve_job *job) {
  fdy_serve_outcome outcome = FDY_SERVE_OUTCOME_FAILED;
  if (job->finish && strcmp(job->finish, "stop") == 0) {
    outcome = FDY_SERVE_OUTCOME_STOP;
  } else if (job->finish && strcmp(job->finish, "length") == 0) {
    outcome = FDY_SERVE_OUTCOME_LENGTH;
  } else if (job->cancelled) {
    outcome = FDY_SERVE_OUTCOME_CANCELLED;
  }
  srv->metrics.requests[outcome]++;
}

void fdy_serve_cancel(fdy_serve_job *job) {
  if (!job->done) {
    job->cancelled = true;
    pthread_cond_signal(&job->srv->work);
  }
}

static bool is_stop(const fdy_server *srv, const fdy_serve_job *job,
                    int32_t id) {
  for (uint32_t i = 0; i < srv->config->eos_count; i++) {
    if (srv->config->eos_ids[i] == id) {
      return true;
    }
  }
  for (uint32_t i = 0; i < job->stop_count; i++) {
    if (job->stop[i] == id) {
      return true;
    }
  }
  return false;
}

/* Under the lock: ends the job in slot (released) and drops the engine's
 * reference. */
static void finish_slot(fdy_server *srv, uint32_t slot) {
  fdy_serve_job *job = srv->running[slot];
  fdy_error err;
  if (fdy_llama_session_slot_active(srv->session, slot)) {
    (void)fdy_llama_session_release(srv->session, slot, &err);
  }
  srv->running[slot] = NULL;
  srv->active--;
  job->done = true;
  count_end(srv, job);
  fdy_serve_job_unref(job);
}

/* The job failed to hold its text (out of memory). */
static void fail_text(fdy_serve_job *job, const fdy_error *err) {
  job->failed = true;
  copy_text(job->error, sizeof job->error, err->message);
  job->finish = "error";
}

/* Under the lock: id generated for the job in slot, its text added. */
static void take(fdy_server *srv, uint32_t slot, int32_t id) {
  fdy_serve_job *job = srv->running[slot];
  job->ids[job->count++] = id;
  srv->metrics.generated_tokens++;
  if (job->count == 1) {
    fdy_serve_metrics_ttft(&srv->metrics,
                           (double)(fdy_now_ns() - job->arrived_ns) * 1e-9);
  }
  const char *bytes;
  size_t n;
  fdy_error err;
  /* an id the tokenizer lacks (a model's padded vocabulary) has no text */
  if (job->decoder && !fdy_tokenizer_is_special(srv->tok, id) &&
      fdy_token_stream_push(job->decoder, id, &bytes, &n, &err) == FDY_OK &&
      fdy_serve_text_push(&job->text, bytes, n, &err) != FDY_OK) {
    fail_text(job, &err);
  } else if (job->text.stopped || is_stop(srv, job, id)) {
    job->finish = "stop";
  } else if (job->count == job->max_tokens) {
    job->finish = "length";
  }
  if (job->finish && !job->text.stopped) {
    if (job->decoder) { /* an incomplete character at the end, as it is */
      fdy_token_stream_finish(job->decoder, &bytes, &n);
      if (fdy_serve_text_push(&job->text, bytes, n, &err) != FDY_OK) {
        fail_text(job, &err);
      }
    }
    fdy_serve_text_finish(&job->text);
  }
  job->text_at[job->count - 1] = job->text.released;
  if (job->finish) {
    finish_slot(srv, slot);
  }
}

/* Under the lock: ends a job that never ran (cancelled, refused or
 * failed while queued). */
static void drop_queued(fdy_serve_job *job, const char *error) {
  if (error) {
    job->failed = true;
    copy_text(job->error, sizeof job->error, error);
  }
  job->done = true;
  count_end(job->srv, job);
  fdy_serve_job_unref(job);
}

/* Under the lock: fails every running and queued job (a backend failure
 * leaves the session failed). */
static void fail_all(fdy_server *srv, const char *message) {
  srv->failed = true;
  copy_text(srv->failure, sizeof srv->failure, message);
  for (uint32_t slot = 0; slot < srv->slots; slot++) {
    fdy_serve_job *job = srv->running[slot];
    if (job) {
      job->failed = true;
      copy_text(job->error, sizeof job->error, message);
      finish_slot(srv, slot);
    }
  }
  while (srv->head) {
    fdy_serve_job *job = srv->head;
    srv->head = job->next;
    drop_queued(job, message);
  }
  srv->tail = NULL;
  srv->queued = 0;
}

/* Under the lock: drops cancelled jobs and moves queued ones into free
 * slots. */
static void admit(fdy_server *srv) {
  fdy_error err;
  for (uint32_t slot = 0; slot < srv->slots; slot++) {
    fdy_serve_job *job = srv->running[slot];
    if (job && job->cancelled) {
      job->failed = job->aborted;
      job->finish = "cancelled";
      finish_slot(srv, slot);
    }
  }
  for (uint32_t slot = 0; slot < srv->slots && srv->head;) {
    if (srv->running[slot]) {
      slot++;
      continue;
    }
    fdy_serve_job *job = srv->head;
    srv->head = job->next;
    if (!srv->head) {
      srv->tail = NULL;
    }
    srv->queued--;
    if (job->cancelled) {
      job->failed = job->aborted;
      drop_queued(job, NULL);
    } else if (fdy_llama_session_set_sampling(srv->session, slot,
                                              &job->sampling, &err) != FDY_OK) {
      drop_queued(job, err.message);
    } else {
      job->fed = 0;
      srv->metrics.prompt_tokens += job->prompt_count;
      srv->running[slot] = job;
      srv->active++;
    }
  }
}

/* Under the lock: the parts of the next step, decode rows first, then
 * prompt chunks in the rows left; returns how many and sets
 * *decode_rows. */
static uint32_t plan_step(fdy_server *srv, uint32_t *decode_rows) {
  uint32_t count = 0;
  for (uint32_t slot = 0; slot < srv->slots; slot++) {
    fdy_serve_job *job = srv->running[slot];
    if (job && job->fed == job->prompt_count) {
      srv->parts[count++] = (fdy_llama_step_part){
          .slot = slot, .ids = &job->ids[job->count - 1], .count = 1};
    }
  }
  *decode_rows = count;
  uint32_t room = fdy_llama_session_step_rows(srv->session) - count;
  for (uint32_t slot = 0; room > 0 && slot < srv->slots; slot++) {
    fdy_serve_job *job = srv->running[slot];
    if (job && job->fed < job->prompt_count) {
      uint32_t left = job->prompt_count - job->fed;
      uint32_t n = left < room ? left : room;
      srv->parts[count++] = (fdy_llama_step_part){
          .slot = slot, .ids = job->prompt + job->fed, .count = n};
      room -= n;
    }
  }
  return count;
}

static uint32_t min_u32(uint32_t a, uint32_t b) {
  return a < b ? a : b;
}

/* Under the lock: whether the engine speculates for the one running job
 * (a draft, one job active, its prompt in, and room for a drafted id
 * within its max_tokens and both contexts): then its *slot and the ids to
 * draft, *k. */
static bool speculating(const fdy_server *srv, uint32_t *slot, uint32_t *k) {
  if (!srv->speculator || srv->active != 1) {
    return false;
  }
  uint32_t s = 0;
  while (!srv->running[s]) {
    s++;
  }
  const fdy_serve_job *job = srv->running[s];
  if (job->fed < job->prompt_count || job->count == 0) {
    return false;
  }
  /* fed: the prompt and every id but the last; a round of n needs n + 1
   * positions more */
  uint32_t p = job->prompt_count + job->count - 1;
  uint32_t context =
      min_u32(srv->context, fdy_llama_session_context(srv->draft));
  uint32_t room = p + 1 < context ? context - p - 1 : 0;
  uint32_t n = job->draft_k ? job->draft_k : srv->spec.draft_tokens;
  n = min_u32(min_u32(n, job->max_tokens - job->count - 1), room);
  *slot = s;
  *k = n;
  return n > 0;
}

/* The draft's slot brought to the first p ids of job's prompt and ids
 * (it holds the first of them, or another job's: then it starts again). */
static fdy_status catch_up(fdy_server *srv, const fdy_serve_job *job,
                           uint32_t p, fdy_error *err) {
  fdy_llama_session *draft = srv->draft;
  if (srv->draft_job != job->number) {
    fdy_llama_session_reset(draft);
    srv->draft_job = job->number;
  }
  uint32_t have = fdy_llama_session_slot_position(draft, 0);
  fdy_status st = FDY_OK;
  if (have < job->prompt_count) {
    st = fdy_llama_session_append(draft, 0, job->prompt + have,
                                  job->prompt_count - have, NULL, NULL, err);
    have = job->prompt_count;
  }
  if (st == FDY_OK && have < p) {
    st = fdy_llama_session_append(draft, 0,
                                  job->ids + (have - job->prompt_count),
                                  p - have, NULL, NULL, err);
  }
  return st;
}

/* Under the lock: a speculative round of k drafted ids for the job alone
 * in slot: the draft catches up, the round runs, the job takes its ids
 * (until it ends) and both sessions keep those taken. The backend work
 * runs without the lock. */
static fdy_status speculate(fdy_server *srv, uint32_t slot, uint32_t k,
                            fdy_error *err) {
  fdy_serve_job *job = srv->running[slot];
  uint32_t p = job->prompt_count + job->count - 1;
  int32_t last = job->ids[job->count - 1];
  fdy_sample_params sampling = job->sampling;
  const int32_t *ids = NULL;
  uint32_t count = 0;
  pthread_mutex_unlock(&srv->lock);
  int64_t start = fdy_now_ns();
  fdy_status st = catch_up(srv, job, p, err);
  if (st == FDY_OK) {
    st = fdy_llama_speculator_round(srv->speculator, slot, 0, last, k,
                                    &sampling, &ids, &count, err);
  }
  int64_t ns = fdy_now_ns() - start;
  pthread_mutex_lock(&srv->lock);
  if (st != FDY_OK) {
    srv->draft_job = 0;
    return st;
  }
  srv->metrics.draft_rounds++;
  srv->metrics.draft_proposed += k;
  srv->metrics.draft_accepted += count - 1;
  uint32_t taken = 0;
  bool running = true;
  while (running && taken < count) {
    take(srv, slot, ids[taken++]);
    running = srv->running[slot] != NULL;
  }
  fdy_serve_metrics_step(&srv->metrics, 1, taken, ns);
  if (!running) {
    /* the job ended (its slot released): the draft holds nothing useful */
    srv->draft_job = 0;
    return FDY_OK;
  }
  uint32_t was = job->draft_k ? job->draft_k : srv->spec.draft_tokens;
  job->draft_k = fdy_llama_speculative_next_k(&srv->spec, was, k, count - 1);
  pthread_cond_broadcast(&srv->changed);
  pthread_mutex_unlock(&srv->lock);
  st = fdy_llama_speculator_keep(srv->speculator, taken, err);
  pthread_mutex_lock(&srv->lock);
  if (st != FDY_OK) {
    srv->draft_job = 0;
  }
  return st;
}

/* Under the lock: the engine failed with err: every job fails. */
static void engine_failed(fdy_server *srv, const fdy_error *err) {
  char message[600];
  snprintf(message, sizeof message, "the engine failed: %.512s", err->message);
  fprintf(stderr, "foundry serve: error: %s\n", message);
  fail_all(srv, message);
  pthread_cond_broadcast(&srv->changed);
}

void *fdy_serve_engine_main(void *arg) {
  fdy_server *srv = arg;
  fdy_error err;
  pthread_mutex_lock(&srv->lock);
  for (;;) {
    while (srv->active == 0 && !srv->head && !srv->stopping) {
      pthread_cond_wait(&srv->work, &srv->lock);
    }
    if (srv->active == 0 && !srv->head) {
      break;
    }
    admit(srv);
    if (srv->active == 0) {
      pthread_cond_broadcast(&srv->changed);
      continue;
    }
    uint32_t alone = 0, k = 0;
    if (speculating(srv, &alone, &k)) {
      if (speculate(srv, alone, k, &err) != FDY_OK) {
        engine_failed(srv, &err);
        break;
      }
      pthread_cond_broadcast(&srv->changed);
      continue;
    }
    uint32_t decode_rows = 0;
    uint32_t count = plan_step(srv, &decode_rows);
    pthread_mutex_unlock(&srv->lock);
    int64_t start = fdy_now_ns();
    fdy_status st = fdy_llama_session_step(srv->session, srv->parts, count,
                                           srv->next, NULL, &err);
    int64_t ns = fdy_now_ns() - start;
    pthread_mutex_lock(&srv->lock);
    fdy_serve_metrics_step(&srv->metrics, count, decode_rows, ns);
    if (st != FDY_OK) {
      engine_failed(srv, &err);
      break;
    }
    for (uint32_t i = 0; i < count; i++) {
      uint32_t slot = srv->parts[i].slot;
      fdy_serve_job *job = srv->running[slot];
      if (i >= decode_rows) {
        job->fed += srv->parts[i].count;
        if (job->fed < job->prompt_count) {
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
