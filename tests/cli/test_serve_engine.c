/* The engine of `foundry serve` (src/cli/serve_engine.h) on the micro
 * fixture and the CPU backend, without HTTP: jobs beyond the slots wait in
 * the queue and all finish with their ids and metrics; a cancelled job is
 * dropped and counted; a backend failure during a step (the fault wrapper)
 * fails every running and queued job with the backend's error, leaves the
 * server failed saying why (what /health reports) and refuses new jobs with
 * 503; a stop past its grace period cancels the jobs left. */
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

static void server_release(fdy_server *srv) {
  fdy_llama_session *session = srv->session;
  fdy_server_release(srv);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_jobs),
      cmocka_unit_test(test_backend_failure),
      cmocka_unit_test(test_stop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
