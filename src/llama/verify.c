/* Verification against reference outputs (expected.safetensors: prompt_ids
 * I32 [T], logits F32 [T, vocab], greedy_ids I32 [N], greedy_logits F32
 * [N, vocab]).
 *
 * The prompt runs as one prefill; its logits are compared with `logits`.
 * The greedy continuation is teacher-forced with the reference's ids: the
 * logits that choose greedy id i are the prompt's last row for i = 0 and the
 * pass over greedy_ids[i - 1] after it, so every row stays comparable even
 * after a disagreement; greedy_matches counts the leading ids whose argmax
 * (computed by the backend) agrees. The session must have been created
 * with all_logits. Relative errors ||a - b|| / ||b|| are accumulated in double.
 *
 * The reference's tensors are read out of its mapping with fdy_host_copy
 * (the ids at once, the logits a row at a time as they are compared), so a
 * reference truncated while verify runs fails with FDY_ERR_IO naming it
 * instead of killing the process with SIGBUS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/host_copy.h"
#include "infer.h"

static fdy_status schema_error(fdy_error *err, const char *tensor,
                               const char *path, const char *what) {
  fdy_error_set(err, FDY_ERR_SCHEMA, "%s: tensor '%s' %s", path, tensor, what);
  if (err) {
    snprintf(err->name, sizeof err->name, "%s", tensor);
  }
  return FDY_ERR_SCHEMA;
}

/* Finds name with dtype and rank; dims[1] must equal vocab for rank 2. */
static fdy_status find_tensor(const fdy_safetensors *st, const char *name,
                              fdy_dtype dtype, uint32_t rank, uint32_t vocab,
                              const fdy_st_tensor **out, fdy_error *err) {
  const char *path = fdy_safetensors_path(st);
  if (fdy_safetensors_find(st, name, out, NULL) != FDY_OK) {
    return schema_error(err, name, path, "is missing");
  }
  const fdy_st_tensor *t = *out;
  if (t->dtype != dtype || t->shape.rank != rank) {
    char what[96];
    snprintf(what, sizeof what, "must be %s of rank %u", fdy_dtype_name(dtype),
             rank);
    return schema_error(err, name, path, what);
  }
  if (rank == 2 && t->shape.dims[1] != vocab) {
    char what[128];
    snprintf(what, sizeof what,
             "has rows of %llu logits but the model's vocabulary is %u",
             (unsigned long long)t->shape.dims[1], vocab);
    schema_error(err, name, path, what);
    if (err) {
      err->expected = vocab;
      err->actual = t->shape.dims[1];
    }
    return FDY_ERR_SCHEMA;
  }
  if (t->shape.dims[0] > UINT32_MAX / 2) {
    return schema_error(err, name, path, "is too long");
  }
  return FDY_OK;
}

/* Copies bytes [offset, offset + bytes) of tensor t out of the reference's
 * mapping into dst; FDY_ERR_IO (name = the file) when the file shrank
 * below them or its storage failed since it was opened. */
static fdy_status read_reference(const fdy_st_tensor *t, uint64_t offset,
                                 uint64_t bytes, void *dst, fdy_error *err) {
  fdy_status st =
      fdy_host_copy(dst, (const unsigned char *)t->data + offset, bytes, err);
  if (st != FDY_OK && err) {
    fdy_error_prefix(err, "%s: tensor '%s'", t->path, t->name);
    snprintf(err->name, sizeof err->name, "%s", t->path);
  }
  return st;
}

static fdy_status read_ids(const fdy_st_tensor *t, uint32_t vocab,
                           const char *path, int32_t **out, fdy_error *err) {
  uint32_t n = (uint32_t)t->shape.dims[0];
  *out = malloc(sizeof **out * (n ? n : 1));
  if (!*out) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status st = read_reference(t, 0, sizeof **out * n, *out, err);
  if (st != FDY_OK) {
    return st;
  }
  for (uint32_t i = 0; i < n; i++) {
    if ((*out)[i] < 0 || (uint32_t)(*out)[i] >= vocab) {
      char what[96];
      snprintf(what, sizeof what,
               "holds id %d at %u, outside the model's vocabulary", (*out)[i],
               i);
      return schema_error(err, t->name, path, what);
    }
  }
  return FDY_OK;
}

/* Adds `rows` rows of vocab logits of ours against rows first, first + 1,
 * ... of ref (each read into ref_row) to the squared sums. */
static fdy_status accumulate(const float *ours, const fdy_st_tensor *ref,
                             uint64_t first, uint64_t rows, uint32_t vocab,
                             float *ref_row, double *diff2, double *ref2,
                             fdy_error *err) {
  uint64_t row_bytes = sizeof *ref_row * vocab;
  for (uint64_t r = 0; r < rows; r++) {
    fdy_status st =
        read_reference(ref, (first + r) * row_bytes, row_bytes, ref_row, err);
    if (st != FDY_OK) {
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
  fdy_safetensors *ref = NULL;
  int32_t *prompt = NULL;
  int32_t *greedy = NULL;
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
  st = fdy_safetensors_open(reference_path, &ref, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  const fdy_st_tensor *t_prompt = NULL, *t_logits = NULL, *t_greedy = NULL,
                      *t_greedy_logits = NULL;
  st = find_tensor(ref, "prompt_ids", FDY_DTYPE_I32, 1, vocab, &t_prompt, err);
  if (st == FDY_OK) {
    st = find_tensor(ref, "logits", FDY_DTYPE_F32, 2, vocab, &t_logits, err);
  }
  if (st == FDY_OK) {
    st =
        find_tensor(ref, "greedy_ids", FDY_DTYPE_I32, 1, vocab, &t_greedy, err);
  }
  if (st == FDY_OK) {
    st = find_tensor(ref, "greedy_logits", FDY_DTYPE_F32, 2, vocab,
                     &t_greedy_logits, err);
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  uint32_t prompt_count = (uint32_t)t_prompt->shape.dims[0];
  uint32_t greedy_count = (uint32_t)t_greedy->shape.dims[0];
  if (prompt_count == 0) {
    st = schema_error(err, "prompt_ids", reference_path, "is empty");
    goto cleanup;
  }
  if (greedy_count == 0) {
    st = schema_error(err, "greedy_ids", reference_path, "is empty");
    goto cleanup;
  }
  if (t_logits->shape.dims[0] != prompt_count) {
    st = schema_error(err, "logits", reference_path,
                      "must have one row per prompt id");
    goto cleanup;
  }
  if (t_greedy_logits->shape.dims[0] != greedy_count) {
    st = schema_error(err, "greedy_logits", reference_path,
                      "must have one row per greedy id");
    goto cleanup;
  }
  st = read_ids(t_prompt, vocab, reference_path, &prompt, err);
  if (st == FDY_OK) {
    st = read_ids(t_greedy, vocab, reference_path, &greedy, err);
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  uint32_t saved = session->position;
  session->position = 0;
  st = fdy_llama_session_check(session, prompt, prompt_count,
                               greedy_count ? greedy_count - 1 : 0, err);
  session->position = saved;
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
  st = accumulate(logits, t_logits, 0, prompt_count, vocab, ref_row, &diff2,
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
    st = accumulate(row, t_greedy_logits, i, 1, vocab, ref_row, &diff2, &ref2,
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
  free(ref_row);
  free(logits);
  free(prompt);
  free(greedy);
  fdy_safetensors_close(ref);
  return st;
}
