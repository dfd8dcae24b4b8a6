/* libFuzzer target for model.safetensors.index.json (seed corpus:
 * fuzz/corpus/index). Each input is the index of a checkpoint directory
 * made once per run in a private temporary directory from the llama3-micro
 * fixture (FOUNDRY_FUZZ_MODEL): its config.json, its model.safetensors, and
 * the same tensors split into model-00001-of-00002.safetensors (layer 0 and
 * the embedding) and model-00002-of-00002.safetensors (the rest), so an
 * index may name one file, two shards or anything else. fdy_llama_open must
 * open the checkpoint or fail with an error, never crash or leak; an opened
 * model holds every tensor of its layout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "layout.h"

#define TARGET "fuzz_index"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void copy_file(const char *name) {
  char from[512];
  snprintf(from, sizeof from, "%s/%s", FOUNDRY_FUZZ_MODEL, name);
  FILE *f = fopen(from, "rb");
  if (!f || fseek(f, 0, SEEK_END) != 0) {
    abort();
  }
  long n = ftell(f);
  char *buf = malloc(n > 0 ? (size_t)n : 1);
  if (n < 0 || !buf || fseek(f, 0, SEEK_SET) != 0 ||
      fread(buf, 1, (size_t)n, f) != (size_t)n) {
    abort();
  }
  fclose(f);
  fuzz_write_file(fuzz_path(TARGET, name), buf, (size_t)n);
  free(buf);
}

/* Writes the two shards of model.safetensors. */
static void write_shards(void) {
  fdy_safetensors *st = NULL;
  if (fdy_safetensors_open(fuzz_path(TARGET, "model.safetensors"), &st, NULL) !=
      FDY_OK) {
    abort();
  }
  size_t n = fdy_safetensors_count(st), counts[2] = {0, 0};
  fdy_st_write_tensor *parts[2] = {calloc(n, sizeof(fdy_st_write_tensor)),
                                   calloc(n, sizeof(fdy_st_write_tensor))};
  if (!parts[0] || !parts[1]) {
    abort();
  }
  for (size_t i = 0; i < n; i++) {
    const fdy_st_tensor *t = fdy_safetensors_at(st, i);
    int which = strstr(t->name, "layers.0.") == NULL &&
                strstr(t->name, "embed_tokens") == NULL;
    parts[which][counts[which]++] = (fdy_st_write_tensor){
        .name = t->name, .dtype = t->dtype, .shape = t->shape, .data = t->data};
  }
  for (int w = 0; w < 2; w++) {
    char name[64];
    snprintf(name, sizeof name, "model-0000%d-of-00002.safetensors", w + 1);
    if (fdy_safetensors_write(fuzz_path(TARGET, name), parts[w], counts[w],
                              NULL) != FDY_OK) {
      abort();
    }
    free(parts[w]);
  }
  fdy_safetensors_close(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool ready;
  if (!ready) {
    copy_file("config.json");
    copy_file("model.safetensors");
    write_shards();
    ready = true;
  }
  fuzz_write_file(fuzz_path(TARGET, "model.safetensors.index.json"), data,
                  size);
  fdy_llama_model *model = NULL;
  fdy_error err;
  if (fdy_llama_open(fuzz_dir(TARGET), &model, &err) != FDY_OK) {
    return 0;
  }
  const fdy_llama_config *config = fdy_llama_model_config(model);
  const fdy_llama_module_quant *quant = fdy_llama_model_quant(model);
  fdy_llama_tensor_spec *specs = NULL;
  size_t n = 0;
  if (fdy_llama_layout_new(config, quant, &specs, &n, NULL) != FDY_OK ||
      fdy_llama_tensor_count(model) != n) {
    abort();
  }
  for (size_t i = 0; i < n; i++) {
    const fdy_st_tensor *t = fdy_llama_model_tensor(model, &specs[i]);
    if (!t || !fdy_shape_equal(t->shape, specs[i].shape)) {
      abort();
    }
  }
  free(specs);
  fdy_llama_close(model);
  return 0;
}
