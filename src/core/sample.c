/* SAMPLE's definition (include/foundry/ops.h) on one row on the host: the
 * CPU backend's kernel draws with it, and speculative sampling reads the
 * same filtered distribution from it. The arithmetic every backend must do
 * alike is src/core/sample_math.h's. */
#include <math.h>

#include "foundry/ops.h"
#include "sample_math.h"

/* Whether logit a beats the best logit b: larger, and NaN loses to any
 * number (ARGMAX's rule; the lowest id wins ties). */
static bool beats(float a, float b) {
  return a > b || (isnan(b) && !isnan(a));
}

/* A row's logits (and their weights when computed ahead, else NULL),
 * maximum (as a double), temperature and the thresholds of its filters
 * (min_key: top-k; min_order: top-p; min_p). */
typedef struct sample_filter {
  const float *x;
  const double *weights;
  uint64_t n;
  double m, t, min_p;
  uint64_t min_key;
  uint32_t min_order;
} sample_filter;

static double weight_of(const sample_filter *f, uint64_t i) {
  return f->weights ? f->weights[i] : fdy_sample_weight(f->x[i], f->m, f->t);
}

static bool sample_kept(const sample_filter *f, uint64_t i, double w) {
  return fdy_sample_key(f->x[i], (uint32_t)i) >= f->min_key &&
         fdy_sample_order(f->x[i]) >= f->min_order && w >= f->min_p;
}

/* The sum of the weights of the kept ids whose logit bits lie above
 * `above` (every kept id when not strictly): chunk sums in id order,
 * summed in chunk order. */
static double sample_sum(const sample_filter *f, uint32_t above,
                         bool strictly) {
  double total = 0.0;
  for (uint64_t c = 0; c < f->n; c += FDY_SAMPLE_CHUNK) {
    uint64_t stop = c + FDY_SAMPLE_CHUNK < f->n ? c + FDY_SAMPLE_CHUNK : f->n;
    double chunk = 0.0;
    for (uint64_t i = c; i < stop; i++) {
      double w = weight_of(f, i);
      if (sample_kept(f, i, w) &&
          (!strictly || fdy_sample_order(f->x[i]) > above)) {
        chunk += w;
      }
    }
    total += chunk;
  }
  return total;
}

/* The k-th largest key of the row (k >= 1): a radix select, 8 bits a
 * pass from the top. */
static uint64_t sample_kth_key(const float *x, uint64_t n, uint32_t k) {
  uint64_t prefix = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    uint32_t counts[256] = {0};
    uint64_t mask = shift == 56 ? 0 : ~0ull << (shift + 8);
    for (uint64_t i = 0; i < n; i++) {
      uint64_t key = fdy_sample_key(x[i], (uint32_t)i);
      if ((key & mask) == prefix) {
        counts[(key >> shift) & 0xff]++;
      }
    }
    uint32_t digit = 255;
    while (counts[digit] < k) {
      k -= counts[digit];
      digit--;
    }
    prefix |= (uint64_t)digit << shift;
  }
  return prefix;
}

static uint64_t argmax_of(const float *x, uint64_t n) {
  uint64_t a = 0;
  for (uint64_t i = 1; i < n; i++) {
    if (beats(x[i], x[a])) {
      a = i;
    }
  }
  return a;
}

/* The filter of a valid, non-greedy row p whose argmax a has a finite
 * logit: top-k, then top-p, then min-p, as SAMPLE defines them; weights,
 * when not NULL, holds the n weights computed ahead. */
static sample_filter filter_of(const float *x, const double *weights,
                               uint64_t n, uint64_t a,
                               const fdy_sample_row *p) {
  sample_filter f = {.x = x,
                     .weights = weights,
                     .n = n,
                     .m = (double)x[a],
                     .t = (double)p->temperature,
                     .min_p = 0.0,
                     .min_key = 1,
                     .min_order = 0};
  if (p->top_k != 0 && p->top_k < n) {
    uint64_t kth = sample_kth_key(x, n, p->top_k);
    f.min_key = kth > 1 ? kth : 1;
  }
  if (p->top_p > 0.0f && p->top_p < 1.0f) {
    double limit = (double)p->top_p * sample_sum(&f, 0, false);
    uint32_t lo = 0, hi = UINT32_MAX; /* the smallest b with sum < limit */
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (sample_sum(&f, mid, true) < limit) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    f.min_order = lo;
  }
  f.min_p = (double)p->min_p;
  return f;
}

int32_t fdy_sample_draw_row(const float *x, uint64_t n, const uint32_t *words) {
  fdy_sample_row p = fdy_sample_row_of(words);
  if (!fdy_sample_row_valid(&p)) {
    return -1;
  }
  uint64_t a = argmax_of(x, n);
  if (fdy_sample_row_greedy(&p) || !fdy_sample_finite(x[a])) {
    return (int32_t)a;
  }
  sample_filter f = filter_of(x, NULL, n, a, &p);
  double target =
      fdy_sample_uniform_of(p.seed, p.counter) * sample_sum(&f, 0, false);
  double run = 0.0;
  int32_t last = (int32_t)a;
  for (uint64_t c = 0; c < n; c += FDY_SAMPLE_CHUNK) {
    uint64_t stop = c + FDY_SAMPLE_CHUNK < n ? c + FDY_SAMPLE_CHUNK : n;
    double chunk = 0.0;
    for (uint64_t i = c; i < stop; i++) {
      double w = fdy_sample_weight(x[i], f.m, f.t);
      if (sample_kept(&f, i, w)) {
        chunk += w;
        last = (int32_t)i;
        if (run + chunk > target) {
          return (int32_t)i;
        }
      }
    }
    run += chunk;
  }
  return last;
}

bool fdy_sample_probabilities(const float *x, uint64_t n,
                              const fdy_sample_params *params, double *probs) {
  uint32_t words[FDY_SAMPLE_FIELDS];
  fdy_sample_set_row(words, 0, params, 0);
  fdy_sample_row p = fdy_sample_row_of(words);
  if (n == 0 || !fdy_sample_row_valid(&p)) {
    return false;
  }
  uint64_t a = argmax_of(x, n);
  if (fdy_sample_row_greedy(&p) || !fdy_sample_finite(x[a])) {
    for (uint64_t i = 0; i < n; i++) {
      probs[i] = i == a ? 1.0 : 0.0;
    }
    return true;
  }
  for (uint64_t i = 0; i < n; i++) {
    probs[i] = fdy_sample_weight(x[i], (double)x[a], (double)p.temperature);
  }
  sample_filter f = filter_of(x, probs, n, a, &p);
  double total = sample_sum(&f, 0, false);
  for (uint64_t i = 0; i < n; i++) {
    probs[i] = sample_kept(&f, i, probs[i]) ? probs[i] / total : 0.0;
  }
  return true;
}
