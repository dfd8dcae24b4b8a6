/* GPU test of the benchmark (label gpu): small runs on the CUDA backend in
 * registered and staged host mode, whose reports must hold every execution
 * verified, the three ceilings, the device memory in use with the
 * executors and after them, each executor's setup and the host memory
 * accounting of the mode; --cpu-memory refused when auto chooses cuda; a
 * device allocation of executor create failed through the fault wrapper
 * and reported as stage "executors". Exits 77 (skipped) without a CUDA
 * device unless FOUNDRY_REQUIRE_CUDA=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_internal.h"
#include "fault_hooks.h"
#include "foundry/bench.h"
#include "foundry/cuda.h"

/* Small cuda options writing a report into a fresh directory dir. */
static void small_cuda_options(fdy_bench_options *o, char *dir, char *report,
                               size_t cap) {
  assert_non_null(mkdtemp(dir));
  snprintf(report, cap, "%s/r.json", dir);
  fdy_bench_options_default(o);
  o->backend = FDY_BENCH_BACKEND_CUDA;
  o->layers = 6;
  o->weight_mib = 8;
  o->iterations = 3;
  o->warmup = 1;
  o->bootstrap_resamples = 200;
  o->report_path = report;
}

static json_t *load_report(const char *path) {
  json_error_t je;
  json_t *r = json_load_file(path, 0, &je);
  assert_non_null(r);
  return r;
}

