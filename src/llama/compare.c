/* One session against another (a backend against the CPU backend): the
 * prompt's logits by relative error, then greedy steps teacher-forced with
 * the reference's ids, each with the reference's top-2 margin and the
 * largest absolute logit difference. Sums are accumulated in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

void fdy_llama_compare_free(fdy_llama_compare_result *result) {
  if (result) {
    free(result->steps);
    memset(result, 0, sizeof *result);
  }
}

/* The top-1 minus top-2 logit of a row (0 for a vocabulary of one). */
static double top2_margin(const float *row, uint32_t vocab) {
  double first = -INFINITY, second = -INFINITY;
  for (uint32_t j = 0; j < vocab; j++) {
    double v = row[j];
    if (v > first) {
      second = first;
      first = v;
    } else if (v > second) {
      second = v;
    }
  }
  return vocab > 1 ? first - second : 0.0;
}

static double max_abs_diff(const float *a, const float *b, uint32_t vocab) {
  double m = 0.0;
  for (uint32_t j = 0; j < vocab; j++) {
    double d = fabs((double)a[j] - (double)b[j]);
    if (!(d <= m)) { /* NaN counts as infinitely different */
      m = isnan(d) ? INFINITY : d;
    }
  }
  return m;
}

static fdy_status check(const fdy_llama_session *a, const fdy_llama_session *b,
                        const int32_t *prompt, uint32_t prompt_count,
                        uint32_t steps, double tolerance, fdy_error *err) {
  if (!a || !b || !prompt || prompt_count == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_compare needs two sessions and a "
                         "non-empty prompt");
  }
  if (!a->all_logits || !b->all_logits) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_compare needs sessions created with "
                         "all_logits");
  }
  if (a->config->vocab_size != b->config->vocab_size) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the sessions' vocabularies differ (%u and %u)",
                         a->config->vocab_size, b->config->vocab_size);
  }
  if (!isfinite(tolerance) || tolerance < 0.0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the tolerance must be finite and non-negative");
  }
  uint64_t extra = steps > 0 ? steps - 1 : 0;
  const fdy_llama_session *sessions[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    fdy_status st = fdy_llama_session_check(sessions[i], prompt, prompt_count,
                                            0, extra, err);
    if (st != FDY_OK) {
      return st;
    }
  }
  return FDY_OK;
}

fdy_status fdy_llama_compare(fdy_llama_session *session,
                             fdy_llama_session *reference,
                             const int32_t *prompt, uint32_t prompt_count,
                             uint32_t steps, double tolerance,
                             fdy_llama_compare_result *out, fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_compare needs an output");
  }
  memset(out, 0, sizeof *out);
  fdy_status st =
      check(session, reference, prompt, prompt_count, steps, tolerance, err);
  if (st != FDY_OK) {
    return st;
  }
  uint32_t vocab = session->config->vocab_size;
  size_t rows = (size_t)prompt_count * vocab;
  float *ours = malloc(sizeof *ours * rows);
  float *ref = malloc(sizeof *ref * rows);
  out->steps = calloc(steps ? steps : 1, sizeof *out->steps);
  if (!ours || !ref || !out->steps) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (st == FDY_OK) {
    fdy_llama_session_reset(session);
    fdy_llama_session_reset(reference);
    st = fdy_llama_session_forward(session, prompt, prompt_count, ours, NULL,
                                   err);
  }
  if (st == FDY_OK) {
    st = fdy_llama_session_forward(reference, prompt, prompt_count, ref, NULL,
                                   err);
  }
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; st == FDY_OK && i < rows; i++) {
    double d = (double)ours[i] - (double)ref[i];
    diff2 += d * d;
    ref2 += (double)ref[i] * (double)ref[i];
  }
  /* step 0 reads the prompt's last rows; later steps one row each */
  const float *a = ours + rows - vocab, *b = ref + rows - vocab;
  for (uint32_t k = 0; st == FDY_OK && k < steps; k++) {
    if (k > 0) {
      int32_t fed = out->steps[k - 1].reference_id;
      st = fdy_llama_session_forward(session, &fed, 1, NULL, ours, err);
      if (st == FDY_OK) {
        st = fdy_llama_session_forward(reference, &fed, 1, NULL, ref, err);
      }
      a = ours;
      b = ref;
    }
    if (st == FDY_OK) {
      fdy_llama_compare_step *s = &out->steps[k];
      s->reference_id = fdy_llama_session_next(reference);
      s->id = fdy_llama_session_next(session);
      s->margin = top2_margin(b, vocab);
      s->max_abs_diff = max_abs_diff(a, b, vocab);
      s->must_agree = s->margin > 2.0 * s->max_abs_diff;
      if (!(s->max_abs_diff <= out->max_abs_diff)) {
        out->max_abs_diff = s->max_abs_diff;
      }
    }
  }
  free(ours);
  free(ref);
  if (st != FDY_OK) {
    fdy_llama_compare_free(out);
    return st;
  }
  out->prompt_tokens = prompt_count;
  out->step_count = steps;
  out->logits_relative_error =
      ref2 == 0.0 ? (diff2 == 0.0 ? 0.0 : INFINITY) : sqrt(diff2 / ref2);
  out->logits_ok = out->logits_relative_error <= tolerance;
  out->steps_ok = true;
  for (uint32_t k = 0; k < steps; k++) {
    const fdy_llama_compare_step *s = &out->steps[k];
    if (s->must_agree && s->id != s->reference_id) {
      out->steps_ok = false;
    }
  }
  return FDY_OK;
}
