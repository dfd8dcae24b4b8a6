/* The engine of `foundry serve` (src/cli/serve_engine.h) on the micro
 * fixture and the CPU backend, without HTTP: jobs beyond the slots wait in
 * the queue and all finish with their ids and metrics; a cancelled job is
 * dropped and counted; a job's text is its ids through the tokenizer's
 * decoder (Llama 2's drops the first piece's space); a backend failure during a
 * step (the fault wrapper) fails every running and queued job with the
 * backend's error, leaves the server failed saying why (what /health reports)
 * and refuses new jobs with 503; a stop past its grace period cancels the jobs
 * left. With a draft: a job alone is speculated (rounds counted, every proposal
 * of the model drafting for itself accepted) and gives the greedy ids of
 * fdy_llama_generate, also when it ran beside another job first and when
 * a stop id ends it inside a round; a backend failure inside a round fails
 * the job and the server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serve_engine.h"
#include "foundry/fault.h"
#include "llama_infer/llama_fixtures.h"

static const int32_t prompt_a[] = {968, 278, 546, 257, 75};
static const int32_t prompt_b[] = {5};
static const int32_t prompt_c[] = {17, 3, 250, 64, 1, 900, 12};

/* A server of `slots` slots over a session on backend (not started). */
static void server_init(fdy_server *srv, const fdy_llama_model *model,
                        fdy_backend *backend, uint32_t slots) {
  fdy_llama_session_options o = {.backend = backend,
                                 .context = 64,
                                 .max_sequences = slots,
                                 .ids_only = true};
  *srv = (fdy_server){.model_id = "micro",
                      .config = fdy_llama_model_config(model),
                      .session = make_session(model, &o),
                      .default_sampling = FDY_LLAMA_GREEDY,
                      .max_queue = 8,
                      .slots = slots};
  srv->vocab = srv->config->vocab_size;
  srv->context = fdy_llama_session_context(srv->session);
  fdy_error err;
  assert_int_equal(fdy_server_init(srv, &err), FDY_OK);
}

/* The server of server_init with draft_model drafting (K 2, adaptive up
 * to 4): the model's session returns logits and has steps of 16 rows. */
static void server_init_draft(fdy_server *srv, const fdy_llama_model *model,
                              const fdy_llama_model *draft_model,
                              fdy_backend *backend, uint32_t slots) {
  fdy_llama_session_options o = {.backend = backend,
                                 .context = 64,
                                 .max_sequences = slots,
                                 .step_rows = 16};
  *srv = (fdy_server){.model_id = "micro",
                      .config = fdy_llama_model_config(model),
                      .session = make_session(model, &o),
                      .default_sampling = FDY_LLAMA_GREEDY,
                      .max_queue = 8,
                      .slots = slots,
                      .spec = {.draft_tokens = 2, .max_draft_tokens = 4}};
  fdy_llama_session_options d = {.backend = backend, .context = 64};
  srv->draft = make_session(draft_model, &d);
  fdy_error err;
  assert_int_equal(fdy_llama_speculator_create(srv->session, srv->draft, 4,
                                               true, &srv->speculator, &err),
                   FDY_OK);
  srv->vocab = srv->config->vocab_size;
  srv->context = fdy_llama_session_context(srv->session);
  assert_int_equal(fdy_server_init(srv, &err), FDY_OK);
}

static void server_release(fdy_server *srv) {
  fdy_llama_session *session = srv->session, *draft = srv->draft;
  fdy_llama_speculator *speculator = srv->speculator;
  fdy_server_release(srv);
  fdy_llama_speculator_destroy(speculator);
  fdy_llama_session_destroy(draft);
  fdy_llama_session_destroy(session);
}

/* A queued job of prompt (copied) for max_tokens greedy ids. */
static fdy_serve_job *submit(fdy_server *srv, const int32_t *prompt,
                             uint32_t count, uint32_t max_tokens) {
  fdy_serve_job *job = fdy_serve_job_create(srv);
  assert_non_null(job);
  job->prompt = malloc(count * sizeof *prompt);
  assert_non_null(job->prompt);
  memcpy(job->prompt, prompt, count * sizeof *prompt);
  job->prompt_count = count;
  job->max_tokens = max_tokens;
  job->sampling = FDY_LLAMA_GREEDY;
  fdy_error err;
  assert_int_equal(fdy_serve_job_alloc(job, &err), FDY_OK);
  assert_int_equal(fdy_serve_submit(srv, job), 0);
  return job;
}

