/* libFuzzer target for reference files (expected.safetensors as verify
 * reads it; seed corpus: fuzz/corpus/reference). Each input is a whole
 * file, written to a private temporary directory, read for a model of
 * vocabulary 1024 (llama3-micro's, which the seeds come from). Any input
 * must open or fail with an error, never crash or leak; an opened reference
 * must hold what verify relies on: ids inside the vocabulary, one row of
 * logits per id, every logit readable. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "reference.h"

#define VOCAB 1024u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every logit of t, (rows, VOCAB) F32. */
static float logits_sum(const fdy_st_tensor *t, uint32_t rows) {
  if (t->dtype != FDY_DTYPE_F32 || t->bytes != (uint64_t)rows * VOCAB * 4) {
    abort();
  }
  float sum = 0;
  for (uint64_t i = 0; i < (uint64_t)rows * VOCAB; i++) {
    float v;
    memcpy(&v, (const unsigned char *)t->data + 4 * i, sizeof v);
    sum += v;
  }
  return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *input = fuzz_path("fuzz_reference", "expected.safetensors");
  fuzz_write_file(input, data, size);
  fdy_llama_reference ref;
  fdy_error err;
  if (fdy_llama_reference_open(input, VOCAB, &ref, &err) != FDY_OK) {
    if (ref.file || ref.prompt_ids || ref.greedy_ids) {
      abort(); /* a failed open leaves nothing behind */
    }
    return 0;
  }
  if (ref.prompt_count == 0 || ref.greedy_count == 0) {
    abort();
  }
  for (uint32_t i = 0; i < ref.prompt_count; i++) {
    if (ref.prompt_ids[i] < 0 || (uint32_t)ref.prompt_ids[i] >= VOCAB) {
      abort();
    }
  }
  for (uint32_t i = 0; i < ref.greedy_count; i++) {
    if (ref.greedy_ids[i] < 0 || (uint32_t)ref.greedy_ids[i] >= VOCAB) {
      abort();
    }
  }
  volatile float sum = logits_sum(ref.logits, ref.prompt_count) +
                       logits_sum(ref.greedy_logits, ref.greedy_count);
  (void)sum;
  fdy_llama_reference_close(&ref);
  return 0;
}
