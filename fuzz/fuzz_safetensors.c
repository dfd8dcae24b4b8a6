/* libFuzzer target for the safetensors reader (seed corpus:
 * fuzz/corpus/safetensors). Each input is a whole file, written to a
 * private temporary directory because the reader maps a file. Any input
 * must open or fail with an error, never crash or leak. An opened file must
 * keep its promises (every tensor inside the file, findable by name, its
 * bytes readable) and survive a round trip through the writer: the file it
 * writes opens with the same tensors and bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "foundry/safetensors.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char output[512];

/* Every tensor inside the file and its bytes readable; returns their sum so
 * that the reads are not optimized away. */
static unsigned check_open(const fdy_safetensors *st, uint64_t file_size) {
  unsigned sum = 0;
  for (size_t i = 0; i < fdy_safetensors_count(st); i++) {
    const fdy_st_tensor *t = fdy_safetensors_at(st, i);
    const fdy_st_tensor *found = NULL;
    uint64_t bytes = 0;
    if (fdy_safetensors_find(st, t->name, &found, NULL) != FDY_OK ||
        found != t || t->file_offset > file_size ||
        t->bytes > file_size - t->file_offset ||
        fdy_tensor_bytes(t->dtype, t->shape, &bytes, NULL) != FDY_OK ||
        bytes != t->bytes) {
      abort();
    }
    const unsigned char *p = t->data;
    for (uint64_t b = 0; b < t->bytes; b++) {
      sum += p[b];
    }
  }
  return sum;
}

/* Writes st's tensors to output and checks that they read back alike. */
static void round_trip(const fdy_safetensors *st) {
  size_t n = fdy_safetensors_count(st);
  fdy_st_write_tensor *w = calloc(n ? n : 1, sizeof *w);
  fdy_safetensors *back = NULL;
  fdy_error err;
  if (!w) {
    abort();
  }
  for (size_t i = 0; i < n; i++) {
    const fdy_st_tensor *t = fdy_safetensors_at(st, i);
    w[i] = (fdy_st_write_tensor){t->name, t->dtype, t->shape, t->data};
  }
  unlink(output);
  if (fdy_safetensors_write(output, w, n, &err) != FDY_OK ||
      fdy_safetensors_open(output, &back, &err) != FDY_OK ||
      fdy_safetensors_count(back) != n) {
    abort(); /* the reader accepted what the writer cannot reproduce */
  }
  for (size_t i = 0; i < n; i++) {
    const fdy_st_tensor *t = fdy_safetensors_at(st, i);
    const fdy_st_tensor *u = NULL;
    if (fdy_safetensors_find(back, t->name, &u, NULL) != FDY_OK ||
        u->dtype != t->dtype || !fdy_shape_equal(u->shape, t->shape) ||
        u->bytes != t->bytes ||
        (t->bytes > 0 && memcmp(u->data, t->data, t->bytes) != 0)) {
      abort();
    }
  }
  fdy_safetensors_close(back);
  free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!output[0]) {
    snprintf(output, sizeof output, "%s",
             fuzz_path("fuzz_safetensors", "out.safetensors"));
  }
  const char *input = fuzz_path("fuzz_safetensors", "in.safetensors");
  fuzz_write_file(input, data, size);
  fdy_safetensors *st = NULL;
  fdy_error err;
  if (fdy_safetensors_open(input, &st, &err) != FDY_OK) {
    return 0;
  }
  volatile unsigned sum = check_open(st, size);
  (void)sum;
  round_trip(st);
  fdy_safetensors_close(st);
  return 0;
}
