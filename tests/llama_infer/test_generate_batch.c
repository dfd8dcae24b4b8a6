/* Tests of fdy_llama_generate_batch (continuous batching) on the CPU
 * backend: every prompt's ids equal fdy_llama_generate's for that prompt
 * alone on the micro and tiny fixtures, with fewer slots than prompts (the
 * slots refilled), one slot, and more slots than prompts; a stop id in one
 * sequence ends it while the others run on; the callback sees every id
 * with its prompt's index, and stopping one prompt leaves the others
 * running; bad inputs (empty prompt, too long for the context, an id
 * outside the vocabulary, bad options) refused before any work with the
 * prompt's index in err.ids[0]; a backend failure mid-batch (the fault
 * wrapper) leaves the output zeroed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/cpu.h"
#include "foundry/fault.h"
#include "foundry/llama_session.h"
#include "llama_fixtures.h"

/* ---- helpers ------------------------------------------------------------ */

static fdy_llama_session *step_session(const fdy_llama_model *model,
                                       fdy_backend *backend, uint32_t context,
                                       uint32_t sequences, uint32_t step_rows) {
  fdy_llama_session_options o = {.backend = backend,
                                 .context = context,
                                 .max_sequences = sequences,
                                 .step_rows = step_rows,
                                 .ids_only = true};
  return make_session(model, &o);
}

static fdy_llama_session *generate_session(const fdy_llama_model *model,
                                           fdy_backend *backend,
                                           uint32_t context,
                                           uint32_t sequences) {
  return step_session(model, backend, context, sequences, 0);
}

/* Five prompts of different lengths and max_tokens over the vocabulary
 * (ids below 1024, the smaller fixture's). */
#define PROMPTS 5
static const int32_t p0[] = {968, 278, 546, 257, 75, 219, 762, 27, 789};
static const int32_t p1[] = {5};
static const int32_t p2[] = {17, 3,  250, 64, 1,  900, 12,   400, 33,
                             8,  71, 600, 2,  19, 88,  1000, 7,   42};
static const int32_t p3[] = {300, 301};
static const int32_t p4[] = {9, 99, 999, 90, 909};

static void five_prompts(fdy_llama_batch_prompt prompts[PROMPTS]) {
  prompts[0] = (fdy_llama_batch_prompt){p0, 9, 7};
  prompts[1] = (fdy_llama_batch_prompt){p1, 1, 12};
  prompts[2] = (fdy_llama_batch_prompt){p2, 18, 3};
  prompts[3] = (fdy_llama_batch_prompt){p3, 2, 1};
  prompts[4] = (fdy_llama_batch_prompt){p4, 5, 9};
}

/* Each prompt generated alone by fdy_llama_generate on session. */
static void generate_alone(fdy_llama_session *session,
                           const fdy_llama_batch_prompt *prompts,
                           uint32_t count, const fdy_llama_batch_options *bo,
                           fdy_llama_generation *alone) {
  for (uint32_t i = 0; i < count; i++) {
    fdy_llama_generate_options o = {.max_tokens = prompts[i].max_tokens,
                                    .ignore_eos = bo->ignore_eos,
                                    .stop_ids = bo->stop_ids,
                                    .stop_count = bo->stop_count};
    fdy_error err;
    assert_int_equal(fdy_llama_generate(session, prompts[i].ids,
                                        prompts[i].count, &o, &alone[i], &err),
                     FDY_OK);
  }
}

static void assert_same(const fdy_llama_batch_generation *batch,
                        const fdy_llama_generation *alone, uint32_t count) {
  assert_int_equal(batch->count, count);
  for (uint32_t i = 0; i < count; i++) {
    const fdy_llama_batch_sequence *seq = &batch->sequences[i];
    assert_int_equal(seq->count, alone[i].count);
    if (seq->count > 0) {
      assert_memory_equal(seq->ids, alone[i].ids,
                          sizeof *seq->ids * seq->count);
    }
    assert_int_equal(seq->stopped_at_eos, alone[i].stopped_at_eos);
    assert_false(seq->interrupted);
  }
}

static void free_alone(fdy_llama_generation *alone, uint32_t count) {
  for (uint32_t i = 0; i < count; i++) {
    fdy_llama_generation_free(&alone[i]);
  }
}

/* ---- tests -------------------------------------------------------------- */

/* Every prompt's ids equal generate's alone, for 1, 2 (refilled), 3 and 8
 * slots, and 3 slots with steps of 5 rows (the 18-id prompt fed in chunks
 * over several steps), with and without ignore_eos; the counts add up, and
 * prompts taken while others decode are fed in chunks beside them. */
