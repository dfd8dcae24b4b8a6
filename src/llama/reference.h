/* Private interface of the reference reader of src/llama (reference.c):
 * expected.safetensors as verify reads it, validated against a model's
 * vocabulary before anything runs. Used by verify.c and the fuzz target
 * fuzz/fuzz_reference.c. Not installed. */
#ifndef FOUNDRY_LLAMA_REFERENCE_H
#define FOUNDRY_LLAMA_REFERENCE_H

#include "foundry/safetensors.h"

/* An open reference file (layout in verify.c). The tensors borrow from
 * file; the id arrays are owned. */
typedef struct fdy_llama_reference {
  fdy_safetensors *file;
  int32_t *prompt_ids; /* prompt_count ids, each below the vocabulary */
  uint32_t prompt_count;
  int32_t *greedy_ids; /* greedy_count ids, each below the vocabulary */
  uint32_t greedy_count;
  const fdy_st_tensor *logits;        /* F32 (prompt_count, vocab) */
  const fdy_st_tensor *greedy_logits; /* F32 (greedy_count, vocab) */
} fdy_llama_reference;

/* Opens path (fdy_safetensors_open's checks) and checks the four tensors:
 * prompt_ids and greedy_ids I32 of rank 1, not empty, holding ids below
 * vocab (vocab >= 1); logits and greedy_logits F32 (rows, vocab) with one
 * row per prompt id and per greedy id; at most UINT32_MAX / 2 rows. A
 * missing or wrong tensor is FDY_ERR_SCHEMA with err->name the tensor.
 * On failure *out is left zeroed. */
fdy_status fdy_llama_reference_open(const char *path, uint32_t vocab,
                                    fdy_llama_reference *out, fdy_error *err);

/* Frees what open acquired and zeroes ref; a zeroed ref is a no-op. */
void fdy_llama_reference_close(fdy_llama_reference *ref);

#endif
