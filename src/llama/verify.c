/* Verification against reference outputs (expected.safetensors: prompt_ids
 * I32 [T], logits F32 [T, vocab], greedy_ids I32 [N], greedy_logits F32
 * [N, vocab]), read and checked by reference.c before anything runs.
 *
 * The prompt runs as one prefill; its logits are compared with `logits`.
 * The greedy continuation is teacher-forced with the reference's ids: the
 * logits that choose greedy id i are the prompt's last row for i = 0 and the
 * pass over greedy_ids[i - 1] after it, so every row stays comparable even
 * after a disagreement; greedy_matches counts the leading ids whose argmax
 * (computed by the backend) agrees. The session must have been created
 * with all_logits. Relative errors ||a - b|| / ||b|| are accumulated in double.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/host_copy.h"
#include "infer.h"
#include "reference.h"

/* Adds `rows` rows of vocab logits of ours against rows first, first + 1,
 * ... of ref to the squared sums. Each reference row is read into ref_row
 * through the guarded host copy, so a reference truncated while mapped is
 * FDY_ERR_IO naming the file. */
static fdy_status accumulate(const float *ours, const fdy_st_tensor *ref,
                             uint64_t first, uint64_t rows, uint32_t vocab,
                             float *ref_row, double *diff2, double *ref2,
                             fdy_error *err) {
  uint64_t row_bytes = sizeof *ref_row * vocab;
  for (uint64_t r = 0; r < rows; r++) {
    fdy_status st = fdy_host_copy(
        ref_row, (const unsigned char *)ref->data + (first + r) * row_bytes,
        row_bytes, err);
    if (st != FDY_OK) {
      if (err) {
        fdy_error_prefix(err, "%s: tensor '%s'", ref->path, ref->name);
        snprintf(err->name, sizeof err->name, "%s", ref->path);
      }
      return st;
    }
    for (uint32_t j = 0; j < vocab; j++) {
      double b = ref_row[j];
      double d = (double)ours[r * vocab + j] - b;
      *diff2 += d * d;
      *ref2 += b * b;
    }
  }
  return FDY_OK;
}

static double relative(double diff2, double ref2) {
  if (ref2 == 0.0) {
    return diff2 == 0.0 ? 0.0 : INFINITY;
  }
  return sqrt(diff2) / sqrt(ref2);
}

fdy_status fdy_llama_verify(fdy_llama_session *session,
                            const char *reference_path, double tolerance,
                            fdy_llama_verify_result *out, fdy_error *err) {
  fdy_status st = FDY_OK;
  fdy_llama_reference ref = {0};
  float *logits = NULL;
  float *ref_row = NULL;
  if (!session || !reference_path || !out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_verify needs a session, a reference path "
                         "and an output");
  }
  memset(out, 0, sizeof *out);
  if (!(tolerance >= 0.0) || isinf(tolerance)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the tolerance must be a finite non-negative number");
  }
  if (!session->all_logits) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "verification needs a session created with "
                         "all_logits");
  }
  uint32_t vocab = session->config->vocab_size;
  st = fdy_llama_reference_open(reference_path, vocab, &ref, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  uint32_t prompt_count = ref.prompt_count;
  uint32_t greedy_count = ref.greedy_count;
  const int32_t *prompt = ref.prompt_ids;
  const int32_t *greedy = ref.greedy_ids;
  st = fdy_llama_session_check(session, prompt, prompt_count, 0,
                               greedy_count ? greedy_count - 1 : 0, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  logits = malloc(sizeof *logits * (uint64_t)prompt_count * vocab);
  ref_row = malloc(sizeof *ref_row * vocab);
  if (!logits || !ref_row) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                       "out of memory for %u rows of logits", prompt_count);
    goto cleanup;
  }

  fdy_llama_session_reset(session);
  st = fdy_llama_session_forward(session, prompt, prompt_count, logits, NULL,
                                 err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  double diff2 = 0.0, ref2 = 0.0;
  st = accumulate(logits, ref.logits, 0, prompt_count, vocab, ref_row, &diff2,
                  &ref2, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  out->logits_relative_error = relative(diff2, ref2);

  /* the last prompt row chooses the first greedy id; reuse row 0 after it */
  float *row = logits;
  if (prompt_count > 1) {
    memmove(row, logits + (uint64_t)(prompt_count - 1) * vocab,
            sizeof *row * vocab);
  }
  diff2 = 0.0;
  ref2 = 0.0;
  bool agreeing = true;
  for (uint32_t i = 0; i < greedy_count; i++) {
    if (i > 0) {
      st =
          fdy_llama_session_forward(session, &greedy[i - 1], 1, NULL, row, err);
      if (st != FDY_OK) {
        goto cleanup;
      }
    }
    st = accumulate(row, ref.greedy_logits, i, 1, vocab, ref_row, &diff2, &ref2,
                    err);
    if (st != FDY_OK) {
      goto cleanup;
    }
    agreeing = agreeing && fdy_llama_session_next(session) == greedy[i];
    out->greedy_matches += agreeing;
  }
  out->greedy_relative_error = relative(diff2, ref2);
  out->prompt_tokens = prompt_count;
  out->greedy_tokens = greedy_count;
  out->passed = out->logits_relative_error <= tolerance &&
                out->greedy_relative_error <= tolerance &&
                out->greedy_matches == greedy_count;

cleanup:
  free(logits);
  free(ref_row);
  fdy_llama_reference_close(&ref);
  return st;
}