static void batch_equals_alone(const char *fixture) {
  fdy_llama_model *model = open_fixture(fixture);
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session *single = generate_session(model, cpu, 64, 1);
  fdy_llama_batch_prompt prompts[PROMPTS];
  five_prompts(prompts);
  for (int ignore = 0; ignore < 2; ignore++) {
    fdy_llama_batch_options o = {.ignore_eos = ignore};
    fdy_llama_generation alone[PROMPTS];
    generate_alone(single, prompts, PROMPTS, &o, alone);
    const uint32_t slot_counts[] = {1, 2, 3, 8, 3};
    const uint32_t step_rows[] = {0, 0, 0, 0, 5};
    for (size_t k = 0; k < sizeof slot_counts / sizeof *slot_counts; k++) {
      fdy_llama_session *s =
          step_session(model, cpu, 64, slot_counts[k], step_rows[k]);
      fdy_llama_batch_generation batch;
      fdy_error err;
      assert_int_equal(
          fdy_llama_generate_batch(s, prompts, PROMPTS, &o, &batch, &err),
          FDY_OK);
      assert_same(&batch, alone, PROMPTS);
      uint64_t generated = 0, prompt_ids = 0;
      for (uint32_t i = 0; i < PROMPTS; i++) {
        generated += batch.sequences[i].count;
        prompt_ids += prompts[i].count;
        assert_false(fdy_llama_session_slot_active(s, i));
      }
      /* each prompt's first id comes from its prefill: admitted alone
       * when nothing else runs (always with one slot), else in chunks */
      assert_int_equal(batch.prefill_tokens, prompt_ids);
      if (slot_counts[k] == 1) {
        assert_int_equal(batch.chunked_tokens, 0);
      } else {
        assert_true(batch.chunked_tokens > 0);
        assert_true(batch.chunked_tokens < prompt_ids);
      }
      assert_int_equal(batch.decode_tokens, generated - PROMPTS);
      assert_true(batch.max_rows <= slot_counts[k]);
      assert_true(batch.decode_steps >= batch.decode_tokens / slot_counts[k]);
      if (slot_counts[k] > 1) {
        assert_true(batch.max_rows > 1);
        assert_true(batch.decode_steps < batch.decode_tokens);
      }
      assert_true(batch.decode_tokens_per_second > 0);
      fdy_llama_batch_generation_free(&batch);
      assert_null(batch.sequences);
      fdy_llama_session_destroy(s);
    }
    free_alone(alone, PROMPTS);
  }
  fdy_llama_session_destroy(single);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

static void test_batch_equals_alone_micro(void **state) {
  (void)state;
  batch_equals_alone("llama3-micro");
}

static void test_batch_equals_alone_tiny(void **state) {
  (void)state;
  batch_equals_alone("llama3-tiny");
}

/* A stop id that one sequence produces ends that sequence only: the others
 * run to their max_tokens, each equal to generate alone with the same stop
 * ids. */
static void test_stop_in_one_sequence(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session *single = generate_session(model, cpu, 64, 1);
  fdy_llama_batch_prompt prompts[3] = {{p0, 9, 10}, {p2, 18, 10}, {p4, 5, 10}};
  fdy_llama_batch_options o = {.ignore_eos = true};
  fdy_llama_generation free_run[3];
  generate_alone(single, prompts, 3, &o, free_run);
  /* an id of prompt 0 at index k >= 1, new in its own sequence and absent
   * from the others' */
  int32_t stop = -1;
  uint32_t k = 1;
  for (; k < free_run[0].count && stop < 0; k++) {
    int32_t id = free_run[0].ids[k];
    bool seen = false;
    for (uint32_t j = 0; j < k; j++) {
      seen = seen || free_run[0].ids[j] == id;
    }
    for (uint32_t p = 1; p < 3; p++) {
      for (uint32_t j = 0; j < free_run[p].count; j++) {
        seen = seen || free_run[p].ids[j] == id;
      }
    }
    if (!seen) {
      stop = id;
    }
  }
  assert_true(stop >= 0);
  uint32_t stop_count = k; /* ids up to and including the stop id */

  fdy_llama_session *s = generate_session(model, cpu, 64, 3);
  int32_t stops[2] = {-7, stop};
  o = (fdy_llama_batch_options){.stop_ids = stops, .stop_count = 2};
  fdy_llama_generation alone[3];
  generate_alone(single, prompts, 3, &o, alone);
  fdy_llama_batch_generation batch;
  fdy_error err;
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 3, &o, &batch, &err),
                   FDY_OK);
  assert_same(&batch, alone, 3);
  assert_int_equal(batch.sequences[0].count, stop_count);
  assert_true(batch.sequences[0].stopped_at_eos);
  for (uint32_t p = 1; p < 3; p++) {
    assert_int_equal(batch.sequences[p].count, 10);
    assert_false(batch.sequences[p].stopped_at_eos);
    assert_memory_equal(batch.sequences[p].ids, free_run[p].ids,
                        sizeof(int32_t) * 10);
  }
  fdy_llama_batch_generation_free(&batch);
  /* ignore_eos decodes past it */
  o.ignore_eos = true;
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 3, &o, &batch, &err),
                   FDY_OK);
  assert_int_equal(batch.sequences[0].count, 10);
  assert_false(batch.sequences[0].stopped_at_eos);
  fdy_llama_batch_generation_free(&batch);

  free_alone(alone, 3);
  free_alone(free_run, 3);
  fdy_llama_session_destroy(s);
  fdy_llama_session_destroy(single);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* What the callback saw: each prompt's ids in order, and the prompt to stop
 * after its n-th id. */
