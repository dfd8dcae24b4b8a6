/* Tests of the benchmark module: every option check, the statistics against
 * hand-computed values and the documented resampler, the payload generator,
 * the checksum chain and its streaming plans, whole runs on the CPU backend
 * (a report with every execution verified, device and host budgets refused
 * before the payload exists, failed runs' reports, a fault injected at
 * every backend call through the fault wrapper, outputs proven writable
 * before any work and raced during the run), and a small run of the
 * executor overhead benchmark. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_internal.h"
#include "fault_hooks.h"
#include "foundry/bench.h"
#include "foundry/checksum.h"
#include "foundry/cuda.h"
#include "foundry/fault.h"

/* ---- helpers
 * ------------------------------------------------------------------ */

typedef struct tmpdir {
  char path[64];
} tmpdir;

static void tmpdir_make(tmpdir *t) {
  snprintf(t->path, sizeof t->path, "/tmp/foundry-bench-XXXXXX");
  assert_non_null(mkdtemp(t->path));
}

static char *tmp_file(const tmpdir *t, const char *name) {
  size_t n = strlen(t->path) + strlen(name) + 2;
  char *p = malloc(n);
  assert_non_null(p);
  snprintf(p, n, "%s/%s", t->path, name);
  return p;
}

static void tmpdir_remove(tmpdir *t) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->path);
  assert_int_equal(system(cmd), 0);
}

/* Small, fast CPU options with no output. */
static void small_options(fdy_bench_options *o) {
  fdy_bench_options_default(o);
  o->backend = FDY_BENCH_BACKEND_CPU;
  o->layers = 5;
  o->weight_mib = 1;
  o->iterations = 3;
  o->warmup = 1;
  o->bootstrap_resamples = 200;
  o->cpu_memory_bytes = 64 * FDY_MIB;
}

static fdy_status check(const fdy_bench_options *o, fdy_error *err) {
  fdy_error_clear(err);
  return fdy_bench_check_options(o, err);
}

static json_t *load_json(const char *path) {
  json_error_t je;
  json_t *doc = json_load_file(path, 0, &je);
  if (!doc) {
    print_error("%s:%d: %s\n", path, je.line, je.text);
  }
  assert_non_null(doc);
  return doc;
}

static const char *jget_str(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  assert_true(json_is_string(v));
  return json_string_value(v);
}

/* ---- options ----------------------------------------------------------------
 */

static void test_defaults_pass(void **state) {
  (void)state;
  fdy_bench_options o;
  fdy_error err;
  fdy_bench_options_default(&o);
  assert_int_equal(o.layers, 48);
  assert_int_equal(o.weight_mib, 64);
  assert_int_equal(o.iterations, 10);
  assert_int_equal(o.warmup, 2);
  assert_int_equal(o.bootstrap_resamples, 10000);
  assert_int_equal(o.buffer_count, 3);
  assert_int_equal(o.buffers[0], 1);
  assert_int_equal(o.buffers[2], 3);
  assert_int_equal(o.compute_passes, 1);
  assert_int_equal(o.backend, FDY_BENCH_BACKEND_AUTO);
  assert_int_equal(o.host_mode, FDY_CUDA_HOST_REGISTERED);
  assert_int_equal(check(&o, &err), FDY_OK);
  o.warmup = 0;
  assert_int_equal(check(&o, &err), FDY_OK);
  assert_string_equal(fdy_bench_backend_name(FDY_BENCH_BACKEND_CUDA), "cuda");
  assert_string_equal(fdy_bench_backend_name(FDY_BENCH_BACKEND_AUTO), "auto");
}

static void test_zero_values_refused(void **state) {
  (void)state;
  const char *flags[] = {"--layers", "--weight-mib", "--iterations",
                         "--bootstrap-resamples", "--compute-passes"};
  for (int i = 0; i < 5; i++) {
    fdy_bench_options o;
    fdy_error err;
    fdy_bench_options_default(&o);
    switch (i) {
    case 0:
      o.layers = 0;
      break;
    case 1:
      o.weight_mib = 0;
      break;
    case 2:
      o.iterations = 0;
      break;
    case 3:
      o.bootstrap_resamples = 0;
      break;
    default:
      o.compute_passes = 0;
      break;
    }
    assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
    assert_string_equal(err.name, flags[i]);
  }
}

static void test_resamples_limit(void **state) {
  (void)state;
  fdy_bench_options o;
  fdy_error err;
  fdy_bench_options_default(&o);
  o.bootstrap_resamples = FDY_BENCH_MAX_RESAMPLES;
  assert_int_equal(check(&o, &err), FDY_OK);
  o.bootstrap_resamples = FDY_BENCH_MAX_RESAMPLES + 1;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, FDY_BENCH_MAX_RESAMPLES);
  assert_int_equal(err.actual, FDY_BENCH_MAX_RESAMPLES + 1);
}

static void test_bad_buffer_lists(void **state) {
  (void)state;
  fdy_bench_options o;
  fdy_error err;
  fdy_bench_options_default(&o);
  o.buffer_count = 0;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  o.buffer_count = FDY_BENCH_MAX_CONFIGS + 1;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);

  fdy_bench_options_default(&o);
  o.buffers[1] = 0;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  o.buffers[1] = FDY_BENCH_MAX_BUFFERS + 1;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.actual, FDY_BENCH_MAX_BUFFERS + 1);
  o.buffers[1] = FDY_BENCH_MAX_BUFFERS;
  o.layers = FDY_BENCH_MAX_BUFFERS + 1; /* more layers than buffers */
  assert_int_equal(check(&o, &err), FDY_OK);

  o.buffers[2] = 1; /* 1, 64, 1 */
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(err.ids[1], 2);

  fdy_bench_options_default(&o);
  o.buffer_count = FDY_BENCH_MAX_CONFIGS;
  for (uint32_t i = 0; i < FDY_BENCH_MAX_CONFIGS; i++) {
    o.buffers[i] = i + 1;
  }
  assert_int_equal(check(&o, &err), FDY_OK);
}

/* As many slots as layers would keep every weight resident: refused. */
static void test_layers_must_exceed_buffers(void **state) {
  (void)state;
  fdy_bench_options o;
  fdy_error err;
  fdy_bench_options_default(&o); /* buffers 1,2,3 */
  o.layers = 3;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "--layers");
  assert_int_equal(err.expected, 3);
  assert_int_equal(err.actual, 3);
  o.layers = 4;
  assert_int_equal(check(&o, &err), FDY_OK);
  o.buffer_count = 1;
  o.buffers[0] = 1;
  o.layers = 1;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  o.layers = 2;
  assert_int_equal(check(&o, &err), FDY_OK);
}