static void wait_done(fdy_server *srv, fdy_serve_job *job) {
  pthread_mutex_lock(&srv->lock);
  while (!job->done) {
    pthread_cond_wait(&srv->changed, &srv->lock);
  }
  pthread_mutex_unlock(&srv->lock);
}

static void drop(fdy_server *srv, fdy_serve_job *job) {
  pthread_mutex_lock(&srv->lock);
  fdy_serve_job_unref(job);
  pthread_mutex_unlock(&srv->lock);
}

static void stop_engine(fdy_server *srv, pthread_t engine) {
  pthread_mutex_lock(&srv->lock);
  srv->stopping = true;
  pthread_cond_signal(&srv->work);
  pthread_mutex_unlock(&srv->lock);
  pthread_join(engine, NULL);
}

static void test_jobs(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_server srv;
  server_init(&srv, model, cpu, 2);
  /* three jobs on two slots (one waits), then one cancelled while queued */
  fdy_serve_job *jobs[3] = {submit(&srv, prompt_a, 5, 6),
                            submit(&srv, prompt_b, 1, 9),
                            submit(&srv, prompt_c, 7, 4)};
  fdy_serve_job *cancelled = submit(&srv, prompt_b, 1, 50);
  pthread_mutex_lock(&srv.lock);
  fdy_serve_cancel(cancelled);
  pthread_mutex_unlock(&srv.lock);
  pthread_t engine;
  assert_int_equal(pthread_create(&engine, NULL, fdy_serve_engine_main, &srv),
                   0);
  const uint32_t max[] = {6, 9, 4};
  for (int i = 0; i < 3; i++) {
    wait_done(&srv, jobs[i]);
    assert_false(jobs[i]->failed);
    assert_int_equal(jobs[i]->count, max[i]);
    assert_string_equal(jobs[i]->finish, "length");
    for (uint32_t k = 0; k < jobs[i]->count; k++) {
      assert_true(jobs[i]->ids[k] >= 0 &&
                  (uint32_t)jobs[i]->ids[k] < srv.vocab);
    }
  }
  wait_done(&srv, cancelled);
  assert_int_equal(cancelled->count, 0);
  stop_engine(&srv, engine);
  assert_int_equal(srv.metrics.requests[FDY_SERVE_OUTCOME_LENGTH], 3);
  assert_int_equal(srv.metrics.requests[FDY_SERVE_OUTCOME_CANCELLED], 1);
  assert_int_equal(srv.metrics.prompt_tokens, 13);
  assert_int_equal(srv.metrics.generated_tokens, 19);
  assert_int_equal(srv.metrics.ttft_count, 3);
  assert_true(srv.metrics.steps >= 9);
  assert_int_equal(srv.active, 0);
  assert_int_equal(srv.queued, 0);
  for (int i = 0; i < 3; i++) {
    drop(&srv, jobs[i]);
  }
  drop(&srv, cancelled);
  assert_int_equal(srv.live, 0);
  assert_false(srv.failed);
  server_release(&srv);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* The ids' text as the tokenizer's decoder makes it, special ids left
 * out (malloc'd). */
static char *decoded(const fdy_tokenizer *tok, const int32_t *ids,
                     uint32_t count) {
  int32_t *kept = malloc((count + 1) * sizeof *kept);
  assert_non_null(kept);
  uint32_t n = 0;
  for (uint32_t k = 0; k < count; k++) {
    if (!fdy_tokenizer_is_special(tok, ids[k])) {
      kept[n++] = ids[k];
    }
  }
  char *text = NULL;
  size_t len = 0;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_decode(tok, kept, n, &text, &len, &err),
                   FDY_OK);
  free(kept);
  return text;
}

/* A job's text is what the tokenizer's decoder makes of its ids, not the
 * ids' pieces laid end to end: with a SentencePiece tokenizer (Llama 2's
 * Metaspace and Strip decoder) an answer does not start with the space of
 * its first piece. 32 one-id prompts; at least one answer starts with a
 * piece of a leading space, so the test tells the two apart. */
static void test_decoder_text(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  const char *data = getenv("FOUNDRY_TEST_DATA");
  char path[512];
  snprintf(path, sizeof path, "%s/tokenizer/hf/llama2/tokenizer.json",
           data ? data : "tests/data");
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &tok, &err), FDY_OK);
  fdy_backend *cpu = cpu_backend(2);
  fdy_server srv;
  server_init(&srv, model, cpu, 4);
  srv.tok = tok;
  enum { JOBS = 32 };
  srv.max_queue = JOBS;
  fdy_serve_job *jobs[JOBS];
  for (int i = 0; i < JOBS; i++) {
    const int32_t prompt = 300 + 7 * i;
    jobs[i] = submit(&srv, &prompt, 1, 3);
  }
  pthread_t engine;
  assert_int_equal(pthread_create(&engine, NULL, fdy_serve_engine_main, &srv),
                   0);
  int spaced = 0; /* answers whose pieces start with a space */
  for (int i = 0; i < JOBS; i++) {
    wait_done(&srv, jobs[i]);
    assert_false(jobs[i]->failed);
    char *expected = decoded(tok, jobs[i]->ids, jobs[i]->count);
    assert_int_equal(jobs[i]->text.len, strlen(expected));
    assert_memory_equal(jobs[i]->text.buf, expected, strlen(expected));
    const char *piece = NULL;
    size_t n = 0;
    for (uint32_t k = 0; k < jobs[i]->count && n == 0; k++) {
      if (!fdy_tokenizer_is_special(tok, jobs[i]->ids[k])) {
        assert_int_equal(
            fdy_tokenizer_token_bytes(tok, jobs[i]->ids[k], &piece, &n, &err),
            FDY_OK);
      }
    }
    spaced += n > 0 && piece[0] == ' ';
    free(expected);
  }
  assert_true(spaced > 0);
  stop_engine(&srv, engine);
  for (int i = 0; i < JOBS; i++) {
    drop(&srv, jobs[i]);
  }
  server_release(&srv);
  fdy_tokenizer_destroy(tok);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

