/* The reference reader (reference.h): expected.safetensors opened and every
 * tensor verify reads checked against the model's vocabulary, so that a
 * bad reference fails before the model runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/host_copy.h"
#include "reference.h"

static fdy_status schema_error(fdy_error *err, const char *tensor,
                               const char *path, const char *what) {
  return fdy_error_setf(err, FDY_ERR_SCHEMA, tensor, 0, 0, "%s: tensor '%s' %s",
                        path, tensor, what);
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

/* Copies the n ids of t (I32, rank 1, n >= 1) through the guarded host
 * copy (a file truncated since it was mapped is FDY_ERR_IO naming it) and
 * checks each against the vocabulary. */
static fdy_status read_ids(const fdy_st_tensor *t, uint32_t n, uint32_t vocab,
                           const char *path, int32_t **out, fdy_error *err) {
  *out = malloc(sizeof **out * n);
  if (!*out) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status st = fdy_host_copy(*out, t->data, sizeof **out * n, err);
  if (st != FDY_OK) {
    if (err) {
      fdy_error_prefix(err, "%s: tensor '%s'", path, t->name);
      snprintf(err->name, sizeof err->name, "%s", path);
    }
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

fdy_status fdy_llama_reference_open(const char *path, uint32_t vocab,
                                    fdy_llama_reference *out, fdy_error *err) {
  fdy_llama_reference ref = {0};
  const fdy_st_tensor *prompt = NULL, *greedy = NULL;
  memset(out, 0, sizeof *out);
  fdy_status st = fdy_safetensors_open(path, &ref.file, err);
  if (st == FDY_OK) {
    st = find_tensor(ref.file, "prompt_ids", FDY_DTYPE_I32, 1, vocab, &prompt,
                     err);
  }
  if (st == FDY_OK) {
    st = find_tensor(ref.file, "logits", FDY_DTYPE_F32, 2, vocab, &ref.logits,
                     err);
  }
  if (st == FDY_OK) {
    st = find_tensor(ref.file, "greedy_ids", FDY_DTYPE_I32, 1, vocab, &greedy,
                     err);
  }
  if (st == FDY_OK) {
    st = find_tensor(ref.file, "greedy_logits", FDY_DTYPE_F32, 2, vocab,
                     &ref.greedy_logits, err);
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  ref.prompt_count = (uint32_t)prompt->shape.dims[0];
  ref.greedy_count = (uint32_t)greedy->shape.dims[0];
  if (ref.prompt_count == 0) {
    st = schema_error(err, "prompt_ids", path, "is empty");
    goto cleanup;
  }
  if (ref.greedy_count == 0) {
    st = schema_error(err, "greedy_ids", path, "is empty");
    goto cleanup;
  }
  if (ref.logits->shape.dims[0] != ref.prompt_count) {
    st = schema_error(err, "logits", path, "must have one row per prompt id");
    goto cleanup;
  }
  if (ref.greedy_logits->shape.dims[0] != ref.greedy_count) {
    st = schema_error(err, "greedy_logits", path,
                      "must have one row per greedy id");
    goto cleanup;
  }
  st = read_ids(prompt, ref.prompt_count, vocab, path, &ref.prompt_ids, err);
  if (st == FDY_OK) {
    st = read_ids(greedy, ref.greedy_count, vocab, path, &ref.greedy_ids, err);
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  *out = ref;
  return FDY_OK;
cleanup:
  fdy_llama_reference_close(&ref);
  return st;
}

void fdy_llama_reference_close(fdy_llama_reference *ref) {
  fdy_safetensors_close(ref->file);
  free(ref->prompt_ids);
  free(ref->greedy_ids);
  memset(ref, 0, sizeof *ref);
}