static void test_overflowing_sizes(void **state) {
  (void)state;
  fdy_bench_options o;
  fdy_error err;
  fdy_bench_options_default(&o);
  o.weight_mib = UINT64_MAX / FDY_MIB + 1; /* weight bytes overflow */
  assert_int_equal(check(&o, &err), FDY_ERR_OVERFLOW);
  o.weight_mib = (uint64_t)1 << 40; /* 2^60 bytes x 48 layers overflow */
  assert_int_equal(check(&o, &err), FDY_ERR_OVERFLOW);
  o.layers = 1;
  o.buffers[2] = FDY_BENCH_MAX_BUFFERS; /* 2^60 x 64 slot bytes overflow */
  assert_int_equal(check(&o, &err), FDY_ERR_OVERFLOW);
  o.warmup = UINT32_MAX; /* rounds overflow 32 bits */
  o.weight_mib = 1;
  assert_int_equal(check(&o, &err), FDY_ERR_OVERFLOW);
}

static void test_other_values_refused(void **state) {
  (void)state;
  fdy_bench_options o;
  fdy_error err;
  fdy_bench_options_default(&o);
  o.cuda_device = -1;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  fdy_bench_options_default(&o);
  o.backend = (fdy_bench_backend)7;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  fdy_bench_options_default(&o);
  o.host_mode = (fdy_cuda_host_mode)9;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  fdy_bench_options_default(&o);
  o.backend = FDY_BENCH_BACKEND_CUDA;
  o.cpu_memory_bytes = FDY_GIB;
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(check(NULL, &err), FDY_ERR_INVALID_ARGUMENT);
}

static void test_output_paths(void **state) {
  (void)state;
  tmpdir t;
  tmpdir_make(&t);
  char *report = tmp_file(&t, "r.json");
  char *trace = tmp_file(&t, "t.json");
  char *dotted = tmp_file(&t, "./r.json");
  char *missing = tmp_file(&t, "no/such/r.json");
  fdy_bench_options o;
  fdy_error err;
  fdy_bench_options_default(&o);

  o.trace_path = trace; /* trace without report */
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);

  o.report_path = report;
  assert_int_equal(check(&o, &err), FDY_OK);
  o.trace_path = report; /* same path */
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  o.trace_path = dotted; /* same file, other spelling */
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);

  o.trace_path = NULL;
  o.report_path = missing;
  assert_int_equal(check(&o, &err), FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, missing);
  o.report_path = report;
  o.trace_path = missing;
  assert_int_equal(check(&o, &err), FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, missing);

  char *dir_only = tmp_file(&t, "");
  o.trace_path = NULL;
  o.report_path = dir_only; /* ends in '/' */
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);
  o.report_path = "";
  assert_int_equal(check(&o, &err), FDY_ERR_INVALID_ARGUMENT);

  /* A file that is not a directory as the directory. */
  FILE *f = fopen(report, "w");
  assert_non_null(f);
  fputs("keep me", f);
  fclose(f);
  char *under_file = tmp_file(&t, "r.json/x.json");
  o.report_path = under_file;
  assert_int_equal(check(&o, &err), FDY_ERR_NOT_FOUND);

  /* Existing files are refused, by check and by a run, and stay intact. */
  o.report_path = report;
  assert_int_equal(check(&o, &err), FDY_ERR_EXISTS);
  assert_string_equal(err.name, report);
  small_options(&o);
  o.report_path = trace;
  o.trace_path = report;
  assert_int_equal(check(&o, &err), FDY_ERR_EXISTS);
  assert_string_equal(err.name, report);
  fdy_bench_written written = {true, true};
  assert_int_equal(fdy_bench_run(&o, &written, &err), FDY_ERR_EXISTS);
  assert_false(written.report);
  assert_false(written.trace);
  assert_int_equal(access(trace, F_OK), -1); /* nothing was written */
  char buf[32] = "";
  f = fopen(report, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof buf, f));
  fclose(f);
  assert_string_equal(buf, "keep me");

  free(report);
  free(trace);
  free(dotted);
  free(missing);
  free(dir_only);
  free(under_file);
  tmpdir_remove(&t);
}

/* ---- statistics
 * ---------------------------------------------------------------- */