static void test_backend_failure(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_error err;
  /* the calls of the session's creation, then fail the 3rd call after them:
   * inside the first step */
  fdy_backend *counting = NULL;
  assert_int_equal(fdy_fault_backend_create(cpu, NULL, &counting, &err),
                   FDY_OK);
  fdy_server srv;
  server_init(&srv, model, counting, 2);
  uint64_t create_calls = fdy_fault_get_stats(counting).calls;
  server_release(&srv);
  fdy_backend_destroy(counting);
  fdy_fault_options fo = {.fail_at_call = create_calls + 3};
  fdy_backend *faulty = NULL;
  assert_int_equal(fdy_fault_backend_create(cpu, &fo, &faulty, &err), FDY_OK);
  server_init(&srv, model, faulty, 2);
  /* two running, one queued */
  fdy_serve_job *jobs[3] = {submit(&srv, prompt_a, 5, 6),
                            submit(&srv, prompt_b, 1, 9),
                            submit(&srv, prompt_c, 7, 4)};
  pthread_t engine;
  assert_int_equal(pthread_create(&engine, NULL, fdy_serve_engine_main, &srv),
                   0);
  /* the engine ends by itself after the failure */
  pthread_join(engine, NULL);
  assert_true(fdy_fault_get_stats(faulty).fired);
  for (int i = 0; i < 3; i++) {
    assert_true(jobs[i]->done);
    assert_true(jobs[i]->failed);
    assert_non_null(strstr(jobs[i]->error, "the engine failed"));
    drop(&srv, jobs[i]);
  }
  assert_true(srv.failed);
  assert_non_null(strstr(srv.failure, "the engine failed: "));
  assert_true(strlen(srv.failure) > strlen("the engine failed: "));
  assert_int_equal(srv.metrics.requests[FDY_SERVE_OUTCOME_FAILED], 3);
  assert_int_equal(srv.active, 0);
  assert_int_equal(srv.queued, 0);
  /* new jobs are refused */
  fdy_serve_job *late = fdy_serve_job_create(&srv);
  assert_non_null(late);
  assert_int_equal(fdy_serve_submit(&srv, late), 503);
  drop(&srv, late);
  assert_int_equal(srv.metrics.requests[FDY_SERVE_OUTCOME_UNAVAILABLE], 1);
  assert_int_equal(srv.live, 0);
  server_release(&srv);
  fdy_backend_destroy(faulty);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* A stop whose grace period has passed cancels what is left: the jobs fail
 * saying so, are counted cancelled, and new jobs get 503. */
static void test_stop(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_server srv;
  server_init(&srv, model, cpu, 1);
  fdy_serve_job *jobs[2] = {submit(&srv, prompt_b, 1, 60),
                            submit(&srv, prompt_a, 5, 8)};
  /* no engine yet, so both are still waiting when the grace runs out */
  assert_int_equal(fdy_serve_stop(&srv, 0), 2);
  pthread_t engine;
  assert_int_equal(pthread_create(&engine, NULL, fdy_serve_engine_main, &srv),
                   0);
  pthread_join(engine, NULL);
  for (int i = 0; i < 2; i++) {
    assert_true(jobs[i]->done);
    assert_true(jobs[i]->failed);
    assert_true(jobs[i]->cancelled);
    assert_int_equal(jobs[i]->count, 0);
    assert_non_null(strstr(jobs[i]->error, "grace period of 0 s"));
    drop(&srv, jobs[i]);
  }
  assert_int_equal(srv.metrics.requests[FDY_SERVE_OUTCOME_CANCELLED], 2);
  assert_int_equal(srv.metrics.requests[FDY_SERVE_OUTCOME_FAILED], 0);
  fdy_serve_job *late = fdy_serve_job_create(&srv);
  assert_non_null(late);
  assert_int_equal(fdy_serve_submit(&srv, late), 503);
  drop(&srv, late);
  assert_int_equal(srv.live, 0);
  assert_false(srv.failed);
  server_release(&srv);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* fdy_llama_generate's greedy ids of prompt (count ids) on model alone. */
static fdy_llama_generation greedy(const fdy_llama_model *model,
                                   fdy_backend *cpu, const int32_t *prompt,
                                   uint32_t count, uint32_t max_tokens) {
  fdy_llama_session_options o = {
      .backend = cpu, .context = 64, .ids_only = true};
  fdy_llama_session *s = make_session(model, &o);
  fdy_llama_generate_options go = {.max_tokens = max_tokens};
  fdy_llama_generation g;
  fdy_error err;
  assert_int_equal(fdy_llama_generate(s, prompt, count, &go, &g, &err), FDY_OK);
  fdy_llama_session_destroy(s);
  return g;
}

static void assert_ids(const fdy_serve_job *job,
                       const fdy_llama_generation *g) {
  assert_false(job->failed);
  assert_int_equal(job->count, g->count);
  assert_memory_equal(job->ids, g->ids, sizeof *g->ids * g->count);
}

static void test_draft(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_server srv;
  server_init_draft(&srv, model, model, cpu, 2);
  pthread_t engine;
  assert_int_equal(pthread_create(&engine, NULL, fdy_serve_engine_main, &srv),
                   0);
  /* alone: speculated, every proposal of the model itself accepted */
  fdy_llama_generation a = greedy(model, cpu, prompt_a, 5, 20);
  fdy_serve_job *job = submit(&srv, prompt_a, 5, 20);
  wait_done(&srv, job);
  assert_ids(job, &a);
  drop(&srv, job);
  pthread_mutex_lock(&srv.lock);
  fdy_serve_metrics m = srv.metrics;
  pthread_mutex_unlock(&srv.lock);
  assert_true(m.draft_rounds > 0);
  assert_true(m.draft_rounds < 19); /* several ids per round */
  assert_int_equal(m.draft_accepted, m.draft_proposed);
  /* two at once (batched), then the longer one alone (speculated after
   * the draft catches up on its prompt and ids) */
  fdy_llama_generation c = greedy(model, cpu, prompt_c, 7, 30);
  fdy_serve_job *pair[2] = {submit(&srv, prompt_b, 1, 3),
                            submit(&srv, prompt_c, 7, 30)};
  wait_done(&srv, pair[0]);
  wait_done(&srv, pair[1]);
  fdy_llama_generation b = greedy(model, cpu, prompt_b, 1, 3);
  assert_ids(pair[0], &b);
  assert_ids(pair[1], &c);
  drop(&srv, pair[0]);
  drop(&srv, pair[1]);
  /* a stop id inside a round ends the job there, and the next job starts
   * the draft again */
  fdy_serve_job *stopped = fdy_serve_job_create(&srv);
  assert_non_null(stopped);
  stopped->prompt = malloc(sizeof prompt_a);
  assert_non_null(stopped->prompt);
  memcpy(stopped->prompt, prompt_a, sizeof prompt_a);
  stopped->prompt_count = 5;
  stopped->max_tokens = 20;
  stopped->sampling = FDY_LLAMA_GREEDY;
  stopped->stop[0] = a.ids[9];
  stopped->stop_count = 1;
  fdy_error err;
  assert_int_equal(fdy_serve_job_alloc(stopped, &err), FDY_OK);
  assert_int_equal(fdy_serve_submit(&srv, stopped), 0);
  wait_done(&srv, stopped);
  uint32_t first = 0;
  while (a.ids[first] != a.ids[9]) {
    first++;
  }
  assert_int_equal(stopped->count, first + 1);
  assert_memory_equal(stopped->ids, a.ids, sizeof *a.ids * (first + 1));
  assert_string_equal(stopped->finish, "stop");
  drop(&srv, stopped);
  job = submit(&srv, prompt_a, 5, 20);
  wait_done(&srv, job);
  assert_ids(job, &a);
  drop(&srv, job);
  stop_engine(&srv, engine);
  assert_false(srv.failed);
  assert_int_equal(srv.live, 0);
  fdy_llama_generation_free(&a);
  fdy_llama_generation_free(&b);
  fdy_llama_generation_free(&c);
  server_release(&srv);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* A backend failure inside a speculative round (after the first id, which
 * a step gives, before the last, which rounds give too) fails the job and
 * the server. */
static void test_draft_failure(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_error err;
  /* the calls of creation, and of one job of 20 ids */
  fdy_backend *counting = NULL;
  assert_int_equal(fdy_fault_backend_create(cpu, NULL, &counting, &err),
                   FDY_OK);
  fdy_server srv;
  server_init_draft(&srv, model, model, counting, 1);
  uint64_t create_calls = fdy_fault_get_stats(counting).calls;
  pthread_t engine;
  assert_int_equal(pthread_create(&engine, NULL, fdy_serve_engine_main, &srv),
                   0);
  fdy_serve_job *job = submit(&srv, prompt_a, 5, 20);
  wait_done(&srv, job);
  drop(&srv, job);
  stop_engine(&srv, engine);
  uint64_t job_calls = fdy_fault_get_stats(counting).calls - create_calls;
  server_release(&srv);
  fdy_backend_destroy(counting);
  fdy_fault_options fo = {.fail_at_call = create_calls + job_calls / 2};
  fdy_backend *faulty = NULL;
  assert_int_equal(fdy_fault_backend_create(cpu, &fo, &faulty, &err), FDY_OK);
  server_init_draft(&srv, model, model, faulty, 1);
  job = submit(&srv, prompt_a, 5, 20);
  assert_int_equal(pthread_create(&engine, NULL, fdy_serve_engine_main, &srv),
                   0);
  pthread_join(engine, NULL);
  assert_true(fdy_fault_get_stats(faulty).fired);
  assert_true(job->done);
  assert_true(job->failed);
  assert_true(job->count >= 1 && job->count < 19);
  assert_non_null(strstr(job->error, "the engine failed"));
  assert_true(srv.failed);
  assert_true(srv.metrics.draft_rounds >= 1);
  drop(&srv, job);
  assert_int_equal(srv.live, 0);
  server_release(&srv);
  fdy_backend_destroy(faulty);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_jobs),
      cmocka_unit_test(test_decoder_text),
      cmocka_unit_test(test_backend_failure),
      cmocka_unit_test(test_stop),
      cmocka_unit_test(test_draft),
      cmocka_unit_test(test_draft_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
