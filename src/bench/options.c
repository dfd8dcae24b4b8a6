/* Options of `foundry bench` and `foundry bench --overhead`: defaults,
 * names and every check that needs no backend (fdy_bench_check_options,
 * fdy_bench_overhead_check_options), in the order bench.h documents. */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"
#include "foundry/new_file.h"

const char *fdy_bench_backend_name(fdy_bench_backend backend) {
  switch (backend) {
  case FDY_BENCH_BACKEND_AUTO:
    return "auto";
  case FDY_BENCH_BACKEND_CPU:
    return "cpu";
  case FDY_BENCH_BACKEND_CUDA:
    return "cuda";
  }
  return "unknown";
}

void fdy_bench_options_default(fdy_bench_options *options) {
  *options = (fdy_bench_options){
      .backend = FDY_BENCH_BACKEND_AUTO,
      .layers = 48,
      .weight_mib = 64,
      .iterations = 10,
      .warmup = 2,
      .bootstrap_resamples = 10000,
      .seed = 0,
      .buffer_count = 3,
      .buffers = {1, 2, 3},
      .compute_passes = 1,
      .host_mode = FDY_HOST_REGISTERED,
      .cuda_device = 0,
  };
}

/* The directory part of path ("." when it has none). *out is malloc'd. */
static fdy_status directory_of(const char *path, char **out, fdy_error *err) {
  const char *slash = strrchr(path, '/');
  size_t len = slash ? (size_t)(slash - path) : 1;
  char *dir = malloc(len + 1);
  if (!dir) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (!slash) {
    memcpy(dir, ".", 2);
  } else if (len == 0) {
    memcpy(dir, "/", 2);
  } else {
    memcpy(dir, path, len);
    dir[len] = '\0';
  }
  *out = dir;
  return FDY_OK;
}

/* Canonical "directory/basename" of a path whose directory exists, so that
 * "a/x.json" and "./a/x.json" compare equal. *out is malloc'd. */
static fdy_status canonical_path(const char *path, char **out, fdy_error *err) {
  char *dir = NULL;
  fdy_status st = directory_of(path, &dir, err);
  if (st != FDY_OK) {
    return st;
  }
  char *real = realpath(dir, NULL);
  free(dir);
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!real) {
    *out = strdup(path);
  } else {
    size_t n = strlen(real) + strlen(base) + 2;
    *out = malloc(n);
    if (*out) {
      snprintf(*out, n, "%s/%s", real, base);
    }
    free(real);
  }
  return *out ? FDY_OK
              : fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
}

fdy_status bench_check_output(const char *flag, const char *path,
                              fdy_error *err) {
  fdy_status st = fdy_new_file_check(path, err);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "%s", flag);
  }
  return st;
}

fdy_status bench_check_distinct(const char *report_path, const char *trace_path,
                                fdy_error *err) {
  char *a = NULL, *b = NULL;
  fdy_status st = canonical_path(report_path, &a, err);
  if (st == FDY_OK) {
    st = canonical_path(trace_path, &b, err);
  }
  bool same = st == FDY_OK &&
              (strcmp(report_path, trace_path) == 0 || strcmp(a, b) == 0);
  free(a);
  free(b);
  if (st != FDY_OK) {
    return st;
  }
  if (same) {
    return fdy_error_setf(err, FDY_ERR_INVALID_ARGUMENT, trace_path, 0, 0,
                          "--trace and --report name the same file '%s'",
                          trace_path);
  }
  return FDY_OK;
}

static fdy_status check_paths(const fdy_bench_options *o, fdy_error *err) {
  if (o->trace_path && !o->report_path) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--trace requires --report (the trace belongs to a "
                         "report)");
  }
  if (o->report_path && o->trace_path) {
    fdy_status st = bench_check_distinct(o->report_path, o->trace_path, err);
    if (st != FDY_OK) {
      return st;
    }
  }
  if (o->report_path) {
    fdy_status st = bench_check_output("--report", o->report_path, err);
    if (st != FDY_OK) {
      return st;
    }
  }
  if (o->trace_path) {
    return bench_check_output("--trace", o->trace_path, err);
  }
  return FDY_OK;
}

static fdy_status check_buffers(const fdy_bench_options *o, fdy_error *err) {
  if (o->buffer_count == 0 || o->buffer_count > FDY_BENCH_MAX_CONFIGS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--buffers needs 1 to %d buffer counts, got %" PRIu32,
                         FDY_BENCH_MAX_CONFIGS, o->buffer_count);
  }
  for (uint32_t i = 0; i < o->buffer_count; i++) {
    if (o->buffers[i] == 0 || o->buffers[i] > FDY_BENCH_MAX_BUFFERS) {
      fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                    "--buffers: each buffer count must be from 1 to %d, "
                    "got %" PRIu32,
                    FDY_BENCH_MAX_BUFFERS, o->buffers[i]);
      if (err) {
        err->ids[0] = i;
        err->actual = o->buffers[i];
      }
      return FDY_ERR_INVALID_ARGUMENT;
    }
    for (uint32_t j = 0; j < i; j++) {
      if (o->buffers[j] == o->buffers[i]) {
        fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                      "--buffers: buffer count %" PRIu32 " appears twice",
                      o->buffers[i]);
        if (err) {
          err->ids[0] = j;
          err->ids[1] = i;
        }
        return FDY_ERR_INVALID_ARGUMENT;
      }
    }
  }
  return FDY_OK;
}

/* Payload bytes and the slots of all configurations (live at once) fit 64
 * bits (and the payload a size_t). */
