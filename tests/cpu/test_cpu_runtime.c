/* End-to-end tests on the CPU backend: streaming plans with 1, 2 and 3
 * buffers over a synthetic graph with real layer data, run through the
 * runtime interpreter; every op's result must equal the checksum of its
 * layer computed directly on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/cpu.h"
#include "foundry/graph.h"
#include "foundry/plan.h"
#include "foundry/runtime.h"

#include <stdlib.h>
#include <string.h>

/* Random non-zero bytes from a SplitMix64 stream. */
static unsigned char *random_bytes(uint64_t n, uint64_t seed) {
  unsigned char *p = malloc(n);
  assert_non_null(p);
  uint64_t x = seed;
  for (uint64_t i = 0; i < n; i++) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = (unsigned char)(z % 255 + 1);
  }
  return p;
}

/* Runs a `buffers`-buffered streaming plan of `layers` layers of
 * weight_bytes each on a CPU backend with compute_passes passes. */
static void run_streaming(uint32_t layers, uint64_t weight_bytes,
                          uint32_t buffers, uint32_t passes) {
  fdy_error err;
  unsigned char **data = calloc(layers, sizeof *data);
  assert_non_null(data);
  for (uint32_t i = 0; i < layers; i++) {
    data[i] = random_bytes(weight_bytes, 1000 * buffers + i);
  }
  fdy_graph *graph = NULL;
  assert_int_equal(fdy_synthetic_graph_create(layers, weight_bytes,
                                              (const void *const *)data, &graph,
                                              &err),
                   FDY_OK);
  fdy_cpu_options opts = {.memory_bytes = 64u << 20, .compute_passes = passes};
  fdy_backend *backend = NULL;
  assert_int_equal(fdy_cpu_backend_create(&opts, &backend, &err), FDY_OK);
  fdy_device_caps caps;
  assert_int_equal(backend->ops->capabilities(backend, &caps, &err), FDY_OK);

  uint64_t slot = 0;
  assert_int_equal(fdy_align_up(weight_bytes, caps.alignment, &slot, &err),
                   FDY_OK);
  fdy_plan *plan = NULL;
  assert_int_equal(fdy_plan_streaming(graph, slot * buffers, buffers,
                                      caps.alignment, &plan, &err),
                   FDY_OK);
  fdy_plan_summary summary;
  assert_int_equal(fdy_plan_validate(plan, &summary, &err), FDY_OK);
  assert_int_equal(summary.slots, buffers < layers ? buffers : layers);

  fdy_run_options run_opts = {.collect_timings = true};
  fdy_run_result result;
  fdy_status st =
      fdy_runtime_execute(plan, graph, backend, &run_opts, &result, &err);
  if (st != FDY_OK) {
    print_error("execute failed: %s (%s) at command %lld\n", err.message,
                fdy_status_name(err.kind), (long long)err.command_index);
  }
  assert_int_equal(st, FDY_OK);
  assert_int_equal(result.op_count, layers);
  for (uint32_t i = 0; i < layers; i++) {
    assert_int_equal(result.op_results[i], fdy_checksum(data[i], weight_bytes));
  }
  assert_true(result.peak_slot_bytes <= slot * buffers);
  assert_int_equal(result.timing_count, fdy_plan_command_count(plan));
  for (size_t i = 0; i < result.timing_count; i++) {
    const fdy_command_timing *t = &result.timings[i];
    if (t->kind == FDY_CMD_PREFETCH || t->kind == FDY_CMD_LAUNCH) {
      if (t->device_start_ns >= 0) {
        assert_true(t->device_start_ns <= t->device_end_ns);
      }
    }
  }
  /* Everything went back to the backend: the whole memory is free. */
  assert_int_equal(backend->ops->capabilities(backend, &caps, &err), FDY_OK);
  assert_int_equal(caps.free_memory, caps.total_memory);

  fdy_run_result_free(&result);
  fdy_plan_destroy(plan);
  fdy_backend_destroy(backend);
  fdy_graph_destroy(graph);
  for (uint32_t i = 0; i < layers; i++) {
    free(data[i]);
  }
  free(data);
}

static void test_one_buffer(void **state) {
  (void)state;
  run_streaming(6, 4099, 1, 1);
}

static void test_two_buffers(void **state) {
  (void)state;
  run_streaming(7, 65536, 2, 1);
}

static void test_three_buffers(void **state) {
  (void)state;
  run_streaming(9, 100003, 3, 2);
}

static void test_more_buffers_than_layers(void **state) {
  (void)state;
  run_streaming(2, 777, 3, 1);
}

static void test_large_layers_three_buffers(void **state) {
  (void)state;
  run_streaming(8, 2u << 20, 3, 1);
}

/* A plan whose budget exceeds the backend's memory fails in preflight with
 * no backend side effects, and the backend still works afterwards. */
static void test_budget_above_device_memory(void **state) {
  (void)state;
  fdy_error err;
  const uint64_t n = 4096;
  unsigned char *data[2] = {random_bytes(n, 1), random_bytes(n, 2)};
  fdy_graph *graph = NULL;
  assert_int_equal(
      fdy_synthetic_graph_create(2, n, (const void *const *)data, &graph, &err),
      FDY_OK);
  fdy_cpu_options opts = {.memory_bytes = n};
  fdy_backend *backend = NULL;
  assert_int_equal(fdy_cpu_backend_create(&opts, &backend, &err), FDY_OK);
  fdy_plan *plan = NULL;
  assert_int_equal(fdy_plan_streaming(graph, 2 * n, 2, 64, &plan, &err),
                   FDY_OK);
  fdy_run_result result;
  assert_int_equal(
      fdy_runtime_execute(plan, graph, backend, NULL, &result, &err),
      FDY_ERR_BUDGET);
  assert_int_equal(err.expected, n);
  assert_int_equal(err.actual, 2 * n);
  assert_int_equal(result.op_count, 0);
  assert_null(result.op_results);
  fdy_device_caps caps;
  assert_int_equal(backend->ops->capabilities(backend, &caps, &err), FDY_OK);
  assert_int_equal(caps.free_memory, n);
  fdy_plan_destroy(plan);

  assert_int_equal(fdy_plan_streaming(graph, n, 1, 64, &plan, &err), FDY_OK);
  assert_int_equal(
      fdy_runtime_execute(plan, graph, backend, NULL, &result, &err), FDY_OK);
  assert_int_equal(result.op_results[0], fdy_checksum(data[0], n));
  assert_int_equal(result.op_results[1], fdy_checksum(data[1], n));
  fdy_run_result_free(&result);
  fdy_plan_destroy(plan);
  fdy_backend_destroy(backend);
  fdy_graph_destroy(graph);
  free(data[0]);
  free(data[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_buffer),
      cmocka_unit_test(test_two_buffers),
      cmocka_unit_test(test_three_buffers),
      cmocka_unit_test(test_more_buffers_than_layers),
      cmocka_unit_test(test_large_layers_three_buffers),
      cmocka_unit_test(test_budget_above_device_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
