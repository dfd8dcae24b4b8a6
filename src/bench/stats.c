/* Statistics of `foundry bench`: sample summaries, the seeded SplitMix64
 * resampler and percentile-bootstrap intervals (see foundry/bench.h for the
 * exact scheme, which scripts/bench_summary.py reproduces). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"
#include "foundry/bench.h"

uint64_t fdy_splitmix64_next(fdy_splitmix64 *g) {
  g->state += 0x9E3779B97F4A7C15ull;
  uint64_t z = g->state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fdy_bench_stream_seed(uint64_t seed, uint64_t stream) {
  /* The (stream + 1)-th output of SplitMix64(seed), computed directly. */
  fdy_splitmix64 g = {seed + stream * 0x9E3779B97F4A7C15ull};
  return fdy_splitmix64_next(&g);
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bench_sort(double *v, size_t n) {
  qsort(v, n, sizeof *v, compare_double);
}

/* Median of values sorted in place. */
static double median_inplace(double *v, size_t n) {
  bench_sort(v, n);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

fdy_status fdy_bench_median(const double *x, size_t n, double *out,
                            fdy_error *err) {
  if (n == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the median of an empty sample is undefined");
  }
  double *v = malloc(n * sizeof *v);
  if (!v) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  memcpy(v, x, n * sizeof *v);
  *out = median_inplace(v, n);
  free(v);
  return FDY_OK;
}

double fdy_bench_mean(const double *x, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    sum += x[i];
  }
  return sum / (double)n;
}

/* Sample standard deviation about a mean already computed. */
static double stddev_about(const double *x, size_t n, double mean) {
  if (n < 2) {
    return 0.0;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    sum += (x[i] - mean) * (x[i] - mean);
  }
  return sqrt(sum / (double)(n - 1));
}

double fdy_bench_stddev(const double *x, size_t n) {
  return n < 2 ? 0.0 : stddev_about(x, n, fdy_bench_mean(x, n));
}

fdy_status fdy_bench_describe(const double *x, size_t n, fdy_bench_stats *out,
                              fdy_error *err) {
  fdy_bench_stats s = {.n = n};
  fdy_status st = fdy_bench_median(x, n, &s.median, err);
  if (st != FDY_OK) {
    return st;
  }
  s.mean = fdy_bench_mean(x, n);
  s.stddev = stddev_about(x, n, s.mean);
  s.min = s.max = x[0];
  for (size_t i = 1; i < n; i++) {
    s.min = x[i] < s.min ? x[i] : s.min;
    s.max = x[i] > s.max ? x[i] : s.max;
  }
  *out = s;
  return FDY_OK;
}

double fdy_bench_percentile_sorted(const double *sorted, size_t n, double p) {
  double h = (double)(n - 1) * p;
  size_t i = (size_t)floor(h);
  if (i >= n - 1) {
    return sorted[n - 1];
  }
  return sorted[i] + (h - (double)i) * (sorted[i + 1] - sorted[i]);
}

static fdy_status check_bootstrap(size_t n, uint32_t resamples,
                                  fdy_error *err) {
  if (n == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "cannot bootstrap an empty sample");
  }
  if (resamples == 0 || resamples > FDY_BENCH_MAX_RESAMPLES) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "bootstrap resamples must be from 1 to %u, got %u",
                         FDY_BENCH_MAX_RESAMPLES, resamples);
  }
  return FDY_OK;
}

static void interval_of(double *stats, uint32_t resamples,
                        fdy_bench_interval *out) {
  qsort(stats, resamples, sizeof *stats, compare_double);
  double tail = (1.0 - FDY_BENCH_CONFIDENCE) / 2.0;
  out->low = fdy_bench_percentile_sorted(stats, resamples, tail);
  out->high = fdy_bench_percentile_sorted(stats, resamples, 1.0 - tail);
}

fdy_status fdy_bench_bootstrap(const double *x, size_t n,
                               fdy_bench_statistic stat, uint32_t resamples,
                               uint64_t stream_state, fdy_bench_interval *out,
                               fdy_error *err) {
  fdy_status st = check_bootstrap(n, resamples, err);
  if (st != FDY_OK) {
    return st;
  }
  double *draw = malloc(n * sizeof *draw);
  double *stats = malloc((size_t)resamples * sizeof *stats);
  if (!draw || !stats) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  fdy_splitmix64 g = {stream_state};
  for (uint32_t b = 0; b < resamples; b++) {
    for (size_t i = 0; i < n; i++) {
      draw[i] = x[fdy_splitmix64_next(&g) % n];
    }
    stats[b] = stat == FDY_BENCH_STAT_MEAN ? fdy_bench_mean(draw, n)
                                           : median_inplace(draw, n);
  }
  interval_of(stats, resamples, out);
cleanup:
  free(draw);
  free(stats);
  return st;
}

fdy_status fdy_bench_paired_speedup(const double *base, const double *x,
                                    size_t n, uint32_t resamples,
                                    uint64_t stream_state, double *point,
                                    fdy_bench_interval *out, fdy_error *err) {
  fdy_status st = check_bootstrap(n, resamples, err);
  if (st != FDY_OK) {
    return st;
  }
  double *db = malloc(n * sizeof *db);
  double *dx = malloc(n * sizeof *dx);
  double *stats = malloc((size_t)resamples * sizeof *stats);
  if (!db || !dx || !stats) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  memcpy(db, base, n * sizeof *db);
  memcpy(dx, x, n * sizeof *dx);
  *point = median_inplace(db, n) / median_inplace(dx, n);
  fdy_splitmix64 g = {stream_state};
  for (uint32_t b = 0; b < resamples; b++) {
    for (size_t i = 0; i < n; i++) {
      size_t r = (size_t)(fdy_splitmix64_next(&g) % n);
      db[i] = base[r];
      dx[i] = x[r];
    }
    stats[b] = median_inplace(db, n) / median_inplace(dx, n);
  }
  interval_of(stats, resamples, out);
cleanup:
  free(db);
  free(dx);
  free(stats);
  return st;
}

void fdy_bench_fill_layer(void *dst, uint64_t weight_bytes, uint64_t seed,
                          uint32_t layer) {
  fdy_splitmix64 g = {
      fdy_bench_stream_seed(seed, FDY_BENCH_PAYLOAD_STREAM + layer)};
  unsigned char *p = dst;
  uint64_t full = weight_bytes / 8;
  for (uint64_t i = 0; i < full; i++) {
    uint64_t w = fdy_splitmix64_next(&g);
    for (int k = 0; k < 8; k++) {
      p[i * 8 + (uint64_t)k] = (unsigned char)(w >> (8 * k));
    }
  }
  uint64_t w = fdy_splitmix64_next(&g);
  for (uint64_t k = 0; k < weight_bytes % 8; k++) {
    p[full * 8 + k] = (unsigned char)(w >> (8 * k));
  }
}