typedef struct seen {
  int32_t ids[PROMPTS][16];
  uint32_t counts[PROMPTS];
  uint32_t calls;
  uint32_t stop_index, stop_after;
} seen;

static bool see(void *ctx, uint32_t index, int32_t id) {
  seen *s = ctx;
  assert_true(index < PROMPTS);
  assert_true(s->counts[index] < 16);
  s->ids[index][s->counts[index]++] = id;
  s->calls++;
  return !(index == s->stop_index && s->counts[index] == s->stop_after);
}

/* The callback gets every id with its prompt's index; returning false for
 * one prompt ends it (interrupted) and the others run on. A prompt with
 * max_tokens 0 generates nothing. */
static void test_callback(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session *s = generate_session(model, cpu, 64, 2);
  fdy_llama_batch_prompt prompts[PROMPTS];
  five_prompts(prompts);
  prompts[3].max_tokens = 0;
  seen sn = {.stop_index = 4, .stop_after = 2};
  fdy_llama_batch_options o = {.ignore_eos = true, .on_token = see, .ctx = &sn};
  fdy_llama_batch_generation batch;
  fdy_error err;
  assert_int_equal(
      fdy_llama_generate_batch(s, prompts, PROMPTS, &o, &batch, &err), FDY_OK);
  uint32_t total = 0;
  for (uint32_t i = 0; i < PROMPTS; i++) {
    const fdy_llama_batch_sequence *seq = &batch.sequences[i];
    assert_int_equal(seq->count, sn.counts[i]);
    if (seq->count > 0) {
      assert_memory_equal(seq->ids, sn.ids[i], sizeof *seq->ids * seq->count);
    }
    assert_int_equal(seq->interrupted, i == 4);
    assert_int_equal(seq->count, i == 4 ? 2 : prompts[i].max_tokens);
    total += seq->count;
  }
  assert_int_equal(sn.calls, total);
  assert_int_equal(batch.sequences[3].count, 0);
  fdy_llama_batch_generation_free(&batch);
  fdy_llama_session_destroy(s);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

static bool count_call(void *ctx, uint32_t index, int32_t id) {
  (void)index;
  (void)id;
  (*(uint32_t *)ctx)++;
  return true;
}

/* Bad inputs are refused before any work: the prompt's index in ids[0],
 * no callback, the session's sequence untouched and the output zeroed. */
static void test_bad_inputs(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_session *s = generate_session(model, cpu, 16, 2);
  fdy_error err;
  /* a sequence in slot 1 that a refused batch must leave alone */
  uint32_t slot = 0;
  int32_t held[2] = {4, 5};
  assert_int_equal(fdy_llama_session_append(s, 1, held, 2, NULL, NULL, &err),
                   FDY_OK);
  int32_t next = fdy_llama_session_slot_next(s, 1);

  int32_t good[3] = {1, 2, 3};
  int32_t outside[4] = {1, 2, 1024, 3};
  int32_t long_prompt[16] = {0};
  uint32_t calls = 0;
  fdy_llama_batch_options o = {.on_token = count_call, .ctx = &calls};
  fdy_llama_batch_generation batch;
  memset(&batch, 0xff, sizeof batch);

  /* an empty prompt (no ids, and ids with count 0) */
  fdy_llama_batch_prompt prompts[4] = {
      {good, 3, 2}, {good, 3, 2}, {NULL, 0, 2}, {good, 3, 2}};
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 4, &o, &batch, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_null(batch.sequences);
  assert_int_equal(batch.count, 0);
  prompts[2] = (fdy_llama_batch_prompt){good, 0, 2};
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 4, &o, &batch, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);

  /* too long for the context of 16: 16 ids + 2 new need 17 positions;
   * 16 + 1 fit exactly */
  prompts[2] = (fdy_llama_batch_prompt){good, 3, 2};
  prompts[1] = (fdy_llama_batch_prompt){long_prompt, 16, 2};
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 4, &o, &batch, &err),
                   FDY_ERR_CONTEXT);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.expected, 16);
  assert_int_equal(err.actual, 17);
  assert_non_null(strstr(err.message, "prompt 1"));

  /* an id outside the vocabulary (1024 ids): prompt 3, its index 2 */
  prompts[1] = (fdy_llama_batch_prompt){long_prompt, 16, 1};
  prompts[3] = (fdy_llama_batch_prompt){outside, 4, 2};
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 4, &o, &batch, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 3);
  assert_int_equal(err.ids[1], 2);
  assert_non_null(strstr(err.message, "prompt 3"));

  /* no prompts, no options, stop ids without their array */
  prompts[3] = (fdy_llama_batch_prompt){good, 3, 2};
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 0, &o, &batch, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_generate_batch(s, NULL, 4, &o, &batch, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 4, NULL, &batch, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_generate_batch(NULL, prompts, 4, &o, &batch, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 4, &o, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_llama_batch_options no_stops = {.stop_count = 1};
  assert_int_equal(
      fdy_llama_generate_batch(s, prompts, 4, &no_stops, &batch, &err),
      FDY_ERR_INVALID_ARGUMENT);

  /* nothing ran */
  assert_int_equal(calls, 0);
  assert_true(fdy_llama_session_slot_active(s, 1));
  assert_false(fdy_llama_session_slot_active(s, 0));
  assert_int_equal(fdy_llama_session_slot_position(s, 1), 2);
  assert_int_equal(fdy_llama_session_slot_next(s, 1), next);

  /* the same prompts, fixed, run (the session is reset first) */
  assert_int_equal(fdy_llama_generate_batch(s, prompts, 4, &o, &batch, &err),
                   FDY_OK);
  assert_int_equal(batch.count, 4);
  assert_false(fdy_llama_session_slot_active(s, 1));
  assert_int_equal(fdy_llama_session_admit(s, good, 3, &slot, &err), FDY_OK);
  assert_int_equal(slot, 0);
  fdy_llama_batch_generation_free(&batch);
  fdy_llama_batch_generation_free(NULL);

  fdy_llama_session_destroy(s);
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

/* A backend failure in an admit or a decode step fails the batch with the
 * backend's error and a zeroed output. */
static void test_backend_failure(void **state) {
  (void)state;
  fdy_llama_model *model = open_fixture("llama3-micro");
  fdy_backend *cpu = cpu_backend(2);
  fdy_llama_batch_prompt prompts[PROMPTS];
  five_prompts(prompts);
  fdy_llama_batch_options o = {.ignore_eos = true};
  fdy_error err;

  fdy_backend *counting = NULL;
  assert_int_equal(fdy_fault_backend_create(cpu, NULL, &counting, &err),
                   FDY_OK);
  fdy_llama_session *s = generate_session(model, counting, 64, 2);
  uint64_t create_calls = fdy_fault_get_stats(counting).calls;
  fdy_llama_batch_generation batch;
  assert_int_equal(
      fdy_llama_generate_batch(s, prompts, PROMPTS, &o, &batch, &err), FDY_OK);
  uint64_t run_calls = fdy_fault_get_stats(counting).calls - create_calls;
  fdy_llama_batch_generation_free(&batch);
  fdy_llama_session_destroy(s);
  fdy_backend_destroy(counting);
  assert_true(run_calls > 20);

  for (uint64_t n = 1; n <= run_calls; n += run_calls / 7) {
    fdy_fault_options fo = {.fail_at_call = create_calls + n};
    fdy_backend *faulty = NULL;
    assert_int_equal(fdy_fault_backend_create(cpu, &fo, &faulty, &err), FDY_OK);
    s = generate_session(model, faulty, 64, 2);
    assert_int_equal(
        fdy_llama_generate_batch(s, prompts, PROMPTS, &o, &batch, &err),
        FDY_ERR_BACKEND);
    assert_true(fdy_fault_get_stats(faulty).fired);
    assert_null(batch.sequences);
    assert_int_equal(batch.count, 0);
    fdy_llama_session_destroy(s);
    fdy_backend_destroy(faulty);
  }
  fdy_backend_destroy(cpu);
  fdy_llama_close(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_equals_alone_micro),
      cmocka_unit_test(test_batch_equals_alone_tiny),
      cmocka_unit_test(test_stop_in_one_sequence),
      cmocka_unit_test(test_callback),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_backend_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