static void run_mode(fdy_cuda_host_mode mode) {
  char dir[] = "/tmp/foundry-bench-cuda-XXXXXX", report[64];
  fdy_bench_options o;
  small_cuda_options(&o, dir, report, sizeof report);
  o.host_mode = mode;
  fdy_error err;
  bench_hooks hooks = {0};
  fdy_status st = bench_run_hooked(&o, &hooks, NULL, &err);
  if (st != FDY_OK) {
    print_error("cuda bench failed: %s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);

  json_t *r = load_report(report);
  assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(r, "executions"), i, x) {
    assert_string_equal(json_string_value(json_object_get(x, "checksum")),
                        "ok");
    assert_true(json_is_integer(json_object_get(x, "device_copy_ns")));
  }
  json_t *ceilings =
      json_object_get(json_object_get(r, "statistics"), "ceilings");
  assert_true(json_is_object(json_object_get(ceilings, "h2d")));
  assert_true(json_is_object(json_object_get(ceilings, "d2d")));
  assert_true(json_is_object(json_object_get(ceilings, "checksum_kernel")));
  json_t *mem = json_object_get(r, "memory");
  json_t *use = json_object_get(mem, "device_memory_in_use_bytes");
  assert_true(json_is_object(use));
  /* the slots of every executor occupy at least their bytes on the device,
   * and are gone again after the teardown (allowing 16 MiB of other device
   * allocations) */
  json_int_t setup = json_integer_value(json_object_get(use, "after_setup"));
  json_int_t slots = json_integer_value(json_object_get(use, "with_slots"));
  json_int_t rounds = json_integer_value(json_object_get(use, "after_rounds"));
  json_int_t total =
      json_integer_value(json_object_get(mem, "device_slot_total_bytes"));
  assert_int_equal(total, (1 + 2 + 3) * 8 * 1024 * 1024);
  assert_true(slots - setup >= total);
  assert_true(rounds < setup + 16 * 1024 * 1024);
  json_array_foreach(json_object_get(r, "plans"), i, x) {
    json_t *plan_setup = json_object_get(x, "setup");
    assert_true(json_integer_value(json_object_get(plan_setup, "create_ns")) >
                0);
    /* the bench registered the payload; the executors register nothing */
    assert_int_equal(
        json_integer_value(json_object_get(plan_setup, "registered_bytes")), 0);
  }
  json_int_t payload =
      json_integer_value(json_object_get(mem, "host_payload_bytes"));
  json_int_t registered =
      json_integer_value(json_object_get(mem, "host_registered_bytes"));
  json_int_t staging =
      json_integer_value(json_object_get(mem, "host_staging_bytes"));
  if (mode == FDY_CUDA_HOST_REGISTERED) {
    assert_int_equal(registered, payload);
    assert_int_equal(staging, 0);
  } else {
    assert_int_equal(registered, 0);
    assert_true(staging > 0);
  }
  json_decref(r);
  unlink(report);
  rmdir(dir);
}

/* --cpu-memory is refused once auto has chosen cuda, before any payload. */
static void test_cpu_memory_refused_when_auto_chooses_cuda(void **state) {
  (void)state;
  char dir[] = "/tmp/foundry-bench-cuda-XXXXXX", report[64];
  fdy_bench_options o;
  small_cuda_options(&o, dir, report, sizeof report);
  o.backend = FDY_BENCH_BACKEND_AUTO;
  o.cpu_memory_bytes = FDY_GIB;
  fdy_error err;
  bench_hooks hooks = {0};
  assert_int_equal(bench_run_hooked(&o, &hooks, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(err.message, "auto chose cuda"));
  assert_false(hooks.payload_generated);
  json_t *r = load_report(report);
  json_t *e = json_object_get(r, "error");
  assert_string_equal(json_string_value(json_object_get(e, "stage")),
                      "backend");
  json_decref(r);
  unlink(report);
  rmdir(dir);
}

/* The first buffer_alloc through the fault wrapper (the ceilings allocate
 * with cudaMalloc directly) is one of the first executor's: the run stops
 * at stage "executors" before any execution; the readings with the
 * executors and after the rounds stay null. */
static void test_executor_alloc_failure(void **state) {
  (void)state;
  char dir[] = "/tmp/foundry-bench-cuda-XXXXXX", report[64];
  fdy_bench_options o;
  small_cuda_options(&o, dir, report, sizeof report);
  const char *path = o.report_path;
  o.report_path = NULL;
  fdy_fault_options fault = {0};
  bench_hooks hooks = {0};
  fault_hooks fh;
  fault_hooks_use(&hooks, &fh, &fault);
  fdy_error err;
  uint64_t call = 0;
  do {
    fault.fail_at_call = ++call;
    assert_true(call < 1000);
    assert_int_not_equal(bench_run_hooked(&o, &hooks, NULL, &err), FDY_OK);
  } while (!fh.stats.fired_op ||
           strcmp(fh.stats.fired_op, "buffer_alloc") != 0);
  o.report_path = path;
  hooks = (bench_hooks){0};
  fault_hooks_use(&hooks, &fh, &fault);
  fdy_bench_written written = {false, true};
  assert_int_equal(bench_run_hooked(&o, &hooks, &written, &err),
                   FDY_ERR_BACKEND);
  assert_string_equal(err.backend_op, "buffer_alloc");
  assert_true(written.report); /* this run's failed report */
  assert_false(written.trace);
  assert_true(hooks.payload_generated);
  json_t *r = load_report(report);
  json_t *e = json_object_get(r, "error");
  assert_string_equal(json_string_value(json_object_get(e, "stage")),
                      "executors");
  assert_int_equal(json_array_size(json_object_get(r, "executions")), 0);
  json_t *use = json_object_get(json_object_get(r, "memory"),
                                "device_memory_in_use_bytes");
  assert_true(json_is_integer(json_object_get(use, "after_setup")));
  assert_true(json_is_null(json_object_get(use, "with_slots")));
  assert_true(json_is_null(json_object_get(use, "after_rounds")));
  json_decref(r);
  unlink(report);
  rmdir(dir);
}

static void test_registered(void **state) {
  (void)state;
  run_mode(FDY_CUDA_HOST_REGISTERED);
}

static void test_staged(void **state) {
  (void)state;
  run_mode(FDY_CUDA_HOST_STAGED);
}

int main(void) {
  if (fdy_cuda_device_count() == 0) {
    const char *require = getenv("FOUNDRY_REQUIRE_CUDA");
    if (require && strcmp(require, "1") == 0) {
      fprintf(stderr, "FOUNDRY_REQUIRE_CUDA=1 but no CUDA device\n");
      return 1;
    }
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registered),
      cmocka_unit_test(test_staged),
      cmocka_unit_test(test_cpu_memory_refused_when_auto_chooses_cuda),
      cmocka_unit_test(test_executor_alloc_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