static void test_median_mean_stddev(void **state) {
  (void)state;
  fdy_error err;
  double m = 0;
  const double odd[] = {3, 1, 2};
  assert_int_equal(fdy_bench_median(odd, 3, &m, &err), FDY_OK);
  assert_true(m == 2.0);
  assert_true(odd[0] == 3 && odd[1] == 1); /* input untouched */
  const double even[] = {4, 1, 3, 2};
  assert_int_equal(fdy_bench_median(even, 4, &m, &err), FDY_OK);
  assert_true(m == 2.5);
  assert_int_equal(fdy_bench_median(even, 0, &m, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  const double x[] = {2, 4, 4, 4, 5, 5, 7, 9};
  assert_true(fdy_bench_mean(x, 8) == 5.0);
  /* sum of squared deviations 32, n - 1 = 7 */
  assert_true(fabs(fdy_bench_stddev(x, 8) - sqrt(32.0 / 7.0)) < 1e-15);
  assert_true(fdy_bench_stddev(x, 1) == 0.0);

  fdy_bench_stats s;
  assert_int_equal(fdy_bench_describe(x, 8, &s, &err), FDY_OK);
  assert_int_equal(s.n, 8);
  assert_true(s.median == 4.5);
  assert_true(s.mean == 5.0);
  assert_true(s.min == 2.0);
  assert_true(s.max == 9.0);
  assert_int_equal(fdy_bench_describe(x, 0, &s, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

static void test_percentile_interpolation(void **state) {
  (void)state;
  const double v[] = {10, 20, 30, 40};
  assert_true(fdy_bench_percentile_sorted(v, 4, 0.0) == 10.0);
  assert_true(fdy_bench_percentile_sorted(v, 4, 1.0) == 40.0);
  assert_true(fdy_bench_percentile_sorted(v, 4, 0.5) == 25.0);
  /* h = 3 * 0.975 = 2.925: 30 + 0.925 * 10 */
  assert_true(fabs(fdy_bench_percentile_sorted(v, 4, 0.975) - 39.25) < 1e-12);
  /* h = 3 * 0.025 = 0.075: 10 + 0.075 * 10 */
  assert_true(fabs(fdy_bench_percentile_sorted(v, 4, 0.025) - 10.75) < 1e-12);
  const double one[] = {7};
  assert_true(fdy_bench_percentile_sorted(one, 1, 0.975) == 7.0);
}

static void test_splitmix64_known_outputs(void **state) {
  (void)state;
  fdy_splitmix64 g = {0};
  assert_true(fdy_splitmix64_next(&g) == 0xE220A8397B1DCDAFull);
  assert_true(fdy_splitmix64_next(&g) == 0x6E789E6AA1B965F4ull);
  assert_true(fdy_splitmix64_next(&g) == 0x06C45D188009454Full);
  /* Stream s is the (s + 1)-th output of SplitMix64(seed). */
  assert_true(fdy_bench_stream_seed(0, 0) == 0xE220A8397B1DCDAFull);
  assert_true(fdy_bench_stream_seed(0, 2) == 0x06C45D188009454Full);
  fdy_splitmix64 h = {12345};
  uint64_t out = 0;
  for (int i = 0; i < 6; i++) {
    out = fdy_splitmix64_next(&h);
  }
  assert_true(fdy_bench_stream_seed(12345, 5) == out);
}

static void test_bootstrap(void **state) {
  (void)state;
  fdy_error err;
  const double x[] = {5, 1, 4, 2, 8, 3, 9, 6, 7, 10};
  fdy_bench_interval a, b, c;
  uint64_t s0 = fdy_bench_stream_seed(0, 0), s1 = fdy_bench_stream_seed(1, 0);
  assert_int_equal(
      fdy_bench_bootstrap(x, 10, FDY_BENCH_STAT_MEDIAN, 2000, s0, &a, &err),
      FDY_OK);
  assert_int_equal(
      fdy_bench_bootstrap(x, 10, FDY_BENCH_STAT_MEDIAN, 2000, s0, &b, &err),
      FDY_OK);
  assert_true(a.low == b.low && a.high == b.high); /* deterministic */
  assert_int_equal(
      fdy_bench_bootstrap(x, 10, FDY_BENCH_STAT_MEDIAN, 2000, s1, &c, &err),
      FDY_OK);
  assert_true(a.low != c.low || a.high != c.high); /* seed matters */
  assert_true(a.low >= 1 && a.low <= 5.5 && a.high >= 5.5 && a.high <= 10);
  assert_int_equal(
      fdy_bench_bootstrap(x, 10, FDY_BENCH_STAT_MEAN, 2000, s0, &a, &err),
      FDY_OK);
  assert_true(a.low < 5.5 && a.high > 5.5);

  /* One resample, by hand: two draws x[next % 2], then their mean. */
  const double two[] = {1.0, 3.0};
  fdy_splitmix64 g = {s0};
  uint64_t d0 = fdy_splitmix64_next(&g) % 2, d1 = fdy_splitmix64_next(&g) % 2;
  double want = (two[d0] + two[d1]) / 2.0;
  assert_int_equal(
      fdy_bench_bootstrap(two, 2, FDY_BENCH_STAT_MEAN, 1, s0, &a, &err),
      FDY_OK);
  assert_true(a.low == want && a.high == want);

  const double same[] = {4, 4, 4};
  assert_int_equal(
      fdy_bench_bootstrap(same, 3, FDY_BENCH_STAT_MEAN, 100, s0, &a, &err),
      FDY_OK);
  assert_true(a.low == 4.0 && a.high == 4.0);

  assert_int_equal(
      fdy_bench_bootstrap(x, 0, FDY_BENCH_STAT_MEAN, 10, s0, &a, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_bench_bootstrap(x, 10, FDY_BENCH_STAT_MEAN, 0, s0, &a, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_bench_bootstrap(x, 10, FDY_BENCH_STAT_MEAN,
                                       FDY_BENCH_MAX_RESAMPLES + 1, s0, &a,
                                       &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

static void test_paired_speedup(void **state) {
  (void)state;
  fdy_error err;
  const double base[] = {10, 12, 11, 13, 9};
  const double half[] = {5, 6, 5.5, 6.5, 4.5};
  double point = 0;
  fdy_bench_interval ci;
  uint64_t s = fdy_bench_stream_seed(0, 2);
  /* Every round exactly twice as fast: every resample's speedup is 2. */
  assert_int_equal(
      fdy_bench_paired_speedup(base, half, 5, 500, s, &point, &ci, &err),
      FDY_OK);
  assert_true(point == 2.0 && ci.low == 2.0 && ci.high == 2.0);
  assert_int_equal(
      fdy_bench_paired_speedup(base, base, 5, 500, s, &point, &ci, &err),
      FDY_OK);
  assert_true(point == 1.0 && ci.low == 1.0 && ci.high == 1.0);
  const double other[] = {5, 12, 5, 13, 4};
  assert_int_equal(
      fdy_bench_paired_speedup(base, other, 5, 500, s, &point, &ci, &err),
      FDY_OK);
  assert_true(point == 11.0 / 5.0);
  assert_true(ci.low <= point && ci.high >= ci.low);
  assert_int_equal(
      fdy_bench_paired_speedup(base, other, 0, 500, s, &point, &ci, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_bench_paired_speedup(base, other, 5, 0, s, &point, &ci, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_bench_paired_speedup(base, other, 5,
                                            FDY_BENCH_MAX_RESAMPLES + 1, s,
                                            &point, &ci, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

static void test_fill_layer(void **state) {
  (void)state;
  unsigned char a[16], b[16], c[13];
  fdy_bench_fill_layer(a, 16, 0, 0);
  fdy_bench_fill_layer(b, 16, 0, 1);
  fdy_bench_fill_layer(c, 13, 0, 0);
  assert_memory_not_equal(a, b, 16); /* distinct per layer */
  assert_memory_equal(a, c, 13);     /* the last word truncated */
  fdy_splitmix64 g = {fdy_bench_stream_seed(0, FDY_BENCH_PAYLOAD_STREAM)};
  uint64_t w = fdy_splitmix64_next(&g);
  for (int k = 0; k < 8; k++) {
    assert_int_equal(a[k], (unsigned char)(w >> (8 * k))); /* little endian */
  }
  fdy_bench_fill_layer(b, 16, 1, 0);
  assert_memory_not_equal(a, b, 16); /* the seed matters */
}

/* ---- the chain and its plans
 * ----------------------------------------------------- */

static void test_chain_graph(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_error err;
  assert_int_equal(fdy_synthetic_graph_create(0, 64, 1, NULL, &g, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(g);
  assert_int_equal(fdy_synthetic_graph_create(3, 0, 1, NULL, &g, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_synthetic_graph_create(3, 12, 1, NULL, &g, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.actual, 12);
  assert_null(g);

  assert_int_equal(fdy_synthetic_graph_create(3, 64, 7, NULL, &g, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_validate(g, &err), FDY_OK);
  assert_int_equal(fdy_graph_op_count(g), 3);
  fdy_tensor_id prev = {0};
  for (uint32_t i = 0; i < 3; i++) {
    fdy_op_info op;
    fdy_tensor_info w, out;
    assert_int_equal(fdy_graph_op(g, (fdy_op_id){i}, &op, &err), FDY_OK);
    assert_int_equal(op.kind, FDY_OP_CHECKSUM);
    assert_int_equal(op.params.checksum.passes, 7);
    assert_int_equal(op.read_count, i == 0 ? 1 : 2);
    assert_int_equal(fdy_graph_tensor(g, op.reads[0], &w, &err), FDY_OK);
    assert_int_equal(w.role, FDY_TENSOR_WEIGHT);
    assert_int_equal(w.dtype, FDY_DTYPE_U8);
    assert_int_equal(w.bytes, 64);
    assert_int_equal(w.extent_count, 0); /* described, not bound */
    if (i > 0) {
      assert_int_equal(op.reads[1].v, prev.v);
    }
    assert_int_equal(op.write_count, 1);
    assert_int_equal(fdy_graph_tensor(g, op.writes[0], &out, &err), FDY_OK);
    assert_int_equal(out.dtype, FDY_DTYPE_U64);
    assert_int_equal(out.bytes, 8);
    prev = op.writes[0];
  }
  fdy_tensor_id result;
  assert_int_equal(fdy_synthetic_output(g, &result, &err), FDY_OK);
  assert_int_equal(result.v, prev.v);
  fdy_tensor_info info;
  assert_int_equal(fdy_graph_tensor(g, result, &info, &err), FDY_OK);
  assert_string_equal(info.name, "layer.2.out");
  fdy_graph_destroy(g);

  /* Bound to host memory: every weight has its extent. */
  static uint64_t words[2][8];
  const void *data[2] = {words[0], words[1]};
  assert_int_equal(fdy_synthetic_graph_create(2, 64, 1, data, &g, &err),
                   FDY_OK);
  fdy_tensor_info w;
  assert_int_equal(fdy_graph_find_tensor(g, "layer.1.weight", &result, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_tensor(g, result, &w, &err), FDY_OK);
  assert_int_equal(w.extent_count, 1);
  assert_ptr_equal(w.extents[0].host, words[1]);
  fdy_graph_destroy(g);
}

/* A budget of N slots streams every weight through N slots, with no host
 * wait in the step but the one after the result's copy; a budget that holds
 * every weight keeps them all resident (why --layers must exceed the
 * buffer counts). */
static void test_chain_plans(void **state) {
  (void)state;
  const uint32_t layers = 6;
  const uint64_t weight = 1000, slot = 1024; /* aligned to 256 */
  fdy_graph *g = NULL;
  fdy_error err;
  assert_int_equal(
      fdy_synthetic_graph_create(layers, weight, 1, NULL, &g, &err), FDY_OK);
  fdy_tensor_id result;
  assert_int_equal(fdy_synthetic_output(g, &result, &err), FDY_OK);
  for (uint32_t n = 1; n <= 3; n++) {
    fdy_planner_options po = {.weight_budget = n * slot, .buffers = n};
    fdy_plan *plan = NULL;
    fdy_plan_summary m;
    assert_int_equal(fdy_synthetic_plan_build(g, &po, &plan, &err), FDY_OK);
    assert_int_equal(fdy_plan_validate(plan, &m, &err), FDY_OK);
    assert_int_equal(m.class_bytes[FDY_BUFFER_RESIDENT], 0);
    assert_int_equal(m.class_bytes[FDY_BUFFER_SLOT], n * slot);
    assert_int_equal(m.peak_weight_bytes, n * slot);
    assert_int_equal(m.setup_transfer_bytes, 0);
    assert_int_equal(m.step_transfer_bytes, layers * weight);
    int64_t step = fdy_plan_find_section(plan, FDY_BENCH_STEP);
    assert_int_equal(step, 1);
    const fdy_section *sec = fdy_plan_section(plan, (size_t)step);
    size_t prefetches = 0, launches = 0, host_waits = 0, outputs = 0;
    for (size_t i = sec->first; i < sec->first + sec->count; i++) {
      const fdy_command *c = fdy_plan_command(plan, i);
      prefetches += c->kind == FDY_CMD_PREFETCH;
      launches += c->kind == FDY_CMD_LAUNCH;
      if (c->kind == FDY_CMD_WAIT && c->u.wait.host) {
        host_waits++;
        assert_int_equal(i, sec->first + sec->count - 1);
      }
      if (c->kind == FDY_CMD_COPY_OUTPUT) {
        outputs++;
        assert_int_equal(c->u.copy.tensor.v, result.v);
      }
    }
    assert_int_equal(prefetches, layers);
    assert_int_equal(launches, layers);
    assert_int_equal(host_waits, 1);
    assert_int_equal(outputs, 1);
    fdy_plan_destroy(plan);
  }
  fdy_planner_options all = {.weight_budget = layers * slot, .buffers = 3};
  fdy_plan *plan = NULL;
  fdy_plan_summary m;
  assert_int_equal(fdy_synthetic_plan_build(g, &all, &plan, &err), FDY_OK);
  assert_int_equal(fdy_plan_validate(plan, &m, &err), FDY_OK);
  assert_int_equal(m.class_bytes[FDY_BUFFER_RESIDENT], layers * slot);
  assert_int_equal(m.step_transfer_bytes, 0);
  fdy_plan_destroy(plan);
  assert_int_equal(fdy_synthetic_plan_build(NULL, &all, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_graph_destroy(g);
}

/* ---- runs on the CPU backend
 * ----------------------------------------------------- */

/* The state of a run test: small_options writing a report (and, with
 * traced_setup, a trace) into a fresh temporary directory, no hooks yet. */
typedef struct run_fixture {
  tmpdir dir;
  char *report, *trace;
  fdy_bench_options o;
  bench_hooks hooks;
  fault_hooks fault;
  fdy_bench_written written;
  fdy_error err;
} run_fixture;

static int run_setup(void **state) {
  run_fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  tmpdir_make(&f->dir);
  f->report = tmp_file(&f->dir, "r.json");
  f->trace = tmp_file(&f->dir, "t.json");
  small_options(&f->o);
  f->o.report_path = f->report;
  *state = f;
  return 0;
}

static int traced_setup(void **state) {
  run_setup(state);
  run_fixture *f = *state;
  f->o.trace_path = f->trace;
  return 0;
}

static int run_teardown(void **state) {
  run_fixture *f = *state;
  free(f->report);
  free(f->trace);
  tmpdir_remove(&f->dir);
  free(f);
  return 0;
}

static fdy_status run(run_fixture *f) {
  return bench_run_hooked(&f->o, &f->hooks, &f->written, &f->err);
}

/* Loads the report of a failed run and checks its status, error kind and,
 * unless NULL, stage. The caller releases it. */
static json_t *failed_report(const char *path, const char *kind,
                             const char *stage) {
  json_t *r = load_json(path);
  assert_string_equal(jget_str(r, "status"), "failed");
  json_t *e = json_object_get(r, "error");
  assert_string_equal(jget_str(e, "kind"), kind);
  if (stage) {
    assert_string_equal(jget_str(e, "stage"), stage);
  }
  return r;
}

static void test_cpu_run_report(void **state) {
  run_fixture *f = *state;
  char *argv[] = {"bench", "--backend", "cpu"};
  f->o.argc = 3;
  f->o.argv = argv;
  FILE *console = tmpfile();
  assert_non_null(console);
  f->o.console = console;
  fdy_status st = run(f);
  if (st != FDY_OK) {
    print_error("run failed: %s\n", f->err.message);
  }
  assert_int_equal(st, FDY_OK);
  assert_true(f->written.report && f->written.trace);
  assert_true(f->hooks.payload_generated);
  assert_true(ftell(console) > 0);
  fclose(console);

  json_t *r = load_json(f->report);
  assert_string_equal(jget_str(r, "format"), FDY_BENCH_REPORT_FORMAT);
  assert_int_equal(json_integer_value(json_object_get(r, "version")),
                   FDY_BENCH_REPORT_VERSION);
  assert_string_equal(jget_str(r, "status"), "ok");
  assert_true(json_is_null(json_object_get(r, "error")));
  json_t *build = json_object_get(r, "build");
  assert_non_null(jget_str(build, "git_commit"));
  assert_true(json_is_boolean(json_object_get(build, "git_dirty")));
  assert_non_null(jget_str(build, "compiler"));
  json_t *env = json_object_get(r, "environment");
  assert_string_equal(jget_str(env, "backend"), "cpu");
  assert_true(json_integer_value(json_object_get(json_object_get(env, "host"),
                                                 "cpu_count")) > 0);
  json_t *argv_json = json_object_get(json_object_get(r, "invocation"), "argv");
  assert_int_equal(json_array_size(argv_json), 3);
  json_t *params = json_object_get(r, "parameters");
  assert_int_equal(json_integer_value(json_object_get(params, "layers")), 5);
  assert_string_equal(jget_str(params, "seed"), "0");

  json_t *execs = json_object_get(r, "executions");
  assert_int_equal(json_array_size(execs), (1 + 3) * 3);
  size_t i;
  json_t *x;
  json_array_foreach(execs, i, x) {
    assert_string_equal(jget_str(x, "outcome"), "ok");
    assert_string_equal(jget_str(x, "checksum"), "ok");
    assert_string_equal(jget_str(x, "phase"), i < 3 ? "warmup" : "measured");
    json_int_t round = json_integer_value(json_object_get(x, "round"));
    json_int_t pos = json_integer_value(json_object_get(x, "position"));
    assert_int_equal(json_integer_value(json_object_get(x, "config")),
                     (round + pos) % 3); /* rotating order */
    assert_true(json_integer_value(json_object_get(x, "elapsed_ns")) > 0);
    assert_true(json_is_integer(json_object_get(x, "device_copy_ns")));
  }
  json_t *stats = json_object_get(r, "statistics");
  json_t *configs = json_object_get(stats, "configurations");
  assert_int_equal(json_array_size(configs), 3);
  json_array_foreach(configs, i, x) {
    double median = json_real_value(json_object_get(x, "median_ms"));
    json_t *ci = json_object_get(x, "median_ci_ms");
    assert_true(json_real_value(json_object_get(ci, "low")) <= median);
    assert_true(json_real_value(json_object_get(ci, "high")) >= median);
    assert_true(json_real_value(json_object_get(x, "fraction_of_h2d_ceiling")) >
                0);
  }
  assert_true(json_real_value(json_object_get(
                  json_object_get(json_array_get(configs, 0), "speedup"),
                  "point")) == 1.0);
  json_t *ceil = json_object_get(json_object_get(stats, "ceilings"), "h2d");
  assert_true(json_real_value(json_object_get(ceil, "bytes_per_second")) > 0);
  json_t *overlap = json_object_get(stats, "overlap");
  assert_true(json_is_object(overlap));
  assert_true(json_real_value(json_object_get(overlap, "ideal_speedup")) >=
              1.0);
  json_t *mem = json_object_get(r, "memory");
  assert_int_equal(
      json_integer_value(json_object_get(mem, "host_payload_bytes")),
      5 * FDY_MIB);
  assert_int_equal(
      json_integer_value(json_object_get(mem, "device_slot_peak_bytes")),
      3 * FDY_MIB);
  assert_int_equal(
      json_integer_value(json_object_get(mem, "device_slot_total_bytes")),
      6 * FDY_MIB);
  assert_true(json_array_size(json_object_get(r, "limitations")) > 0);
  json_t *plans = json_object_get(r, "plans");
  assert_int_equal(json_array_size(plans), 3);
  json_array_foreach(plans, i, x) {
    json_int_t buffers = json_integer_value(json_object_get(x, "buffers"));
    assert_int_equal(json_integer_value(json_object_get(x, "slots")), buffers);
    assert_int_equal(json_integer_value(json_object_get(x, "peak_bytes")),
                     buffers * FDY_MIB);
    assert_int_equal(json_integer_value(json_object_get(x, "transfer_bytes")),
                     5 * FDY_MIB);
    assert_true(json_integer_value(json_object_get(x, "step_commands")) > 0);
    json_t *setup = json_object_get(x, "setup");
    assert_true(json_is_object(setup));
    assert_true(json_integer_value(json_object_get(setup, "create_ns")) > 0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(setup, "device_bytes"), "slot")),
                     buffers * FDY_MIB);
    assert_int_equal(
        json_integer_value(json_object_get(setup, "registered_bytes")), 0);
  }
  json_array_foreach(execs, i, x) {
    json_int_t buffers = json_integer_value(json_object_get(x, "buffers"));
    assert_int_equal(json_integer_value(json_object_get(x, "peak_slot_bytes")),
                     buffers * FDY_MIB);
  }
  json_decref(r);

  json_t *tr = load_json(f->trace);
  json_t *events = json_object_get(tr, "traceEvents");
  bool copy = false, compute = false, result = false;
  json_array_foreach(events, i, x) {
    const char *ph = jget_str(x, "ph");
    json_int_t tid = json_integer_value(json_object_get(x, "tid"));
    copy |= strcmp(ph, "X") == 0 && tid == 2;
    compute |= strcmp(ph, "X") == 0 && tid == 3;
    result |= strcmp(ph, "X") == 0 && tid == 1 &&
              strcmp(jget_str(x, "name"), "copy_output layer.4.out") == 0;
  }
  assert_true(copy && compute && result);
  json_decref(tr);
}

static void test_budget_refused_before_payload(void **state) {
  run_fixture *f = *state;
  /* the 1 + 2 + 3 slots of 1 MiB of the three executors do not fit */
  f->o.cpu_memory_bytes = 2 * FDY_MIB;
  assert_int_equal(run(f), FDY_ERR_BUDGET);
  assert_int_equal(f->err.expected, 2 * FDY_MIB);
  assert_int_equal(f->err.actual, 6 * FDY_MIB);
  assert_false(f->hooks.payload_generated);
  json_t *r = failed_report(f->report, "budget", "device_limits");
  json_t *e = json_object_get(r, "error");
  assert_true(json_is_false(json_object_get(e, "payload_generated")));
  assert_int_equal(json_array_size(json_object_get(r, "executions")), 0);
  assert_true(json_is_null(json_object_get(r, "statistics")));
  json_decref(r);

  /* A slot larger than the whole memory (its maximum allocation): refused
   * the same way. */
  small_options(&f->o);
  f->o.cpu_memory_bytes = FDY_MIB / 2;
  f->hooks.payload_generated = false;
  assert_int_equal(run(f), FDY_ERR_BUDGET);
  assert_int_equal(f->err.expected, FDY_MIB / 2);
  assert_int_equal(f->err.actual, FDY_MIB);
  assert_false(f->hooks.payload_generated);
}

/* A payload beyond the host's physical memory: refused once the device
 * limits pass, before the payload exists. */
static void test_host_memory_refused_before_payload(void **state) {
  run_fixture *f = *state;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) {
    skip(); /* the host's memory is unknown: nothing is checked */
  }
  f->o.layers = 1u << 30; /* 1 PiB of 1 MiB layers through one slot */
  f->o.buffer_count = 1;
  assert_int_equal(run(f), FDY_ERR_BUDGET);
  assert_false(f->hooks.payload_generated);
  assert_int_equal(f->err.expected, (uint64_t)pages * (uint64_t)page);
  /* cpu: the payload, the slot and the ceiling's slot-sized buffer */
  assert_int_equal(f->err.actual, ((uint64_t)1 << 50) + 2 * FDY_MIB);
  json_t *r = failed_report(f->report, "budget", "host_limits");
  assert_true(json_is_false(
      json_object_get(json_object_get(r, "error"), "payload_generated")));
  assert_int_equal(json_integer_value(json_object_get(
                       json_object_get(r, "memory"), "host_payload_bytes")),
                   0);
  json_decref(r);
}

static void test_checksum_failure_report(void **state) {
  run_fixture *f = *state;
  f->hooks = (bench_hooks){.corrupt = true, .corrupt_sequence = 4};
  assert_int_equal(run(f), FDY_ERR_CHECKSUM);
  assert_int_equal(f->err.ids[0], 4); /* the last layer: the chain's result */
  assert_int_equal(f->err.command_index, 4);
  assert_int_not_equal(f->err.expected, f->err.actual);
  json_t *r = failed_report(f->report, "checksum", "rounds");
  json_t *e = json_object_get(r, "error");
  assert_int_equal(json_integer_value(json_object_get(e, "sequence")), 4);
  assert_int_equal(
      json_integer_value(json_array_get(json_object_get(e, "ids"), 0)), 4);
  assert_true(json_is_string(json_object_get(e, "expected")));
  json_t *execs = json_object_get(r, "executions");
  assert_int_equal(json_array_size(execs), 5);
  json_t *last = json_array_get(execs, 4);
  assert_string_equal(jget_str(last, "checksum"), "mismatch");
  assert_string_equal(jget_str(last, "outcome"), "checksum");
  assert_string_equal(jget_str(json_array_get(execs, 3), "checksum"), "ok");
  assert_true(json_is_null(json_object_get(r, "statistics")));
  json_decref(r);
  json_t *tr = load_json(f->trace); /* the trace of what ran is still written */
  assert_true(json_array_size(json_object_get(tr, "traceEvents")) > 0);
  json_decref(tr);
}

static off_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? st.st_size : -1;
}

/* The sweep's run: 3 layers through 1 and 2 buffers, one measured round. */
static void sweep_options(run_fixture *f) {
  f->o.layers = 3;
  f->o.buffer_count = 2;
  f->o.iterations = 1;
  f->o.warmup = 0;
  f->o.bootstrap_resamples = 10;
}

/* Checks the report of a run failed by an injected fault (call `call`, entry
 * op) and returns its stage (static). */
static const char *check_fault_report(run_fixture *f, uint64_t call,
                                      const char *op) {
  json_t *r = failed_report(f->report, "backend", NULL);
  json_t *e = json_object_get(r, "error");
  assert_string_equal(jget_str(e, "backend_op"), op);
  static const char *const stages[] = {"backend", "executors", "rounds",
                                       "teardown"};
  const char *stage = jget_str(e, "stage"), *found = NULL;
  for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
    found = strcmp(stage, stages[i]) == 0 ? stages[i] : found;
  }
  if (!found) {
    print_error("call %llu (%s): stage %s\n", (unsigned long long)call, op,
                stage);
  }
  assert_non_null(found);
  json_t *execs = json_object_get(r, "executions");
  size_t count = json_array_size(execs);
  if (strcmp(found, "rounds") == 0) {
    /* the failed execution is the last one; those before it verified */
    assert_int_equal(json_integer_value(json_object_get(e, "sequence")),
                     count - 1);
    size_t i;
    json_t *x;
    json_array_foreach(execs, i, x) {
      assert_string_equal(jget_str(x, "outcome"),
                          i + 1 < count ? "ok" : "backend");
      assert_string_equal(jget_str(x, "checksum"),
                          i + 1 < count ? "ok" : "not_checked");
    }
    assert_non_null(strstr(f->err.message, "execution "));
    assert_true(file_size(f->trace) > 0); /* what ran is traced */
  } else {
    assert_true(json_is_null(json_object_get(e, "sequence")));
    assert_int_equal(count, strcmp(found, "teardown") == 0 ? 2 : 0);
  }
  assert_true(json_is_null(json_object_get(r, "statistics")));
  json_decref(r);
  return found;
}

/* Every counted backend call of a small run, failed before and after the
 * backend did its work, through the fault wrapper: each run fails with the
 * injected error naming the entry, at a stage that says where, and writes
 * its report (sanitizer builds also prove that nothing leaks), except the
 * drain of each executor's destroy after its checked finish. */
static void test_fault_at_every_call(void **state) {
  run_fixture *f = *state;
  sweep_options(f);
  fdy_fault_options fault = {0};
  fault_hooks_use(&f->hooks, &f->fault, &fault);
  assert_int_equal(run(f), FDY_OK);
  uint64_t calls = f->fault.stats.calls;
  assert_true(calls > 20);
  assert_false(f->fault.stats.fired);
  unlink(f->report);
  unlink(f->trace);
  size_t per_stage[4] = {0}, ignored = 0;
  for (int mode = 0; mode < 2; mode++) {
    for (uint64_t call = 1; call <= calls; call++) {
      fault = (fdy_fault_options){.fail_at_call = call,
                                  .mode = mode ? FDY_FAULT_AFTER_SUBMIT
                                               : FDY_FAULT_BEFORE_SUBMIT};
      f->fault.stats = (fdy_fault_stats){0};
      fdy_status st = run(f);
      if (st == FDY_OK && f->fault.stats.fired) {
        /* the drain of fdy_executor_destroy after a successful finish,
         * whose failure is ignored by contract (foundry/runtime.h) */
        assert_string_equal(f->fault.stats.fired_op, "drain");
        ignored++;
        unlink(f->report);
        unlink(f->trace);
        continue;
      }
      if (st != FDY_ERR_BACKEND || !f->fault.stats.fired) {
        print_error("call %llu (mode %d): %s\n", (unsigned long long)call, mode,
                    f->err.message);
      }
      assert_int_equal(st, FDY_ERR_BACKEND);
      assert_true(f->fault.stats.fired);
      assert_string_equal(f->err.backend_op, f->fault.stats.fired_op);
      const char *stage = check_fault_report(f, call, f->fault.stats.fired_op);
      per_stage[strcmp(stage, "backend") == 0     ? 0
                : strcmp(stage, "executors") == 0 ? 1
                : strcmp(stage, "rounds") == 0    ? 2
                                                  : 3]++;
      unlink(f->report);
      unlink(f->trace);
    }
  }
  for (int i = 0; i < 4; i++) {
    assert_true(per_stage[i] > 0); /* every stage was reached */
  }
  assert_int_equal(ignored, 2 * 2); /* one per executor and mode */
}

/* A launch failure whose cleanup drain fails too: the first failure is the
 * error, the drain's is its cleanup, in the result and the report. */
static void test_fault_with_failing_cleanup(void **state) {
  run_fixture *f = *state;
  sweep_options(f);
  fdy_fault_options fault = {.fail_drain = true};
  fault_hooks_use(&f->hooks, &f->fault, &fault);
  /* the first call that is a launch */
  for (uint64_t call = 1;
       strcmp(f->fault.stats.fired_op ? f->fault.stats.fired_op : "",
              "launch") != 0;
       call++) {
    unlink(f->report);
    unlink(f->trace);
    fault.fail_at_call = call;
    assert_int_not_equal(run(f), FDY_OK);
    assert_true(call < 1000);
  }
  assert_int_equal(f->err.kind, FDY_ERR_BACKEND);
  assert_string_equal(f->err.backend_op, "launch");
  assert_int_equal(f->err.cleanup_kind, FDY_ERR_BACKEND);
  json_t *r = failed_report(f->report, "backend", "rounds");
  json_t *cleanup = json_object_get(json_object_get(r, "error"), "cleanup");
  assert_string_equal(jget_str(cleanup, "kind"), "backend");
  json_decref(r);
}

/* A trace path taken by someone else during the run: the run fails, the
 * report says so at the documented stage "outputs" and names no trace (it
 * was never written), the other file is left alone. */
static void test_trace_taken_during_run(void **state) {
  run_fixture *f = *state;
  f->hooks.create_before_outputs = f->trace;
  assert_int_equal(run(f), FDY_ERR_EXISTS);
  assert_string_equal(f->err.name, f->trace);
  assert_true(f->written.report);
  assert_false(f->written.trace);
  json_t *r = failed_report(f->report, "exists", "outputs");
  assert_true(json_is_null(json_object_get(r, "trace")));
  assert_string_equal(jget_str(json_object_get(r, "parameters"), "trace_path"),
                      f->trace);
  json_decref(r);
  assert_int_equal(file_size(f->trace), 0);
}

/* A report path taken during the run: the run fails and the trace it wrote
 * just before is removed again, so no orphan trace is left. */
static void test_report_taken_during_run(void **state) {
  run_fixture *f = *state;
  f->hooks.create_before_outputs = f->report;
  assert_int_equal(run(f), FDY_ERR_EXISTS);
  assert_string_equal(f->err.name, f->report);
  assert_false(f->written.report); /* the file there is not this run's */
  assert_false(f->written.trace);
  assert_int_equal(file_size(f->report), 0);
  assert_int_equal(access(f->trace, F_OK), -1);
}

/* A directory where no file can be created: 0555 for a user, /sys for root
 * (who may write anywhere else); NULL when neither refuses. */
static const char *unwritable_dir(const tmpdir *t, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/ro", t->path);
  assert_int_equal(mkdir(buf, 0555), 0);
  char probe[256];
  snprintf(probe, sizeof probe, "%s/probe", buf);
  FILE *f = fopen(probe, "wx");
  if (!f) {
    return buf;
  }
  fclose(f);
  unlink(probe);
  f = fopen("/sys/foundry-bench-probe", "wx");
  if (f) {
    fclose(f);
    unlink("/sys/foundry-bench-probe");
    return NULL;
  }
  return errno == ENOENT ? NULL : "/sys";
}

/* The outputs are proven writable before any work: an unwritable directory
 * (report or trace) fails the check and the run before the payload. A legal
 * name of 250 bytes works (its temporary fits NAME_MAX); one above NAME_MAX
 * is refused up front. */
static void test_outputs_checked_before_work(void **state) {
  run_fixture *f = *state;
  char ro[128], report[300], trace[300];
  const char *dir = unwritable_dir(&f->dir, ro, sizeof ro);
  if (dir) {
    snprintf(report, sizeof report, "%s/r.json", dir);
    f->o.report_path = report;
    assert_int_equal(check(&f->o, &f->err), FDY_ERR_IO);
    assert_string_equal(f->err.name, report);
    assert_int_equal(run(f), FDY_ERR_IO);
    assert_false(f->hooks.payload_generated);
    f->o.report_path = f->report;
    snprintf(trace, sizeof trace, "%s/t.json", dir);
    f->o.trace_path = trace;
    assert_int_equal(run(f), FDY_ERR_IO);
    assert_string_equal(f->err.name, trace);
    assert_false(f->hooks.payload_generated);
    assert_int_equal(access(f->report, F_OK), -1);
    /* the overhead benchmark's report is proven writable the same way */
    fdy_bench_overhead_options ov;
    fdy_bench_overhead_options_default(&ov);
    snprintf(report, sizeof report, "%s/o.json", dir);
    ov.report_path = report;
    assert_int_equal(fdy_bench_overhead_check_options(&ov, &f->err),
                     FDY_ERR_IO);
    assert_string_equal(f->err.name, report);
  } else {
    print_message("no unwritable directory here; skipping that check\n");
  }
  f->o.trace_path = NULL;
  int n = snprintf(report, sizeof report, "%s/", f->dir.path);
  memset(report + n, 'r', 256);
  report[n + 256] = '\0';
  f->o.report_path = report;
  assert_int_equal(check(&f->o, &f->err), FDY_ERR_INVALID_ARGUMENT);
  report[n + 250] = '\0';
  f->o.buffer_count = 1;
  f->o.iterations = 1;
  assert_int_equal(run(f), FDY_OK);
  json_decref(load_json(report));
}

static void test_staged_on_cpu_refused(void **state) {
  (void)state;
  fdy_bench_options o;
  small_options(&o);
  o.host_mode = FDY_CUDA_HOST_STAGED;
  fdy_error err;
  assert_int_equal(bench_run_hooked(&o, NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(err.message, "cuda backend only"));
}

/* The same refusal when auto chooses the cpu backend, before any payload. */
static void test_staged_refused_when_auto_chooses_cpu(void **state) {
  run_fixture *f = *state;
  if (fdy_cuda_device_count() > 0) {
    skip();
  }
  f->o.backend = FDY_BENCH_BACKEND_AUTO;
  f->o.host_mode = FDY_CUDA_HOST_STAGED;
  assert_int_equal(run(f), FDY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(f->err.message, "auto chose cpu"));
  assert_false(f->hooks.payload_generated);
  json_t *r = failed_report(f->report, "invalid_argument", "backend");
  assert_string_equal(jget_str(json_object_get(r, "environment"), "backend"),
                      "cpu");
  json_decref(r);
}

static void test_unavailable_cuda_fails_cleanly(void **state) {
  run_fixture *f = *state;
  if (fdy_cuda_device_count() > 0) {
    skip();
  }
  f->o.backend = FDY_BENCH_BACKEND_CUDA;
  f->o.cpu_memory_bytes = 0;
  assert_int_not_equal(run(f), FDY_OK);
  assert_false(f->hooks.payload_generated);
  json_t *r = load_json(f->report);
  assert_string_equal(jget_str(r, "status"), "failed");
  assert_string_equal(jget_str(json_object_get(r, "error"), "stage"),
                      "backend");
  json_decref(r);
}

/* ---- the overhead benchmark
 * ------------------------------------------------------ */

static void test_overhead_options(void **state) {
  (void)state;
  fdy_bench_overhead_options o;
  fdy_error err;
  fdy_bench_overhead_options_default(&o);
  assert_int_equal(o.ops, 1000);
  assert_int_equal(o.op_bytes, 4096);
  fdy_error_clear(&err);
  assert_int_equal(fdy_bench_overhead_check_options(&o, &err), FDY_OK);
  o.ops = FDY_BENCH_OVERHEAD_SLOTS;
  assert_int_equal(fdy_bench_overhead_check_options(&o, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "--ops");
  fdy_bench_overhead_options_default(&o);
  o.op_bytes = 12;
  assert_int_equal(fdy_bench_overhead_check_options(&o, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "--op-bytes");
  fdy_bench_overhead_options_default(&o);
  o.runs = 0;
  assert_int_equal(fdy_bench_overhead_check_options(&o, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "--runs");
  fdy_bench_overhead_options_default(&o);
  o.warmup = UINT32_MAX;
  assert_int_equal(fdy_bench_overhead_check_options(&o, &err),
                   FDY_ERR_OVERFLOW);
  fdy_bench_overhead_options_default(&o);
  o.ops = UINT32_MAX;
  o.op_bytes = UINT64_MAX - 7;
  assert_int_equal(fdy_bench_overhead_check_options(&o, &err),
                   FDY_ERR_OVERFLOW);
  fdy_bench_overhead_options_default(&o);
  o.report_path = "/nonexistent-foundry-dir/o.json";
  assert_int_equal(fdy_bench_overhead_check_options(&o, &err),
                   FDY_ERR_NOT_FOUND);
  assert_int_equal(fdy_bench_overhead_check_options(NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

/* A small overhead run: four rows (fake and cpu, resident and streamed),
 * cpu verified, in the console and the report. */
static void test_overhead_run(void **state) {
  run_fixture *f = *state;
  fdy_bench_overhead_options o;
  fdy_bench_overhead_options_default(&o);
  o.ops = 20;
  o.op_bytes = 512;
  o.runs = 3;
  o.warmup = 1;
  o.report_path = f->report;
  FILE *console = tmpfile();
  assert_non_null(console);
  o.console = console;
  fdy_error err;
  fdy_bench_written written = {false, true};
  fdy_status st = fdy_bench_overhead(&o, &written, &err);
  if (st != FDY_OK) {
    print_error("overhead failed: %s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
  assert_true(written.report);
  assert_false(written.trace);
  assert_true(ftell(console) > 0);
  fclose(console);
  json_t *r = load_json(f->report);
  assert_string_equal(jget_str(r, "format"), FDY_BENCH_OVERHEAD_FORMAT);
  assert_string_equal(jget_str(r, "status"), "ok");
  json_t *results = json_object_get(r, "results");
  assert_int_equal(json_array_size(results), 4);
  size_t i;
  json_t *x;
  json_array_foreach(results, i, x) {
    bool cpu = strcmp(jget_str(x, "backend"), "cpu") == 0;
    bool streamed = strcmp(jget_str(x, "plan"), "streamed") == 0;
    assert_true(json_is_true(json_object_get(x, "verified")) == cpu);
    assert_int_equal(json_integer_value(json_object_get(x, "slots")),
                     streamed ? FDY_BENCH_OVERHEAD_SLOTS : 0);
    assert_int_equal(
        json_integer_value(json_object_get(x, "step_transfer_bytes")),
        streamed ? 20 * 512 : 0);
    json_t *run = json_object_get(x, "run");
    json_t *cycle = json_object_get(x, "create_run_destroy");
    assert_true(json_real_value(json_object_get(run, "median_ns")) > 0);
    assert_true(json_real_value(json_object_get(run, "per_op_ns")) > 0);
    assert_true(json_real_value(json_object_get(cycle, "median_ns")) > 0);
  }
  json_decref(r);
  /* the report is never overwritten, and the one there is not this run's */
  assert_int_equal(fdy_bench_overhead(&o, &written, &err), FDY_ERR_EXISTS);
  assert_false(written.report);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_pass),
      cmocka_unit_test(test_zero_values_refused),
      cmocka_unit_test(test_resamples_limit),
      cmocka_unit_test(test_bad_buffer_lists),
      cmocka_unit_test(test_layers_must_exceed_buffers),
      cmocka_unit_test(test_overflowing_sizes),
      cmocka_unit_test(test_other_values_refused),
      cmocka_unit_test(test_output_paths),
      cmocka_unit_test(test_median_mean_stddev),
      cmocka_unit_test(test_percentile_interpolation),
      cmocka_unit_test(test_splitmix64_known_outputs),
      cmocka_unit_test(test_bootstrap),
      cmocka_unit_test(test_paired_speedup),
      cmocka_unit_test(test_fill_layer),
      cmocka_unit_test(test_chain_graph),
      cmocka_unit_test(test_chain_plans),
      cmocka_unit_test_setup_teardown(test_cpu_run_report, traced_setup,
                                      run_teardown),
      cmocka_unit_test_setup_teardown(test_budget_refused_before_payload,
                                      run_setup, run_teardown),
      cmocka_unit_test_setup_teardown(test_host_memory_refused_before_payload,
                                      run_setup, run_teardown),
      cmocka_unit_test_setup_teardown(test_checksum_failure_report,
                                      traced_setup, run_teardown),
      cmocka_unit_test_setup_teardown(test_fault_at_every_call, traced_setup,
                                      run_teardown),
      cmocka_unit_test_setup_teardown(test_fault_with_failing_cleanup,
                                      traced_setup, run_teardown),
      cmocka_unit_test_setup_teardown(test_trace_taken_during_run, traced_setup,
                                      run_teardown),
      cmocka_unit_test_setup_teardown(test_report_taken_during_run,
                                      traced_setup, run_teardown),
      cmocka_unit_test_setup_teardown(test_outputs_checked_before_work,
                                      run_setup, run_teardown),
      cmocka_unit_test(test_staged_on_cpu_refused),
      cmocka_unit_test_setup_teardown(test_staged_refused_when_auto_chooses_cpu,
                                      run_setup, run_teardown),
      cmocka_unit_test_setup_teardown(test_unavailable_cuda_fails_cleanly,
                                      run_setup, run_teardown),
      cmocka_unit_test(test_overhead_options),
      cmocka_unit_test_setup_teardown(test_overhead_run, run_setup,
                                      run_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