static fdy_status check_sizes(const fdy_bench_options *o, fdy_error *err) {
  uint64_t weight = 0, payload = 0, slot = 0, budget = 0;
  uint32_t slots = 0;
  for (uint32_t i = 0; i < o->buffer_count; i++) {
    slots += o->buffers[i];
  }
  if (fdy_mul_u64(o->weight_mib, FDY_MIB, &weight, NULL) != FDY_OK ||
      fdy_mul_u64(weight, o->layers, &payload, NULL) != FDY_OK ||
      payload > SIZE_MAX ||
      fdy_align_up(weight, BENCH_CHECK_ALIGNMENT, &slot, NULL) != FDY_OK ||
      fdy_mul_u64(slot, slots, &budget, NULL) != FDY_OK) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "%" PRIu32 " layers of %" PRIu64 " MiB (times %" PRIu32
                         " slots) overflow a 64-bit byte count",
                         o->layers, o->weight_mib, slots);
  }
  return FDY_OK;
}

/* More layers than the largest buffer count: the planner keeps every weight
 * resident when the slots could hold them all, and then nothing streams. */
static fdy_status check_layers_stream(const fdy_bench_options *o,
                                      fdy_error *err) {
  uint32_t most = 0;
  for (uint32_t i = 0; i < o->buffer_count; i++) {
    most = o->buffers[i] > most ? o->buffers[i] : most;
  }
  if (o->layers > most) {
    return FDY_OK;
  }
  fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                "--layers %" PRIu32 " must exceed every buffer count (the "
                "largest is %" PRIu32 "): with a slot for every layer the "
                "planner keeps all weights resident and nothing streams",
                o->layers, most);
  if (err) {
    snprintf(err->name, sizeof err->name, "--layers");
    err->expected = most;
    err->actual = o->layers;
  }
  return FDY_ERR_INVALID_ARGUMENT;
}

fdy_status fdy_bench_check_options(const fdy_bench_options *o, fdy_error *err) {
  if (!o) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "options are NULL");
  }
  struct {
    const char *flag;
    uint64_t value;
  } positive[] = {
      {"--layers", o->layers},
      {"--weight-mib", o->weight_mib},
      {"--iterations", o->iterations},
      {"--bootstrap-resamples", o->bootstrap_resamples},
      {"--compute-passes", o->compute_passes},
  };
  for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
    if (positive[i].value == 0) {
      fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "%s must be positive",
                    positive[i].flag);
      if (err) {
        snprintf(err->name, sizeof err->name, "%s", positive[i].flag);
      }
      return FDY_ERR_INVALID_ARGUMENT;
    }
  }
  if (o->bootstrap_resamples > FDY_BENCH_MAX_RESAMPLES) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "--bootstrap-resamples must be at most %u, got %" PRIu32,
                  FDY_BENCH_MAX_RESAMPLES, o->bootstrap_resamples);
    if (err) {
      err->expected = FDY_BENCH_MAX_RESAMPLES;
      err->actual = o->bootstrap_resamples;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  fdy_status st = check_buffers(o, err);
  if (st != FDY_OK) {
    return st;
  }
  if ((uint64_t)o->warmup + o->iterations > UINT32_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "--warmup plus --iterations exceed %u rounds",
                         UINT32_MAX);
  }
  st = check_sizes(o, err);
  if (st != FDY_OK) {
    return st;
  }
  st = check_layers_stream(o, err);
  if (st != FDY_OK) {
    return st;
  }
  if (o->backend != FDY_BENCH_BACKEND_AUTO &&
      o->backend != FDY_BENCH_BACKEND_CPU &&
      o->backend != FDY_BENCH_BACKEND_CUDA) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "unknown backend %d",
                         (int)o->backend);
  }
  if (o->host_mode != FDY_HOST_REGISTERED && o->host_mode != FDY_HOST_STAGED) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "unknown host mode %d",
                         (int)o->host_mode);
  }
  if (o->cuda_device < 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--device must be a non-negative ordinal, got %d",
                         o->cuda_device);
  }
  if (o->backend == FDY_BENCH_BACKEND_CUDA && o->cpu_memory_bytes != 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--cpu-memory applies to the cpu backend only");
  }
  return check_paths(o, err);
}

void fdy_bench_overhead_options_default(fdy_bench_overhead_options *options) {
  *options = (fdy_bench_overhead_options){
      .ops = 1000,
      .op_bytes = 4096,
      .runs = 200,
      .warmup = 20,
  };
}

fdy_status fdy_bench_overhead_check_options(const fdy_bench_overhead_options *o,
                                            fdy_error *err) {
  if (!o) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "options are NULL");
  }
  const char *flag = NULL;
  if (o->ops <= FDY_BENCH_OVERHEAD_SLOTS) {
    flag = "--ops";
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "--ops must exceed %u (the slots of the streamed plan), "
                  "got %" PRIu32,
                  FDY_BENCH_OVERHEAD_SLOTS, o->ops);
  } else if (o->op_bytes == 0 || o->op_bytes % 8 != 0) {
    flag = "--op-bytes";
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "--op-bytes must be a positive multiple of 8, got %" PRIu64,
                  o->op_bytes);
  } else if (o->runs == 0) {
    flag = "--runs";
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "--runs must be positive");
  }
  if (flag) {
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", flag);
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  uint64_t payload = 0;
  if ((uint64_t)o->warmup + o->runs > UINT32_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "--warmup plus --runs exceed %u runs", UINT32_MAX);
  }
  if (fdy_mul_u64(o->op_bytes, o->ops, &payload, NULL) != FDY_OK ||
      payload > SIZE_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "%" PRIu32 " ops of %" PRIu64
                         " bytes overflow a 64-bit byte count",
                         o->ops, o->op_bytes);
  }
  return o->report_path ? bench_check_output("--report", o->report_path, err)
                        : FDY_OK;
}
